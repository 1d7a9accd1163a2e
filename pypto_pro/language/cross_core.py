"""Professional mode's cube <-> vector handoffs through GM workspace slots: how its accesses are marked.

The flags themselves come from the shared pass ``pypto.passes.cross_core`` (protocol and guarantees
there). Here: a workspace slot is one handoff buffer; a *use* of it is everything done with it
between two acquisitions by ``group.next()`` / ``group[i]``, bracketed in the statement list where
it was acquired; the slots of one tile group may share a flag pair when the machine's flags do not
give each slot its own (both sections take a group's slots round-robin in the same order). With a
pair per slot, a mismatch in the two sections' slot order shows as a deadlock in the simulator; with
a shared pair, as a GM race in the simulator's checks.
"""
from __future__ import annotations

from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer, HandoffError, HandoffGroup, \
    insert_handoff_flags

from .errors import SyncError


def handoff_attrs(t) -> dict | None:
    """The Instr attrs marking a load from / store to ``t`` (a TensorValue) when ``t`` is a workspace slot."""
    slot = t.slot
    if slot is None:
        return None
    g = slot.group
    group = HandoffGroup(g.uid, f"workspace group {g.name}", g.span) if g is not None else None
    use_id, home = t.use
    buffer = HandoffBuffer(slot.uid, f"workspace slot {slot.name}", 1, group, slot.span)
    return {HANDOFF: HandoffAccess(buffer, use_id, home)}


def cross_core_sync(blocks, machine) -> None:
    """The cross-core flags of a parsed kernel's sections for ``machine``, with Professional mode's
    error rendering."""
    try:
        insert_handoff_flags(blocks, machine)
    except HandoffError as e:
        raise SyncError(e.message, e.where, hint=e.hint) from None

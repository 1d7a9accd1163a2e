"""Professional mode's automatic synchronisation: cross-core flags, then the shared pipe-sync pass
``pypto.passes.pipe_sync`` on each section's block, with the resource rule extended by mutex ids (the
slots of one memory space that share a mutex id are one resource) and the loop-body copies of the
parser's unrolling, then the vector pipe's barriers (``pypto.passes.vector_barriers``). A kernel that
calls any ``pl.system.*`` primitive (or jit(auto_sync=False)) gets none of this: its author orders it."""
from __future__ import annotations

from pypto.errors import SyncError as _PassSyncError
from pypto.passes.pipe_sync import block_resources, synchronize as synchronize_pipes
from pypto.passes.vector_barriers import insert_barriers

from .errors import Span, SyncError


def mutex_keys(section) -> dict:
    """decl name -> (memory space, mutex id) for the declarations of slots that have a mutex id."""
    return {name: (str(slot.space), slot.mutex_id) for name, slot in section.slot_of.items()
            if slot.mutex_id is not None}


def synchronize_block(block, section, machine, copy_of=None, loop_src=None) -> dict:
    resources = block_resources(block, tied=mutex_keys(section))
    try:
        events = synchronize_pipes(block, machine, resources, copy_of=copy_of, loop_src=loop_src, defer_sets=True)
    except _PassSyncError as e:
        at = Span(e.loc.file, e.loc.line, (e.loc.col or 1) - 1, None, e.loc.func) if e.loc else None
        raise SyncError(e.message, at, hint=e.hint) from None
    insert_barriers(block)
    return events


def synchronize(blocks, parser, machine) -> dict:
    from .cross_core import cross_core_sync
    cross_core_sync(blocks, machine)
    events = {}
    for b in blocks:
        events[b.name] = synchronize_block(b, parser.sections[b.core], machine, parser.copy_of, parser.loop_src)
    return events

"""Cross-core handoff: the cube <-> vector flags around GM workspace buffers (Block IR -> Block IR).

IR in: the blocks of one kernel. Every TSTORE to and TLOAD from a GM workspace buffer that one core
type hands to the other carries ``attrs[HANDOFF] = HandoffAccess(buffer, use, home)``: a TSTORE writes
the buffer, a TLOAD reads it. The front end marks; this pass is the only place that knows the protocol.

IR out: the same blocks, marks removed, with CrossCoreWaitFlag / CrossCoreSetFlag statements added
(nothing else moves). A buffer that only one block touches gets no flags.

Protocol. Each buffer has two counting flags, ``full`` (writer -> reader) and ``empty`` (reader ->
writer). A *use* (the accesses whose marks share ``use``) is bracketed once, in its *home* statement
list: the writer waits ``empty`` before the first statement holding an access and sets ``full``
after the last; the reader waits ``full`` and sets ``empty`` the same way. The home is the mark's
``home`` when given (Professional mode: the list where the slot was acquired), else the innermost
list holding every access of the use. Both sides must use a buffer's uses in the same order; the
k-th ``full`` is then the k-th write.

Guarantees:
- every set has its wait whatever the trip counts: the reader's block starts with ``depth`` sets of
  ``empty`` per buffer (one per slot it rotates through) and the writer's block ends with as many
  waits of ``empty``, which take the tokens its last uses left;
- flag ids lie in 0 .. machine.cross_core_flags - 1: a pair per buffer when the pairs fit, else one
  pair per buffer group (a group's buffers are used round-robin, so a counter still pairs the k-th
  full with the k-th write), else a HandoffError; no counter is asked to hold more than
  machine.cross_core_max_pending sets (both figures come from the machine file);
- a2a3 "mode 2": a cube set reaches every vector sub-block of the cluster and a cube wait needs the
  set of every sub-block, so on the vector side a flag is never placed under an ``if`` on the
  sub-block index: the bracket goes around that ``if`` (both sub-blocks signal, one of them stores);
- misuse is a HandoffError (a pypto SyncError) naming the buffer: written and read on one side,
  written (or read) by both, an access outside its use's home, too many flags, a group too deep.

Flag pairs are numbered in the order the buffers first appear, block by block in the given order.
The protocol is the same on chip (a5: the buffer is a FIFO in the reader's UB / L1, its accesses TPUSH /
TPOP, passes/on_chip_handoff.py): the flags then count FIFO slots instead of GM slots.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..errors import SourceLoc, SyncError
from ..ir.block import SUBBLOCK_IDX, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, If, Instr
from .on_chip_handoff import plan_on_chip

HANDOFF = "_handoff"     # the Instr attribute holding a HandoffAccess


@dataclass(frozen=True)
class HandoffGroup:
    """Buffers used round-robin in the same order on both sides: they may share one flag pair."""
    key: object
    name: str                       # how errors name the group, e.g. "workspace group ws"
    where: object = None            # its source position (a SourceLoc, or the front end's span with .loc)


@dataclass(frozen=True)
class HandoffBuffer:
    """One GM workspace buffer handed between the core types; both sides' marks carry equal buffers."""
    key: object
    name: str                       # how errors name it, e.g. "workspace slot ws[1]"
    depth: int = 1                  # slots it rotates through: the ``empty`` tokens the reader starts with
    group: HandoffGroup | None = None
    where: object = None


@dataclass(frozen=True)
class HandoffAccess:
    buffer: HandoffBuffer
    use: int                        # accesses with one use are bracketed once; uses are bracketed in this order
    home: list | None = field(default=None, compare=False)


class HandoffError(SyncError):
    """A handoff the protocol cannot serve; ``where`` is the front end's position of the buffer or group."""

    def __init__(self, message: str, where=None, hint: str | None = None):
        self.where = where
        loc = where if isinstance(where, SourceLoc) or where is None else getattr(where, "loc", None)
        super().__init__(message, loc=loc, hint=hint)


@dataclass
class _Access:
    instr: Instr
    mark: HandoffAccess
    chain: list             # [(statement list, the For / If holding it or None)], outermost first


def _collect(stmts, chain, out: list) -> None:
    for s in stmts:
        if isinstance(s, Instr):
            mark = s.attrs.pop(HANDOFF, None)
            if mark is not None:
                out.append(_Access(s, mark, chain))
        elif isinstance(s, For):
            _collect(s.body, chain + [(s.body, s)], out)
        elif isinstance(s, If):
            _collect(s.then_body, chain + [(s.then_body, s)], out)
            _collect(s.else_body, chain + [(s.else_body, s)], out)


def _accesses(block) -> list:
    out: list = []
    _collect(block.body, [(block.body, None)], out)
    return out


def _role(a: _Access) -> str:
    if a.instr.op == "TSTORE":
        return "w"
    if a.instr.op == "TLOAD":
        return "r"
    raise HandoffError(f"internal: a {a.instr.op} is marked as a handoff access (only TSTORE / TLOAD are)",
                       a.instr.loc)


def _side(core) -> str:
    return "cube" if core == CoreType.AIC else "vector"


def _roles(blocks, accesses: dict) -> dict:
    """buffer -> {core: "w" | "r"}, checked: one role per side, a writer and a reader."""
    roles: dict = {}
    for b in blocks:
        for a in accesses[b.name]:
            buf = a.mark.buffer
            prev = roles.setdefault(buf, {}).setdefault(b.core, _role(a))
            if prev != _role(a):
                raise HandoffError(f"{buf.name} is both written and read in the {_side(b.core)} section; a "
                                   "handoff slot is written by one section and read by the other", buf.where)
    for buf, r in roles.items():
        if len(r) == 2 and sorted(r.values()) != ["r", "w"]:
            raise HandoffError(f"{buf.name} is {'written' if 'w' in r.values() else 'read'} by both sections",
                               buf.where)
    return roles


def assign_flags(shared: list, machine) -> dict:
    """buffer -> (full, empty) flag ids: a pair per buffer when they fit, else a pair per group."""
    nflags, max_pending = machine.cross_core_flags, machine.cross_core_max_pending
    if 2 * len(shared) <= nflags:
        pairs = {buf: (buf,) for buf in shared}
    else:
        pairs = {buf: (buf.group,) if buf.group is not None else (buf,) for buf in shared}
    channels = list(dict.fromkeys(pairs.values()))
    if 2 * len(channels) > nflags:
        grouped = any(buf.group is not None for buf in shared)
        raise HandoffError(f"{len(channels)} cube<->vector handoff buffers need {2 * len(channels)} cross-core "
                           f"flags; the machine has {nflags}", shared[0].where,
                           hint="use fewer workspace groups" if grouped else
                           "hand fewer tiles over (fuse the work on one side)")
    pending: dict = {}
    for buf in shared:
        pending[pairs[buf]] = pending.get(pairs[buf], 0) + buf.depth
    for ch, n in pending.items():
        if n > max_pending:
            owner = ch[0]
            what = "a shallower workspace group" if isinstance(owner, HandoffGroup) else "fewer slots"
            raise HandoffError(f"{owner.name} has {n} slots; a cross-core flag counts at most {max_pending} "
                               "sets in flight", owner.where, hint=f"use {what}")
    index = {ch: i for i, ch in enumerate(channels)}
    return {buf: (2 * index[pairs[buf]], 2 * index[pairs[buf]] + 1) for buf in shared}


def _home(accs: list) -> tuple:
    """(home list, its depth in the accesses' chains) of one use; mode 2 lifts it out of sub-block ifs."""
    mark = accs[0].mark
    chain = accs[0].chain
    if mark.home is not None:
        depth = next((d for d, (lst, _) in enumerate(chain) if lst is mark.home), None)
        if depth is None or any(len(a.chain) <= depth or a.chain[depth][0] is not mark.home for a in accs):
            raise HandoffError(f"{mark.buffer.name} is used outside the statement list where it was acquired "
                               "(e.g. acquired in one loop iteration and used in another)", mark.buffer.where,
                               hint="acquire the slot with next() where it is used")
    else:
        depth = 0
        while all(len(a.chain) > depth + 1 and a.chain[depth + 1][0] is chain[depth + 1][0] for a in accs):
            depth += 1
    while depth > 0 and _on_subblock(chain[depth][1]):
        depth -= 1
    return chain[depth][0], depth


def _on_subblock(stmt) -> bool:
    return isinstance(stmt, If) and SUBBLOCK_IDX in sympy.sympify(stmt.cond).free_symbols


def _holder(a: _Access, depth: int):
    """The statement of the home list (at ``depth``) that holds access ``a``."""
    return a.chain[depth + 1][1] if len(a.chain) > depth + 1 else a.instr


def _bracket(accs: list, wait_flag: int, set_flag: int) -> None:
    home, depth = _home(accs)
    holders = {id(_holder(a, depth)) for a in accs}
    positions = [i for i, s in enumerate(home) if id(s) in holders]
    first, last = accs[0].instr, accs[-1].instr
    home.insert(positions[-1] + 1, CrossCoreSetFlag(last.pipe, set_flag, loc=last.loc))
    home.insert(positions[0], CrossCoreWaitFlag(first.pipe, wait_flag, loc=first.loc))


def insert_handoff_flags(blocks: list, machine) -> dict:
    """Add the cross-core flags of every marked handoff access of ``blocks`` (one kernel for ``machine``,
    a MachineSpec), in place; on a machine with the on-chip path the buffers that take it become TPUSH /
    TPOP (passes/on_chip_handoff.py). -> {buffer name: its on-chip FIFO} (empty: every handoff via GM)."""
    accesses = {b.name: _accesses(b) for b in blocks}
    cores = {b.core for b in blocks}
    if CoreType.AIC not in cores or CoreType.AIV not in cores:
        return {}
    roles = _roles(blocks, accesses)
    shared = [buf for buf, r in roles.items() if len(r) == 2]
    flags = assign_flags(shared, machine)
    on_chip = plan_on_chip(blocks, accesses, roles, shared, machine)
    for b in blocks:
        uses: dict = {}
        first_pipe: dict = {}
        for a in accesses[b.name]:
            if a.mark.buffer in flags:
                uses.setdefault(a.mark.use, []).append(a)
                first_pipe.setdefault(a.mark.buffer, a.instr.pipe)
        for use in sorted(uses):
            accs = uses[use]
            full, empty = flags[accs[0].mark.buffer]
            writer = roles[accs[0].mark.buffer][b.core] == "w"
            _bracket(accs, *((empty, full) if writer else (full, empty)))
        prologue, epilogue = [], []
        for buf, (full, empty) in flags.items():
            if buf not in first_pipe:
                continue
            tokens = [empty] * buf.depth
            if roles[buf][b.core] == "r":
                prologue += [CrossCoreSetFlag(first_pipe[buf], f) for f in tokens]
            else:
                epilogue += [CrossCoreWaitFlag(first_pipe[buf], f) for f in tokens]
        b.body[:0] = prologue
        b.body.extend(epilogue)
    return {buf.name: fifo for buf, fifo in on_chip.items()}

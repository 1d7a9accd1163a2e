"""Barriers for the vector pipe's own hazards (Block IR -> Block IR, the last step of pipe synchronisation).

The vector pipe is pipelined and does not check its own dependences: on hardware a vector instruction that
reads bytes an earlier vector instruction wrote (RAW), overwrites bytes it wrote (WAW), or overwrites bytes
it still reads (WAR) needs ``pipe_barrier(V)`` between them (CANN's Ascend C ``PipeBarrier<PIPE_V>``:
"inserted between the same pipelines with data dependency"; pto-isa's ``TSYNC<Op>()`` is that barrier for
one vector op). WAR counts because pto-isa's own barrier-removal tool for generated code
(``kernels/python/flash_atten/scripts/patch_vec_barriers.py``, ``_has_direct_tile_dependency``) keeps a
``PIPE_V`` barrier when the later op writes a tile the earlier one reads, as it does for RAW and WAW, and its
manual lists WAR "when resources are reused" among the hazards synchronisation must cover; nothing public
says the vector pipe orders a later write after an earlier read. The other pipes order their own work.

In: a Block with on-chip addresses (planned, or the user's). Out: the same Block with ``pipe_barrier(V)``
right before each vector instruction that reads or writes bytes (its scratch tile ``attrs["tmp"]``
included) a vector instruction wrote since the last barrier, or writes bytes a vector instruction read
since then — and nowhere else: one barrier clears every hazard before it, so the accesses it covered no
longer count. A ``pipe_barrier`` of V, or of S (PIPE_ALL), already in the input counts the same. After an
if/else the accesses of either branch count; a loop body starts from the accesses before the loop together
with those its own end leaves (walked to a fixpoint), so its first iteration and every later one are covered.
"""
from __future__ import annotations

from ..ir.block import Block, For, If, Instr, PipeBarrier
from ..ir.isa import Pipe

BARRIER_PIPES = (Pipe.V,)
_CLEARS_ALL = Pipe.S              # pipe_barrier(S) is PIPE_ALL: every pipe drains


def _ranges(block: Block, ins: Instr):
    """(reads, writes) of an instruction as (space, lo, hi) byte ranges of its tiles."""
    def rng(name):
        t = block.tile(name)
        return (t.space, t.addr, t.addr + t.nbytes)
    tiles = ins.tile_operands()
    if ins.spec.kind == "store":
        return [rng(tiles[0])], []
    if ins.spec.kind == "load":
        return [rng(t) for t in tiles[1:]], [rng(tiles[0])]         # MGATHER reads its index tile
    reads = [rng(t) for t in tiles[1:]]
    writes = [rng(tiles[0])]
    if ins.op == "TMATMUL_ACC":
        reads.append(rng(tiles[0]))
    scratch = ins.attrs.get("tmp")
    if isinstance(scratch, str):
        reads.append(rng(scratch))
        writes.append(rng(scratch))
    return reads, writes


def _overlap(a, b) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


_READ, _WRITE = "r", "w"


def _hazard(kind: str, pending, reads: list, writes: list) -> bool:
    """Whether an instruction with ``reads``/``writes`` conflicts with a pending access of ``kind``: any access
    after a write (RAW, WAW), a write after a read (WAR)."""
    later = reads + writes if kind == _WRITE else writes
    return any(_overlap(a, pending) for a in later)


def _walk(block: Block, stmts: list, dirty: dict, insert: bool) -> list | None:
    """Walk ``stmts`` from ``dirty`` (pipe -> set of (kind, space, lo, hi): the bytes read or written since its
    last barrier), updating it;
    with ``insert``, return the statements with the barriers in."""
    out = [] if insert else None
    for st in stmts:
        if isinstance(st, Instr):
            if st.pipe in BARRIER_PIPES:
                reads, writes = _ranges(block, st)
                d = dirty.setdefault(st.pipe, set())
                if any(_hazard(kind, r, reads, writes) for kind, *r in d):
                    if insert:
                        out.append(PipeBarrier(st.pipe))
                    d.clear()
                d.update((_WRITE, *w) for w in writes)
                d.update((_READ, *r) for r in reads)
        elif isinstance(st, PipeBarrier):
            for p in (BARRIER_PIPES if st.pipe == _CLEARS_ALL else (st.pipe,)):
                dirty.get(p, set()).clear()
        elif isinstance(st, For):
            head = _loop_head(block, st, dirty)
            dirty.clear()
            dirty.update(head)
            if insert:
                st.body[:] = _walk(block, st.body, dirty, True)
            else:
                _walk(block, st.body, dirty, False)
            # the loop exits at a head (zero trips) or at the body's end; the head holds both
            for p, rs in head.items():
                dirty.setdefault(p, set()).update(rs)
        elif isinstance(st, If):
            a = {k: set(v) for k, v in dirty.items()}
            b = {k: set(v) for k, v in dirty.items()}
            then_new = _walk(block, st.then_body, a, insert)
            else_new = _walk(block, st.else_body, b, insert)
            if insert:
                st.then_body[:] = then_new
                st.else_body[:] = else_new
            for k in set(a) | set(b):
                dirty[k] = a.get(k, set()) | b.get(k, set())
        if insert:
            out.append(st)
    return out


def _loop_head(block: Block, loop: For, before: dict) -> dict:
    """The accesses that may be pending at the top of ``loop``'s body: those before the loop and those any
    iteration's end leaves (grown until an iteration adds nothing)."""
    head = {k: set(v) for k, v in before.items()}
    while True:
        end = {k: set(v) for k, v in head.items()}
        _walk(block, loop.body, end, False)
        grown = {k: head.get(k, set()) | end.get(k, set()) for k in set(head) | set(end)}
        if grown == head:
            return head
        head = grown


def insert_barriers(block: Block) -> Block:
    block.body[:] = _walk(block, block.body, {}, True)
    return block


__all__ = ["insert_barriers", "BARRIER_PIPES"]

"""Barriers for the vector pipe's own hazards (Block IR -> Block IR, the last step of pipe synchronisation).

The vector pipe is pipelined and does not check its own dependences: on hardware a vector instruction that
reads or overwrites bytes an earlier vector instruction wrote needs ``pipe_barrier(V)`` between them (CANN's
Ascend C ``PipeBarrier<PIPE_V>``: "inserted between the same pipelines with data dependency"; pto-isa's
``TSYNC<Op>()`` is that barrier for one vector op). The other pipes order their own work.

In: a Block with on-chip addresses (planned, or the user's). Out: the same Block with ``pipe_barrier(V)``
right before each vector instruction that reads or writes bytes (its scratch tile ``attrs["tmp"]``
included) a vector instruction wrote since the last barrier — and nowhere else: one barrier clears every
hazard before it, so the writes it covered no longer count. A ``pipe_barrier`` of V, or of S (PIPE_ALL),
already in the input counts the same. After an if/else the writes of either branch count; a loop body
starts from the writes before the loop together with those its own end leaves (walked to a fixpoint), so
its first iteration and every later one are covered.
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
        return [], [rng(tiles[0])]
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


def _walk(block: Block, stmts: list, dirty: dict, insert: bool) -> list | None:
    """Walk ``stmts`` from ``dirty`` (pipe -> set of ranges written since its last barrier), updating it;
    with ``insert``, return the statements with the barriers in."""
    out = [] if insert else None
    for st in stmts:
        if isinstance(st, Instr):
            if st.pipe in BARRIER_PIPES:
                reads, writes = _ranges(block, st)
                d = dirty.setdefault(st.pipe, set())
                if any(_overlap(a, b) for a in reads + writes for b in d):
                    if insert:
                        out.append(PipeBarrier(st.pipe))
                    d.clear()
                d.update(writes)
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
    """The writes that may be pending at the top of ``loop``'s body: those before the loop and those any
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

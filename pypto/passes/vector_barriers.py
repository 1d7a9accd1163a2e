"""Barriers for the vector pipe's own hazards (Block IR -> Block IR, part of pipe synchronisation).

The vector pipe is pipelined and does not check its own dependences, so a vector instruction that reads or
overwrites bytes an earlier vector instruction wrote since the last barrier gets ``pipe_barrier(V)`` first,
as Ascend kernels do. The other pipes order their own work.

In: a Block with planned tile addresses. Out: the same Block with ``pipe_barrier(V)`` before every such
instruction (loop bodies are walked twice, so the previous iteration's writes count; after an if/else the
writes of both branches count).
"""
from __future__ import annotations

from ..ir.block import Block, For, If, Instr, PipeBarrier
from ..ir.isa import Pipe

BARRIER_PIPES = (Pipe.V,)


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
    if ins.op == "TMATMUL_ACC":
        reads.append(rng(tiles[0]))
    return reads, [rng(tiles[0])]


def _overlap(a, b) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def insert_barriers(block: Block) -> Block:
    def walk(stmts, dirty, insert):
        out = [] if insert else None
        for st in stmts:
            if isinstance(st, Instr):
                if st.pipe in BARRIER_PIPES:
                    reads, writes = _ranges(block, st)
                    d = dirty.setdefault(st.pipe, [])
                    if any(_overlap(a, b) for a in reads + writes for b in d):
                        if insert:
                            out.append(PipeBarrier(st.pipe))
                        d.clear()
                    d.extend(writes)
                if insert:
                    out.append(st)
            elif isinstance(st, For):
                walk(st.body, dirty, False)          # the previous iteration's writes
                if insert:
                    st.body[:] = walk(st.body, dirty, True)
                    out.append(st)
                else:
                    walk(st.body, dirty, False)
            elif isinstance(st, If):
                a = {k: list(v) for k, v in dirty.items()}
                b = {k: list(v) for k, v in dirty.items()}
                then_new = walk(st.then_body, a, insert)
                else_new = walk(st.else_body, b, insert)
                if insert:
                    st.then_body[:] = then_new
                    st.else_body[:] = else_new
                    out.append(st)
                for k in set(a) | set(b):
                    dirty[k] = a.get(k, []) + b.get(k, [])
            else:
                if insert:
                    out.append(st)
        return out
    block.body[:] = walk(block.body, {}, True)
    return block


__all__ = ["insert_barriers", "BARRIER_PIPES"]

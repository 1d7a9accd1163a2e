"""Cross-core flags for the cube <-> vector handoffs (GM workspace slots).

Every handoff store / load carries ``attrs["_xc"] = (channel, slot, "w" | "r", part)`` (part: "all", or
"first" / "mid" / "last" for a tile the cube moves in row halves). Each channel has two
counting flags: ``full`` (writer -> reader) and ``empty`` (reader -> writer). Both sides use a channel's
slots in the same order (slot = iteration number modulo the slots), so the k-th ``full`` is the k-th
store. The writer waits ``empty`` before its store and sets ``full`` after it; the reader waits
``full`` before its load and sets ``empty`` once the load is done. The reader starts with one ``empty``
per slot (set at its start) and the writer consumes the last ones at its end, so every set has its
wait whatever the trip counts. On
a2a3 a cube set reaches both vector cores of the cluster and a cube wait needs the set of both, so the
two vector halves of a split tile take part in the same protocol.
"""
from __future__ import annotations

from ..errors import CompileError
from ..ir.block import CrossCoreSetFlag, CrossCoreWaitFlag, For, If, Instr
from ..ir.isa import Pipe

FLAGS = 16


def flags_of(channel: int) -> tuple[int, int]:
    """(full, empty) flag ids of a channel."""
    return 2 * channel, 2 * channel + 1


def _marked(stmt):
    if isinstance(stmt, Instr):
        return stmt if "_xc" in stmt.attrs else None
    if isinstance(stmt, If) and len(stmt.then_body) == 1 and not stmt.else_body:
        return _marked(stmt.then_body[0])
    return None


def insert_cross_core(block, channels: list, side: str, slots: dict) -> None:
    if 2 * len(channels) > FLAGS:
        raise CompileError(f"{len(channels)} tiles cross between the cube and the vector cores; the cluster has "
                           f"{FLAGS} cross-core flags (2 per handed-over tile)",
                           hint="hand fewer tiles over (fuse the work on one side)", loc=block.loc)
    store_pipe = {}

    def rec(stmts):
        out = []
        for s in stmts:
            m = _marked(s)
            if m is not None:
                ch, slot, role, part = m.attrs.pop("_xc")
                full, empty = flags_of(ch)
                wait, set_ = (empty, full) if role == "w" else (full, empty)
                if role == "w":
                    store_pipe[ch] = m.pipe
                # a tile handed over in row halves: the first access waits for the slot, the last signals
                out += ([CrossCoreWaitFlag(m.pipe, wait, m.loc)] if part in ("all", "first") else []) + [s] + \
                       ([CrossCoreSetFlag(m.pipe, set_, m.loc)] if part in ("all", "last") else [])
                continue
            if isinstance(s, For):
                s.body = rec(s.body)
            elif isinstance(s, If):
                s.then_body = rec(s.then_body)
                s.else_body = rec(s.else_body)
            out.append(s)
        return out
    block.body = rec(block.body)
    pro, epi = [], []
    for c in channels:
        for _ in range(slots.get(c.id, 2)):
            full, empty = flags_of(c.id)
            if c.dst == side:
                pro.append(CrossCoreSetFlag(Pipe.MTE2, empty))
            elif c.src == side:
                epi.append(CrossCoreWaitFlag(store_pipe.get(c.id, Pipe.MTE3), empty))
    block.body[:0] = pro
    block.body.extend(epi)

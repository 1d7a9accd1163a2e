"""Tile liveness on a Block (a Block IR analysis; reads the IR, changes nothing).

Instructions are numbered in program order (``positions``), walking loop bodies and both branches of
an ``if`` once. A tile's live range is the closed span of positions of the instructions that touch it
(its operands and the scratch tile ``attrs["tmp"]`` of an instruction that takes one), stretched over a
whole loop when the tile lives across the loop's boundary: a tile used before and inside a loop, or
inside and after it, holds its bytes for every iteration. (A tile touched only inside one loop body is
taken to be dead between iterations: the lowerings initialise loop-carried tiles before the loop.) Memory planning (passes/memory.py) places tiles by these ranges; the Block IR verifier
(ir/block_verify.py) checks the planned addresses against them.
"""
from __future__ import annotations

from .block import Block, For, If, Instr


def touched_tiles(ins: Instr) -> list[str]:
    """The tiles one instruction touches: its tile operands, then its planned scratch tile if any."""
    tiles = ins.tile_operands()
    tmp = ins.attrs.get("tmp")
    return tiles + [tmp] if isinstance(tmp, str) else tiles


def positions(block: Block) -> tuple[list[Instr], list[tuple[int, int]]]:
    """(instructions in program order, [(first, last) position of each loop body]); an empty body has last < first."""
    order, loops = [], []

    def walk(stmts):
        for s in stmts:
            if isinstance(s, Instr):
                order.append(s)
            elif isinstance(s, For):
                start = len(order)
                walk(s.body)
                loops.append((start, len(order) - 1))
            elif isinstance(s, If):
                walk(s.then_body)
                walk(s.else_body)
    walk(block.body)
    return order, loops


def live_ranges(block: Block) -> dict[str, tuple[int, int]]:
    """tile name -> (first, last) position it is live at; tiles no instruction touches are absent."""
    order, loops = positions(block)
    rng = {}
    for pos, ins in enumerate(order):
        for t in touched_tiles(ins):
            lo, hi = rng.get(t, (pos, pos))
            rng[t] = (min(lo, pos), max(hi, pos))
    changed = True
    while changed:
        changed = False
        for t, (lo, hi) in rng.items():
            for ls, le in loops:
                if le < ls:
                    continue
                inside = ls <= lo and hi <= le
                touches = not (hi < ls or lo > le)
                if touches and not inside:
                    nlo, nhi = min(lo, ls), max(hi, le)
                    if (nlo, nhi) != (lo, hi):
                        lo, hi = nlo, nhi
                        changed = True
            rng[t] = (lo, hi)
    return rng

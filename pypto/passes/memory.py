"""On-chip memory planning (Block IR pass): an address for every tile, within each buffer's capacity.

Tiles are grouped into regions (``regions``: tile name -> region key; one region when absent); the
regions of a memory space are stacked, so tiles of different regions never share bytes (the two
ping-pong copies of a loop body are two regions: that is what lets them be in flight together).
Inside a region, a tile's live range is the span of program positions that touch it, stretched over
a whole loop when it lives across the loop's boundary; first-fit assigns addresses and reuses the
bytes of dead tiles. An elementwise instruction may write in place over a source it is the last
reader of (same address, same shape and element size), as PTO kernels do.
"""
from __future__ import annotations

from ..errors import CompileError
from ..ir.block import Block, Instr
from ..ir.liveness import live_ranges, positions

_INPLACE_KINDS = ("elementwise", "transcendental", "cast", "compare", "select")


def _inplace_ok(ins: Instr, dst, src, block: Block) -> bool:
    spec = ins.spec
    if spec.kind not in _INPLACE_KINDS and not (spec.kind == "expand" and len(ins.operands) == 3):
        return False
    if spec.kind == "expand" and src != ins.operands[1]:
        return False
    a, b = block.tile(dst), block.tile(src)
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and a.space == b.space


def plan_memory(block: Block, machine, regions: dict | None = None) -> dict:
    """Assign ``TileDecl.addr`` for every tile of ``block``; returns {space: bytes used}."""
    align = machine.alignment
    order, _ = positions(block)
    rng = live_ranges(block)
    regions = regions or {}
    defs = {}
    for pos, ins in enumerate(order):
        ops = ins.tile_operands()
        if ops and ins.spec.kind != "store":
            defs.setdefault(ops[0], (pos, ins))
    used = {}
    by_space = {}
    for t in block.tiles:
        by_space.setdefault(t.space, {}).setdefault(regions.get(t.name, ""), []).append(t)
    for space, by_region in by_space.items():
        base = 0
        for key in _region_order(by_region):
            tiles = by_region[key]
            size = _first_fit(tiles, rng, defs, order, block, align)
            for t in tiles:
                t.addr += base
            base += -(-size // align) * align
        cap = machine.capacity[space.capacity_key]
        used[space] = base
        if base > cap:
            raise CompileError(f"block {block.name}: tiles need {base} bytes of {space}, over its {cap} bytes",
                               loc=block.loc)
    return used


def _region_order(by_region):
    rank = {"setup": 0, "outer": 1, "outer0": 1, "outer1": 2, "inner0": 3, "inner1": 4, "": 5}
    return sorted(by_region, key=lambda k: (rank.get(k, 6), k))


def _first_fit(tiles, rng, defs, order, block, align) -> int:
    """Addresses (relative to the region) for tiles; returns the region's size."""
    never = [t for t in tiles if t.name not in rng]
    live = sorted((t for t in tiles if t.name in rng), key=lambda t: (rng[t.name][0], -t.nbytes))
    active = []          # (end, addr, size, name)
    top = 0
    for t in live:
        start, end = rng[t.name]
        size = -(-t.nbytes // align) * align
        placed = None
        d = defs.get(t.name)
        dying = {a[3] for a in active if a[0] == start}
        if d is not None and d[0] == start:
            for src in d[1].tile_operands()[1:]:
                if src in dying and _inplace_ok(d[1], t.name, src, block):
                    s = next(a for a in active if a[3] == src)
                    if s[2] >= size:
                        placed = s[1]
                        active.remove(s)
                        break
        active = [a for a in active if a[0] >= start]
        if placed is None:
            placed = _lowest_gap(active, size)
        t.addr = placed
        active.append((end, placed, size, t.name))
        top = max(top, placed + size)
    for t in never:
        t.addr = top
        top += -(-t.nbytes // align) * align
    return top


def _lowest_gap(active, size) -> int:
    addr = 0
    for _, a, s, _n in sorted(active, key=lambda x: x[1]):
        if addr + size <= a:
            return addr
        addr = max(addr, a + s)
    return addr

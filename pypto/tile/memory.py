"""On-chip addresses for a tile kernel's block: liveness (pypto.ir.liveness.live_ranges) with a
*least recently freed* allocator.

The generic planner reuses the lowest free address; in a pipelined loop that puts the next tile on the
bytes the previous one just left, so the next load waits for the last reader (a write-after-read flag
between pipes) and double buffering is lost. Here tiles of one size share a small pool of buffers
taken round-robin (the one freed longest ago first; four, three or at least two per size, as the
capacity allows):
tiles of consecutive iterations land on different buffers, and few distinct buffers keep the number of
set/wait events small. An elementwise vector op still writes in place over a source it reads for the
last time (same pipe, no flag).
"""
from __future__ import annotations

from ..errors import TilingError
from ..ir.block import Block
from ..ir.liveness import live_ranges, positions
from ..passes.memory import _inplace_ok


POOL_SIZES = (4, 3, 2)    # buffers per tile size before one is reused: tried in turn until the tiles fit


def plan(block: Block, machine, tile_loc: dict | None = None, max_pool: int = POOL_SIZES[0]) -> dict:
    """Assign ``TileDecl.addr`` for every tile; returns {space: peak bytes}."""
    align = machine.alignment
    order, _ = positions(block)
    rng = live_ranges(block)
    defs = {}
    for pos, ins in enumerate(order):
        ops = ins.tile_operands()
        if ops and ins.spec.kind != "store":
            defs.setdefault(ops[0], (pos, ins))
    used = {}
    cls = _classes(order)
    by_space: dict = {}
    for t in block.tiles:
        by_space.setdefault(t.space, []).append(t)
    for space, tiles in by_space.items():
        cap = machine.capacity[space.capacity_key]
        sizes = [p for p in POOL_SIZES if p <= max_pool] or [POOL_SIZES[-1]]
        for k, pool in enumerate(sizes):
            try:
                used[space] = _plan_space(block, tiles, rng, defs, align, cap, space, tile_loc or {}, pool, cls)
                break
            except TilingError as e:
                if k < len(sizes) - 1:
                    continue
                # pools waste bytes between sizes: pack by liveness alone (first fit) before giving up
                used[space] = _first_fit(block, tiles, machine, e)
    return used


def _first_fit(block, tiles, machine, err):
    from types import SimpleNamespace
    from ..passes.memory import plan_memory
    others = {t.name: t.addr for t in block.tiles if t not in tiles}
    sub = Block(block.name, block.core, block.gm_params, block.scalar_params, tiles, block.body, block.loc)
    big = SimpleNamespace(alignment=machine.alignment, capacity={k: 1 << 40 for k in machine.capacity})
    used = plan_memory(sub, big)
    space = tiles[0].space
    if used.get(space, 0) > machine.capacity[space.capacity_key]:
        raise err
    for t in block.tiles:
        if t.name in others:
            t.addr = others[t.name]
    return used.get(space, 0)




def _classes(order) -> dict:
    """tile -> (filled by a GM load, drained by a GM store): tiles of different classes get different
    buffers, so a load never waits for a store that itself waits for the other core (a handoff)."""
    loaded, stored = set(), set()
    for ins in order:
        ops = ins.tile_operands()
        if ins.spec.kind == "load" and ops:
            loaded.add(ops[0])
        elif ins.spec.kind == "store" and ops:
            stored.add(ops[0])
    return {n: (n in loaded, n in stored) for ins in order for n in ins.tile_operands()}


def _plan_space(block, tiles, rng, defs, align, cap, space, tile_loc, min_pool: int, cls: dict) -> int:
    """Tiles of one size share a pool of buffers: a new tile takes the pool's buffer that was freed
    longest ago, and the pool grows while it has fewer than ``min_pool`` buffers or all are in use."""
    live = sorted((t for t in tiles if t.name in rng), key=lambda t: (rng[t.name][0], -t.nbytes))
    pools: dict = {}     # (size, class) -> list of buffers [addr, size, freed_at or None while in use]
    owner: dict = {}     # tile name -> buffer
    active = []          # (end, name)
    top = 0
    for t in live:
        start, end = rng[t.name]
        size = -(-t.nbytes // align) * align
        dying = {n for e, n in active if e == start}
        for e, n in [a for a in active if a[0] < start]:
            active.remove((e, n))
            owner[n][2] = e
        buf = None
        d = defs.get(t.name)
        if d is not None and d[0] == start:                 # in place over a source read for the last time
            for src in d[1].tile_operands()[1:]:
                if src in dying and _inplace_ok(d[1], t.name, src, block) and owner[src][1] >= size:
                    buf = owner[src]
                    active.remove(next(a for a in active if a[1] == src))
                    break
        if buf is None:
            pool = pools.setdefault((size, cls.get(t.name)), [])
            free = [b for b in pool if b[2] is not None]
            if (len(pool) < min_pool or not free) and top + size <= cap:
                buf = [top, size, None]
                top += size
                pool.append(buf)
            elif free:
                buf = min(free, key=lambda b: (b[2], b[0]))
            else:
                bigger = [b for p in pools.values() for b in p if b[2] is not None and b[1] >= size]
                if not bigger:
                    _over(block, tiles, rng, start, t, cap, space, tile_loc)
                buf = min(bigger, key=lambda b: (b[2], b[0]))
        buf[2] = None
        owner[t.name] = buf
        t.addr = buf[0]
        active.append((end, t.name))
    for t in tiles:
        if t.name not in rng:
            t.addr = 0
    return top


def block_align(block) -> int:
    return 32


def _over(block, tiles, rng, pos, t, cap, space, tile_loc):
    live = [x for x in tiles if x.name in rng and rng[x.name][0] <= pos <= rng[x.name][1]]
    need = sum(-(-x.nbytes // block_align(block)) * block_align(block) for x in live)
    big = sorted(live, key=lambda x: -x.nbytes)[:4]
    listing = ", ".join(f"{x.name} {x.dtype}[{x.shape[0]}, {x.shape[1]}] ({x.nbytes} B"
                        f"{', ' + str(tile_loc[x.name]) if tile_loc.get(x.name) else ''})" for x in big)
    loc = next((tile_loc[x.name] for x in [t] + big if tile_loc.get(x.name)), block.loc)
    raise TilingError(f"the {space} tiles of the {block.core} program need {need} bytes at once, over the "
                      f"{cap}-byte {space}; largest: {listing}", loc=loc,
                      hint="pick smaller tile shapes (loop tiles are unrolled into 2-3 copies)")

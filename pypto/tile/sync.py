"""Pipe synchronisation of a tile kernel's blocks.

The Tile level uses the ownership-based pass shared with Professional mode (``pypto.passes.pipe_sync``: every
buffer is owned by one pipe at a time; a hand-over is a set/wait pair; loops carry ownership round the
back edge; event ids are shared only when a happens-before chain proves their lives never overlap).
``pypto.passes.sync.insert_sync`` colours event ids by program-order intervals, which lets a fast pipe
set an event a second time before a slow pipe consumed the first set — with the unrolled, peeled and
software-pipelined loops of tile kernels that happens, and the simulator rejects it.

Resources: the bytes of on-chip tiles (tiles whose planned bytes overlap are one resource) and each GM
tensor (so a kernel that loads a tile of a tensor it also stores to is ordered on every pipe).
"""
from __future__ import annotations

from ..errors import CompileError, SyncError
from ..ir.block import Block, GMRegion, Instr
from ..passes.event_alloc import allocate_events
from ..passes.pipe_sync import PipeSync, Seq, UnionFind


def tile_resources(block: Block) -> dict:
    """tile name -> resource key (tiles sharing bytes are one resource)."""
    uf = UnionFind()
    by_space: dict = {}
    for t in block.tiles:
        uf.find(t.name)
        by_space.setdefault(t.space, []).append(t)
    for tiles in by_space.values():
        tiles.sort(key=lambda t: t.addr)
        for i, a in enumerate(tiles):
            for b in tiles[i + 1:]:
                if b.addr >= a.addr + a.nbytes:
                    break
                uf.union(a.name, b.name)
    return {t.name: ("tile", uf.find(t.name)) for t in block.tiles}


def synchronize(block: Block, machine, gm_alias: dict | None = None) -> None:
    """``gm_alias``: GM params that are views of another (pt.reshape scratch): one resource."""
    res = tile_resources(block)

    def resources_of(ins: Instr) -> list:
        out = []
        for o in ins.operands:
            r = res[o] if isinstance(o, str) else \
                ("gm", (gm_alias or {}).get(o.param, o.param)) if isinstance(o, GMRegion) else None
            if r is not None and r not in out:
                out.append(r)
        return out
    ps = PipeSync(resources_of, block.name)
    root = Seq(None)
    ps.run(block.body, root)
    ps.finish(root)
    block.body = root.materialize()
    try:
        allocate_events(block, ps.chan_of, machine)
    except SyncError as e:
        raise CompileError(f"block {block.name}: {e.message}", loc=block.loc) from None

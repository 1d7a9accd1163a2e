"""Executing one instruction on a core's buffers: cut every tile operand to the region the instruction
works on (its region kind, pypto/ir/isa_semantics.REGIONS), check the region fits every tile and the
GM box fits its tensor, and call the instruction's semantics function (its entry in pypto/ir/isa.py).
Tiles are views of the core's byte buffers at their addresses, so aliasing tiles see each other's
writes exactly as on hardware. Loads and stores between tensors of one dtype move bits through numpy
views (a tenth of torch's per-call cost, the same bytes); each instruction's operand views, cut to its
regions, are made once per valid shape and kept with the core's tile views."""
from __future__ import annotations

import numpy as np
import torch

from ...errors import SimError
from ...ir import gm_bounds
from ...ir.isa_semantics import REGIONS
from . import indexed


def fits_source(cop) -> str:
    """Python source of a fast test ``v -> bool`` that every operand region fits its tile (the slow path,
    operand_shapes, then explains a failure)."""
    n = 2 * cop.n_tiles + (cop.gm_rank if cop.gm_param else 0) + 8
    shapes = REGIONS[cop.region]([f"v[{i}]" for i in range(n)], cop.n_tiles)
    terms = [f"0 <= {r} <= {t.shape[0]} and 0 <= {c} <= {t.shape[1]}" for t, (r, c) in zip(cop.tiles, shapes)]
    return " and ".join(terms) or "True"


def gm_fits_source(cop) -> str:
    """Python source of a fast test ``(v, s) -> bool`` that the GM box lies inside a tensor of shape s
    (the bounds rule of pypto.ir.gm_bounds)."""
    rank, base = cop.gm_rank, 2 * cop.n_tiles
    offsets, extents, one_d = gm_bounds.box([f"v[{base + i}]" for i in range(rank)], "v[0]", "v[1]", cop.trans)
    dims = gm_bounds.shape_view([f"s[{i}]" for i in range(rank)], one_d)
    return gm_bounds.inside_source(offsets, extents, dims, gm_bounds.least_extent(cop.gm_region))


def operand_shapes(cop, vals):
    """The (rows, cols) each tile operand is used over; raises when one exceeds its tile."""
    shapes = REGIONS[cop.region](vals, cop.n_tiles)
    for t, (r, c) in zip(cop.tiles, shapes):
        if r < 0 or c < 0 or r > t.shape[0] or c > t.shape[1]:
            raise SimError(f"region [{r}, {c}] of tile '{t.name}' exceeds its shape {list(t.shape)} "
                           f"(valid shapes evaluated to {list(vals[:2 * cop.n_tiles])})\n  in {cop.where()}",
                           loc=cop.loc)
    return shapes


def gm_index(cop, vals, shape):
    """The index of the GM box an instruction reads or writes in a tensor of ``shape``; a box that
    breaks the bounds rule (pypto.ir.gm_bounds) raises."""
    if cop.region in indexed.REGIONS:
        raise indexed.fit_error(cop, vals, shape)
    base = 2 * cop.n_tiles
    offsets, extents, one_d = gm_bounds.box(vals[base:base + cop.gm_rank], vals[0], vals[1], cop.trans)
    dims = gm_bounds.shape_view(shape, one_d)
    if not gm_bounds.inside(offsets, extents, dims, gm_bounds.least_extent(cop.gm_region)):
        raise SimError(gm_bounds.access_error_text(cop.stmt, cop.block.name, offsets, extents, dims, one_d),
                       loc=cop.loc, hint=gm_bounds.HINT)
    return _box_index(cop, vals)


def _box_index(cop, vals):
    """The index of the GM box of a checked access (the bounds rule held): ints for the leading dims,
    slices for the last two (rows, cols; cols only for a 1-D tensor)."""
    base = 2 * cop.n_tiles
    rows, cols = (vals[1], vals[0]) if cop.trans else (vals[0], vals[1])
    if cop.gm_rank == 1:
        o = vals[base]
        return (slice(o, o + cols),)
    r0, c0 = vals[base + cop.gm_rank - 2], vals[base + cop.gm_rank - 1]
    return vals[base:base + cop.gm_rank - 2] + (slice(r0, r0 + rows), slice(c0, c0 + cols))


# numpy dtypes of the same width: loads and stores move bits, and numpy views cost a tenth of torch's
_BITS = {1: (torch.uint8, np.uint8), 2: (torch.int16, np.int16), 4: (torch.int32, np.int32),
         8: (torch.int64, np.int64)}


def bits(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's bytes as same-width integers (bf16 has no numpy dtype)."""
    tdt, _ = _BITS[t.element_size()]
    t = t.detach()
    return (t if t.dtype == tdt else t.view(tdt)).numpy()


class TileViews:
    """A core's tiles of one compiled block: torch views by tile index (``tiles``), numpy views of
    the same bytes (``raw``, for loads and stores), and each instruction's operands cut to its regions
    (``cut``: (instruction index, valid shapes) -> views), kept while the core's buffers live."""
    __slots__ = ("tiles", "raw", "cut")

    def __init__(self, buffers: dict, cb):
        self.tiles = make_views(buffers, cb)
        self.raw = [None if v is None else bits(v) for v in self.tiles]
        self.cut: dict = {}


class GMArrays:
    """numpy views of a run's GM tensors, made once per tensor object."""
    __slots__ = ("arrays",)

    def __init__(self):
        self.arrays: dict = {}

    def get(self, t: torch.Tensor) -> np.ndarray:
        hit = self.arrays.get(id(t))
        if hit is None or hit[0] is not t:
            hit = self.arrays[id(t)] = (t, bits(t))
        return hit[1]


def execute(tv: TileViews, gm: dict, cop, vals, arrays: GMArrays):
    """Run one instruction whose operand regions fit their tiles and whose GM box the bounds rule
    allows (core.py checks both first): ``tv`` the core's tile views, ``gm`` the kernel's GM tensors
    by param name."""
    region = cop.region
    if region in indexed.REGIONS:
        indexed.execute(tv, gm, cop, vals, arrays)
        return
    if region == "load" or region == "store":
        t = gm[cop.gm_param]
        r, c = vals[0], vals[1]
        if t.dtype != cop.tiles[0].torch_dtype:     # a converting move: torch's copy_ rounds
            _move_converting(tv, t, cop, vals)
            return
        g = arrays.get(t)[_box_index(cop, vals)]
        tile = tv.raw[cop.tiles[0].index][:r, :c]
        if region == "load":
            if cop.gm_rank == 1:
                g = g[None]
            tile[...] = g.T if cop.trans else g
        else:
            g[...] = tile[0] if cop.gm_rank == 1 else tile
        return
    key = (cop.index, vals[:cop.nvalid])
    ops = tv.cut.get(key)
    if ops is None:
        shapes = operand_shapes(cop, vals)
        ops = [tv.tiles[t.index][:r, :c] for t, (r, c) in zip(cop.tiles, shapes)]
        if len(tv.cut) >= 16384:
            tv.cut.clear()
        tv.cut[key] = ops
    srcs = ops[1:]
    if cop.scalar_at < len(vals):
        srcs = srcs + list(vals[cop.scalar_at:])
    try:
        cop.sem(ops[0], srcs, cop.attrs)
    except (RuntimeError, TypeError, ValueError) as exc:
        shapes = operand_shapes(cop, vals)
        raise SimError(f"{cop.op} failed on tiles "
                       + ", ".join(f"{t.name}: {t.dtype}{list(s)}" for t, s in zip(cop.tiles, shapes))
                       + f": {exc}\n  in {cop.where()}", loc=cop.loc) from None


def _move_converting(tv, t, cop, vals):
    r, c = vals[0], vals[1]
    g = t[_box_index(cop, vals)]
    tile = tv.tiles[cop.tiles[0].index][:r, :c]
    if cop.region == "load":
        if cop.gm_rank == 1:
            g = g.unsqueeze(0)
        tile.copy_(g.transpose(0, 1) if cop.trans else g)
    else:
        g.copy_(tile[0] if cop.gm_rank == 1 else tile)


def make_views(buffers: dict, cb) -> list:
    """Views of every tile of a compiled block into a core's byte buffers (space -> uint8 tensor)."""
    out = []
    for t in cb.tile_list:
        if t.addr is None or t.space not in buffers or t.addr < 0 or t.addr + t.nbytes > buffers[t.space].numel():
            out.append(None)
            continue
        raw = buffers[t.space][t.addr:t.addr + t.nbytes]
        out.append(raw.view(t.torch_dtype).view(t.shape) if t.torch_dtype != torch.uint8 else raw.view(t.shape))
    return out

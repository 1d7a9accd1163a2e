"""Executing one instruction on a core's buffers: cut every tile operand to the region the instruction
works on (its region kind, pypto/ir/isa_semantics.REGIONS), check the region fits every tile and the
GM box fits its tensor, and call the instruction's semantics function (its entry in pypto/ir/isa.py).
Tiles are views of the core's byte buffers at their addresses, so aliasing tiles see each other's
writes exactly as on hardware."""
from __future__ import annotations

import torch

from ...errors import SimError
from ...ir import gm_bounds
from ...ir.isa_semantics import REGIONS


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
    base = 2 * cop.n_tiles
    offsets, extents, one_d = gm_bounds.box(vals[base:base + cop.gm_rank], vals[0], vals[1], cop.trans)
    dims = gm_bounds.shape_view(shape, one_d)
    if not gm_bounds.inside(offsets, extents, dims, gm_bounds.least_extent(cop.gm_region)):
        raise SimError(gm_bounds.access_error_text(cop.stmt, cop.block.name, offsets, extents, dims, one_d),
                       loc=cop.loc, hint=gm_bounds.HINT)
    if one_d:
        return (slice(offsets[1], offsets[1] + extents[1]),)
    return tuple(offsets[:-2]) + tuple(slice(o, o + e) for o, e in zip(offsets[-2:], extents[-2:]))


def execute(views, gm, cop, vals):
    """Run one instruction: ``views`` are the core's full tile views (by tile index), ``gm`` the kernel's
    GM tensors by param name."""
    shapes = operand_shapes(cop, vals)
    tiles = cop.tiles
    region = cop.region
    if region == "load":
        r, c = shapes[0]
        src = gm[cop.gm_param][gm_index(cop, vals, gm[cop.gm_param].shape)]
        if cop.gm_rank == 1:
            src = src.unsqueeze(0)
        if cop.trans:
            src = src.transpose(0, 1)
        views[tiles[0].index][:r, :c].copy_(src)
        return
    if region == "store":
        r, c = shapes[0]
        t = gm[cop.gm_param]
        dst = t[gm_index(cop, vals, t.shape)]
        src = views[tiles[0].index][:r, :c]
        dst.copy_(src[0] if cop.gm_rank == 1 else src)
        return
    ops = [views[t.index][:r, :c] for t, (r, c) in zip(tiles, shapes)]
    if cop.scalar_at < len(vals):
        ops.extend(vals[cop.scalar_at:])
    try:
        cop.sem(ops[0], ops[1:], cop.attrs)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise SimError(f"{cop.op} failed on tiles "
                       + ", ".join(f"{t.name}: {t.dtype}{list(s)}" for t, s in zip(tiles, shapes))
                       + f": {exc}\n  in {cop.where()}", loc=cop.loc) from None


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

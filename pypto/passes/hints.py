"""Tiling hints checked against the machine a program is compiled for.

``check_hints(graph, spec)``: TensorGraph in, nothing out. Every node that carries a hint recorded by
the front end (pypto/frontend/hints.py) — ``vec_tile`` on vector ops, ``cube_tile`` on cube ops, loop
bodies included — is checked against ``spec``: a vector tile's last dim must hold a multiple of the
machine alignment in the narrowest dtype — a hint is a request, so a last dim that does not is
rounded up to the next aligned size (``attrs["vec_tile"]`` is the fitted tile, ``vec_tile_request``
what the user asked for, ``hint_adjusted`` why; the tiler reports it in the kernel's decisions) —
and the tile fits UB double-buffered in the widest; a cube tile's kL0 and nL0 are aligned and its L0A / L0B / L0C / L1
tiles fit their buffers. A hint that does not fit raises ``TilingError`` at the hinted op's line, except on an op a pass
inserted with the hint of the op it replaces (``attrs["hint_inherited"]``): the user wrote no hint
for it.
The lowering runs it on the traced graph and again on the graph the tiler reads (after the
rewrites that re-trace ops with the hints of the op they replace).
"""
from __future__ import annotations

import sympy

from ..errors import TilingError
from ..frontend.hints import hinted_values


def check_hints(g, spec) -> None:
    for nid in g.nodes():
        node = g.node(nid)
        attrs = node["attrs"]
        if node["op"] == "loop":
            check_hints(attrs["body"], spec)
            continue
        if attrs.get("vec_tile") is None and attrs.get("cube_tile") is None:
            continue
        infos = [g.info(i) for i in node["inputs"]]
        if attrs.get("vec_tile") is not None:
            # an assemble moves the value it writes: its tile is that box's, not the destination's
            values = hinted_values(infos[1:2] if node["op"] == "assemble" else infos,
                                   None if node["op"] == "assemble" else g.info(nid))
            if not attrs.get("hint_inherited"):      # the user's request (an inserted op: see below)
                _fit_vec(attrs, values, spec)
            try:
                check_vec(attrs["vec_tile"], values, spec, node["loc"])
            except TilingError:
                # an op a pass inserted with the hint of the op it replaces (an autocast's fp32 copy, a
                # decomposition's bool mask) is not the user's to fix: the lowering fits the tile to it
                if not attrs.get("hint_inherited"):
                    raise
        if attrs.get("cube_tile") is not None:
            check_cube(attrs["cube_tile"], infos, spec, node["loc"])


def aligned_vec_tile(dims: tuple, values: list, spec) -> tuple:
    """``dims`` with its last entry rounded up so that a row of the narrowest dtype of ``values`` is a
    multiple of the machine alignment (``dims`` itself when it already is)."""
    if not values or not any(len(v.shape) for v in values) or not dims:
        return tuple(dims)
    narrowest = min(v.dtype.itemsize for v in values)
    if spec.alignment % narrowest:
        return tuple(dims)
    step = spec.alignment // narrowest
    last = -(-dims[-1] // step) * step
    return tuple(dims[:-1]) + (last,)


def _fit_vec(attrs: dict, values: list, spec) -> None:
    """Round the vector hint of one node to the machine's alignment (from what the user asked for, so
    that a second check or another machine starts from the request again)."""
    req = tuple(attrs.get("vec_tile_request") or attrs["vec_tile"])
    fitted = aligned_vec_tile(req, values, spec)
    if fitted == req:
        if "vec_tile_request" in attrs:      # fitted before, for a machine that needed it: the request again
            attrs["vec_tile"] = req
            del attrs["vec_tile_request"]
            attrs.pop("hint_adjusted", None)
        return                               # (an op re-traced with a fitted hint keeps its note)
    narrowest = min(v.dtype.itemsize for v in values)
    attrs["vec_tile"], attrs["vec_tile_request"] = fitted, req
    attrs["hint_adjusted"] = (f"vector tile {list(req)} -> {list(fitted)}: a last dim of {req[-1]} holds "
                              f"{req[-1] * narrowest} bytes of the {narrowest}-byte dtype, rounded up to the "
                              f"{spec.alignment}-byte alignment of machine {spec.name}")


def check_vec(dims: tuple, values: list, spec, loc) -> None:
    if not values or not any(len(v.shape) for v in values):
        return
    widest = max(v.dtype.itemsize for v in values)
    narrowest = min(v.dtype.itemsize for v in values)
    if (dims[-1] * narrowest) % spec.alignment:
        raise TilingError(f"vector tile shape {list(dims)}: the last dim holds {dims[-1] * narrowest} bytes of "
                          f"the narrowest dtype, not a multiple of the {spec.alignment}-byte alignment of "
                          f"machine {spec.name}", loc=loc,
                          hint=f"use a last dim that is a multiple of {spec.alignment // narrowest}")
    elems = 1
    for d in _clipped(dims, values):
        elems *= d
    need = 2 * elems * widest        # double-buffered
    if need > spec.capacity["UB"]:
        raise TilingError(f"vector tile shape {list(dims)} needs {need} bytes of UB double-buffered "
                          f"({elems} elements of {widest} bytes), over the {spec.capacity['UB']}-byte UB of "
                          f"machine {spec.name}", loc=loc)


def _clipped(dims: tuple, values: list) -> tuple:
    """The tile a hint gives the values: each dim (aligned from the last) no larger than the largest
    extent the values have there (``set_vec_tile_shapes(128, 16, 128)`` on a [128, 1, 128] value is a
    [128, 1, 128] tile); a dim some value has symbolic stays the hint's."""
    out = list(dims)
    for k in range(1, len(dims) + 1):
        extents = [_most(v.shape[-k]) for v in values if len(v.shape) >= k]
        if extents and all(e is not None for e in extents):
            out[-k] = min(out[-k], max(max(extents), 1))
    return tuple(out)


def _most(extent):
    """The largest value of an extent: itself, the constant bound of a tail's ``min(L, n - i)``, or
    None when unbounded."""
    if isinstance(extent, int):
        return extent
    if isinstance(extent, sympy.Min):
        bounds = [int(a) for a in extent.args if a.is_Integer]
        return min(bounds) if bounds else None
    return int(extent) if getattr(extent, "is_Integer", False) else None


def check_cube(cube: dict, infos: list, spec, loc) -> None:
    item = max((v.dtype.itemsize for v in infos if hasattr(v, "dtype")), default=2)
    (m0, m1), (k0, k1), (n0, n1) = cube["m"], cube["k"], cube["n"]
    for name, v in (("k", k0), ("n", n0)):
        if (v * item) % spec.alignment:
            raise TilingError(f"cube tile {name}L0 = {v} is not aligned: {v * item} bytes is not a multiple of "
                              f"{spec.alignment} (machine {spec.name})", loc=loc)
    checks = (("L0A", m0 * k0 * item), ("L0B", k0 * n0 * item), ("L0C", m0 * n0 * 4),
              ("L1", (m1 * k1 + k1 * n1) * item))
    for space, need in checks:
        if need > spec.capacity[space]:
            raise TilingError(f"cube tile shapes m={list(cube['m'])} k={list(cube['k'])} n={list(cube['n'])} need "
                              f"{need} bytes of {space}, over its {spec.capacity[space]} bytes on machine "
                              f"{spec.name}", loc=loc)

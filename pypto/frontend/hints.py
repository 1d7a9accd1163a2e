"""Tiling hints as the front end records them (CANN PyPTO semantics): ``set_vec_tile_shapes(*dims)``
and ``set_cube_tile_shapes([mL0, mL1], [kL0, kL1], [nL0, nL1])`` apply to the ops traced after them.

A hint set inside a trace belongs to that trace (it never leaks into the next function traced); a
hint set outside any trace is a global default. ``emit`` calls ``stamp``, which writes the active
hints into the attrs of the op it records (``vec_tile`` on vector ops, ``cube_tile`` on cube ops).

What is checked here does not depend on the machine: positive int sizes, a cube pair with
0 < L0 <= L1 and L1 % L0 == 0, and a vector hint with at least one entry per dim of the op's largest
operand (an op of lower rank takes the hint's trailing entries, as CANN PyPTO does; an op a pass
inserts while re-tracing, ``scoped``, is left unhinted rather than rejected when the hint is too short). Alignment and buffer capacities are checked by the lowering against the machine the
program is compiled for (pypto/passes/hints.py). A bad hint raises ``TilingError`` at the user's line.
"""
from __future__ import annotations

import sympy

from ..errors import TilingError
from . import context as ctx

_global = {"vec": None, "cube": None}                  # set outside any trace
_local = {"vec": None, "cube": None, "owner": None}    # set inside the root trace numbered `owner`
_compiler = {"depth": 0}                               # > 0 while a pass re-traces ops (``scoped``)


def _trace_root():
    return ctx.trace_serial if ctx.is_tracing() else None


def _positive_ints(values, what):
    out = []
    for v in values:
        v = _tile_extent(v)
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TilingError(f"{what}: tile sizes must be Python ints, found {v!r}",
                              hint="tile shapes are compile-time constants, not run-time sizes")
        v = int(v)
        if v <= 0:
            raise TilingError(f"{what}: tile sizes must be positive, found {v}")
        out.append(v)
    return tuple(out)


def _tile_extent(v):
    """A tail's size ``min(64, n - i * 64)`` (pypto gives a view its valid shape, where CANN's
    ``tile.shape`` is the box's) hints the box: 64, its static bound. Anything else is itself."""
    if isinstance(v, sympy.Min):
        ints = [int(a) for a in v.args if a.is_Integer]
        if ints:
            return min(ints)
    if isinstance(v, sympy.Integer):
        return int(v)
    return v


def set_vec_tile_shapes(*dims) -> None:
    """Tile shape (one entry per dim of the ops that follow) of the vector ops traced after this call."""
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = tuple(dims[0])
    if not dims:
        raise TilingError("set_vec_tile_shapes needs at least one dim")
    _set("vec", _positive_ints(dims, "set_vec_tile_shapes"))


def set_cube_tile_shapes(m, k, n, enable_split_k: bool = False) -> None:
    """Cube tile sizes ``[L0, L1]`` for the m, k and n dims of the matmuls traced after this call."""
    pairs = []
    for name, v in (("m", m), ("k", k), ("n", n)):
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise TilingError(f"set_cube_tile_shapes: {name} must be a pair [L0, L1], found {v!r}")
        l0, l1 = _positive_ints(v, "set_cube_tile_shapes")
        if l0 > l1 or l1 % l0:
            raise TilingError(f"set_cube_tile_shapes: {name} = [{l0}, {l1}] needs L0 <= L1 and L1 a multiple of L0")
        pairs.append((l0, l1))
    _set("cube", {"m": pairs[0], "k": pairs[1], "n": pairs[2], "split_k": bool(enable_split_k)})


def _set(kind, value):
    owner = _trace_root()
    if owner is None:
        _global[kind] = value
        return
    if _local["owner"] != owner:
        _local.update(vec=None, cube=None, owner=owner)
    _local[kind] = value


def _active() -> dict:
    owner = _trace_root()
    local = _local if owner is not None and _local["owner"] == owner else {}
    return {k: local.get(k) if local.get(k) is not None else _global[k] for k in ("vec", "cube")}


def get_vec_tile_shapes():
    return _active()["vec"]


def get_cube_tile_shapes():
    cube = _active()["cube"]
    return None if cube is None else [list(cube["m"]), list(cube["k"]), list(cube["n"])]


def reset_tile_shapes() -> None:
    _global.update(vec=None, cube=None)
    _local.update(vec=None, cube=None, owner=None)


def hinted_values(infos, out) -> list:
    """The tensors a hint is checked against: an op's operands and its result(s)."""
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [v for v in list(infos) + list(outs) if hasattr(v, "shape")]


def stamp(op_def, attrs: dict, infos: list, out) -> None:
    """Record the active hints in a new node's attrs (a vector hint checked against the op's rank)."""
    if _global["vec"] is None and _global["cube"] is None and _local["owner"] is None:
        return
    active = _active()
    if op_def.unit == "vector" and active["vec"] is not None:
        dims = active["vec"]
        rank = max((len(v.shape) for v in hinted_values(infos, out)), default=0)
        if rank and len(dims) > rank:          # a lower-rank op takes the hint's trailing dims (CANN's rule)
            dims = dims[len(dims) - rank:]
        elif rank and len(dims) < rank:
            # an op a pass inserted is never the user's error, nor is data movement (an assemble of a
            # 2-d block into a 4-d tensor, a full): CANN's hint does not bind them. They go unhinted
            if _compiler["depth"] or op_def.family == "views":
                return
            raise TilingError(f"vector tile shape {list(dims)} has {len(dims)} dims but this op works on "
                              f"rank-{rank} tensors", hint=f"call pypto.set_vec_tile_shapes with {rank} sizes "
                              "(an op of lower rank takes the trailing ones)")
        attrs["vec_tile"] = tuple(dims)
        if _compiler["depth"]:
            attrs["hint_inherited"] = True     # passes/hints.py does not reject it for the user
    elif op_def.unit == "cube" and active["cube"] is not None:
        attrs["cube_tile"] = dict(active["cube"])


def snapshot():
    """The hints in force now (global and the current trace's), for ``restore``."""
    return dict(_global), dict(_local)


def restore(saved) -> None:
    _global.clear()
    _global.update(saved[0])
    _local.clear()
    _local.update(saved[1])


class inserted:
    """Within the block, the ops recorded are the front end's own (a write through a squeezed view):
    a hint that does not fit them leaves them unhinted instead of rejecting them."""

    def __enter__(self):
        _compiler["depth"] += 1
        return self

    def __exit__(self, *exc):
        _compiler["depth"] -= 1
        return False


class scoped:
    """Within the block, the active hints are exactly ``vec`` and ``cube`` (used when a pass
    re-traces ops, so they carry the hints their original op was traced with)."""

    def __init__(self, vec=None, cube=None):
        self.vec, self.cube = vec, cube

    def __enter__(self):
        self.saved = (dict(_global), dict(_local))
        _global.update(vec=self.vec, cube=self.cube)
        _local.update(vec=None, cube=None, owner=None)
        _compiler["depth"] += 1
        return self

    def __exit__(self, *exc):
        _compiler["depth"] -= 1
        _global.clear()
        _global.update(self.saved[0])
        _local.clear()
        _local.update(self.saved[1])
        return False

"""Tiling hints (CANN PyPTO semantics): ``set_vec_tile_shapes(*dims)`` and
``set_cube_tile_shapes([mL0, mL1], [kL0, kL1], [nL0, nL1])`` apply to the ops traced after them.

A hint set inside a trace belongs to that trace (it never leaks into the next function traced);
a hint set outside any trace is a global default. ``emit`` stamps the active hints into the attrs
of every op it records (``vec_tile`` on vector ops, ``cube_tile`` on cube ops) after checking
them against the op: a vector hint needs one entry per dim of the op's largest operand, a last
dim whose bytes are a multiple of the machine alignment, and a tile that fits the vector buffer
(double-buffered); a cube hint needs 0 < L0 <= L1, L1 % L0 == 0, 16-aligned sizes and L0/L1
tiles within the cube buffers. A bad hint raises ``TilingError`` at the user's line.
"""
from __future__ import annotations

from ..errors import TilingError

_global = {"vec": None, "cube": None}                  # set outside any trace
_local = {"vec": None, "cube": None, "owner": None}    # set inside the root trace numbered `owner`


def _trace_root():
    from ..frontend import context as ctx
    return ctx.trace_serial if ctx.is_tracing() else None


def _positive_ints(values, what):
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TilingError(f"{what}: tile sizes must be Python ints, found {v!r}",
                              hint="tile shapes are compile-time constants, not run-time sizes")
        v = int(v)
        if v <= 0:
            raise TilingError(f"{what}: tile sizes must be positive, found {v}")
        out.append(v)
    return tuple(out)


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


# ---------------------------------------------------------------- stamping (called by emit)
def stamp(op_def, attrs: dict, infos: list, out) -> None:
    """Record the active hints in a new node's attrs, checked against the op's operands."""
    if _global["vec"] is None and _global["cube"] is None and _local["owner"] is None:
        return
    active = _active()
    if op_def.unit == "vector" and active["vec"] is not None:
        attrs["vec_tile"] = check_vec(active["vec"], infos, out)
    elif op_def.unit == "cube" and active["cube"] is not None:
        check_cube(active["cube"], infos)
        attrs["cube_tile"] = dict(active["cube"])


def _values(infos, out):
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [v for v in list(infos) + list(outs) if hasattr(v, "shape")]


def check_vec(dims: tuple, infos, out) -> tuple:
    from ..machine import get_machine
    spec = get_machine()
    values = _values(infos, out)
    rank = max((len(v.shape) for v in values), default=0)
    if rank == 0:
        return tuple(dims)
    if len(dims) != rank:
        raise TilingError(f"vector tile shape {list(dims)} has {len(dims)} dims but this op works on "
                          f"rank-{rank} tensors", hint=f"call pypto.set_vec_tile_shapes with {rank} sizes")
    widest = max(v.dtype.itemsize for v in values)
    narrowest = min(v.dtype.itemsize for v in values)
    if (dims[-1] * narrowest) % spec.alignment:
        raise TilingError(f"vector tile shape {list(dims)}: the last dim holds {dims[-1] * narrowest} bytes of "
                          f"the narrowest dtype, not a multiple of the {spec.alignment}-byte alignment",
                          hint=f"use a last dim that is a multiple of {spec.alignment // narrowest}")
    elems = 1
    for d in dims:
        elems *= d
    need = 2 * elems * widest        # double-buffered
    if need > spec.capacity["UB"]:
        raise TilingError(f"vector tile shape {list(dims)} needs {need} bytes of UB double-buffered "
                          f"({elems} elements of {widest} bytes), over the {spec.capacity['UB']}-byte UB")
    return tuple(dims)


def check_cube(cube: dict, infos) -> None:
    from ..machine import get_machine
    spec = get_machine()
    item = max((v.dtype.itemsize for v in infos if hasattr(v, "dtype")), default=2)
    (m0, m1), (k0, k1), (n0, n1) = cube["m"], cube["k"], cube["n"]
    for name, v in (("k", k0), ("n", n0)):
        if (v * item) % spec.alignment:
            raise TilingError(f"cube tile {name}L0 = {v} is not aligned: {v * item} bytes is not a multiple of "
                              f"{spec.alignment}")
    checks = (("L0A", m0 * k0 * item), ("L0B", k0 * n0 * item), ("L0C", m0 * n0 * 4),
              ("L1", (m1 * k1 + k1 * n1) * item))
    for space, need in checks:
        if need > spec.capacity[space]:
            raise TilingError(f"cube tile shapes m={list(cube['m'])} k={list(cube['k'])} n={list(cube['n'])} need "
                              f"{need} bytes of {space}, over its {spec.capacity[space]} bytes")


class scoped:
    """Within the block, the active hints are exactly ``vec`` and ``cube`` (used when a pass
    re-traces ops, so they carry the hints their original op was traced with)."""

    def __init__(self, vec=None, cube=None):
        self.vec, self.cube = vec, cube

    def __enter__(self):
        self.saved = (dict(_global), dict(_local))
        _global.update(vec=self.vec, cube=self.cube)
        _local.update(vec=None, cube=None, owner=None)
        return self

    def __exit__(self, *exc):
        _global.clear()
        _global.update(self.saved[0])
        _local.clear()
        _local.update(self.saved[1])
        return False

"""The Tile-level API (``pt.*``): tiles are values; every function records one op (or a few) in the
kernel being traced and checks shapes, dtypes and capacities at the user's line.

Broadcasting follows the tile shapes: [R, C] with [R, 1] is a row-expand op, [R, C] with [1, C] a
column-expand op; anything else must match exactly. Mixed dtypes promote (torch rules) with an explicit
cast; elementwise math on fp16/bf16 computes in fp32 and rounds once per op, as the hardware does.
"""
from __future__ import annotations

import difflib
import math
import warnings

import sympy

from .. import dtypes
from ..dtypes import DataType
from ..errors import (DTypeError, PyptoDeprecationWarning, ShapeError, TilingError, TypeMismatchError,
                      user_location)
from . import trace
from .ir import Value
from .optable import _BINARY, _UNARY, COMPARES, OPS, REDUCTIONS, SCALAR_OPS
from ..ir.isa import ISA
from .views import TileGrid, TileView

F32 = dtypes.float32
_HALF = (dtypes.float16, dtypes.bfloat16)
_CUBE_IN = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.int8)


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, sympy.Expr)) and not isinstance(x, bool)


class Tile:
    """A tile value in a kernel. Operators and methods record tile ops; ``+=`` and friends update the
    tile in place (the same Python object then holds the new value)."""

    __slots__ = ("_v", "__weakref__")
    __hash__ = object.__hash__

    def __init__(self, value: Value):
        self._v = value

    # ---- metadata
    @property
    def shape(self) -> tuple:
        return self._v.shape

    @property
    def dtype(self) -> DataType:
        return self._v.dtype

    @property
    def valid_shape(self) -> tuple:
        return self._v.valid

    @property
    def T(self) -> "Tile":
        return transpose(self)

    def __repr__(self) -> str:
        return f"pt.Tile({self._v!r}, valid={list(self._v.valid)})"

    def __bool__(self):
        raise TypeMismatchError("a tile has no truth value while tracing: use pt.where(mask, a, b) for "
                                "data-dependent choices")

    # ---- arithmetic
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __neg__(self): return neg(self)
    def __abs__(self): return abs(self)
    def __lt__(self, o): return _compare(self, o, "lt")
    def __le__(self, o): return _compare(self, o, "le")
    def __gt__(self, o): return _compare(self, o, "gt")
    def __ge__(self, o): return _compare(self, o, "ge")
    def __eq__(self, o): return _compare(self, o, "eq")
    def __ne__(self, o): return _compare(self, o, "ne")

    def _update(self, t: "Tile") -> "Tile":
        self._v = t._v
        return self

    def __iadd__(self, o): return self._update(add(self, o))
    def __isub__(self, o): return self._update(sub(self, o))
    def __imul__(self, o): return self._update(mul(self, o))
    def __itruediv__(self, o): return self._update(div(self, o))

    # ---- methods
    def exp(self): return exp(self)
    def log(self): return log(self)
    def sqrt(self): return sqrt(self)
    def rsqrt(self): return rsqrt(self)
    def abs(self): return abs(self)
    def to(self, dtype): return cast(self, dtype)
    def float(self): return cast(self, F32)
    def half(self): return cast(self, dtypes.float16)
    def transpose(self): return transpose(self)
    def sum(self, dim: int = -1, keepdim: bool = True): return _reduce_dim("sum", self, dim, keepdim)
    def amax(self, dim: int = -1, keepdim: bool = True): return _reduce_dim("amax", self, dim, keepdim)
    def amin(self, dim: int = -1, keepdim: bool = True): return _reduce_dim("amin", self, dim, keepdim)
    def prod(self, dim: int = -1, keepdim: bool = True): return _reduce_dim("prod", self, dim, keepdim)
    def max(self, dim: int = -1): return _reduce_dim("amax", self, dim)
    def min(self, dim: int = -1): return _reduce_dim("amin", self, dim)
    def expand(self, *shape): return expand(self, shape[0] if len(shape) == 1 else shape)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _unknown(name, [n for n in dir(Tile) if not n.startswith("_")], "a tile has no method")


# ------------------------------------------------------------------ helpers
def _tile(x, fn: str, what: str = "tile") -> Tile:
    if not isinstance(x, Tile):
        hint = "load it first: pt.load(view)" if isinstance(x, (TileView, TileGrid)) else None
        raise TypeMismatchError(f"pt.{fn}: expected a tile for {what}, found {type(x).__name__}", hint=hint)
    return x


def _val(t: Tile, loc=None) -> Value:
    trace.current().check_scope(t._v, loc or user_location())
    return t._v


def _emit(op, args, attrs=None, out=None, hint=None) -> Tile | None:
    v = trace.current().emit(op, args, attrs, out, hint=hint)
    return Tile(v) if v is not None else None


def _out(t: Value, dtype=None, shape=None, valid=None):
    return (shape or t.shape, dtype or t.dtype, valid or t.valid)


def _fmt(t: Tile) -> str:
    return f"{t.dtype}[{t.shape[0]}, {t.shape[1]}]"


def _capacity(key: str) -> int:
    return trace.current().machine.capacity[key]


def _check_fits(shape, dtype: DataType, space: str, what: str) -> None:
    nbytes = shape[0] * shape[1] * dtype.itemsize
    cap = _capacity(space)
    if nbytes > cap:
        raise TilingError(f"{what}: a {dtype}[{shape[0]}, {shape[1]}] tile needs {nbytes} bytes, over the "
                          f"{cap}-byte {space} of a core", hint="pick smaller tile shapes")


# ------------------------------------------------------------------ GM <-> tiles
def load(view) -> Tile:
    """The tile a view names, read from GM (only its valid part)."""
    if isinstance(view, TileGrid):
        raise TypeMismatchError("pt.load: expected one tile view, found a grid of tiles",
                                hint="index the grid with tile coordinates: X.tile((BM, BN))[i, j]")
    if not isinstance(view, TileView):
        raise TypeMismatchError(f"pt.load: expected a tile view (X.tile((rows, cols))[i, j]), found "
                                f"{type(view).__name__}")
    _check_fits(view.shape, view.dtype, "UB", "pt.load")
    return _emit("load", [view.region()], out=(view.shape, view.dtype, view.valid), hint=view.tensor)


def store(view, tile: Tile) -> None:
    """Write the tile into the view (its valid part; the tile is cast to the tensor's dtype if needed)."""
    if not isinstance(view, TileView):
        raise TypeMismatchError(f"pt.store: expected a tile view as destination, found {type(view).__name__}")
    tile = _tile(tile, "store", "the value")
    v = _val(tile)
    if tuple(v.shape) != tuple(view.shape):
        raise ShapeError(f"pt.store: a {_fmt(tile)} tile into a [{view.shape[0]}, {view.shape[1]}] view of "
                         f"{view.tensor}: the shapes differ")
    if not _same_valid(v.valid, view.valid):
        tile = _emit("copy", [v], out=_out(v, valid=view.valid), hint="st")
        v = tile._v
    trace.current().emit("store", [view.region(), v])


def _same_valid(a, b) -> bool:
    """Structurally equal valid shapes (the views of one tile grid build them alike); anything else
    gets a copy that prepare.py folds into the producing op when it can."""
    return all(x == y or sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a, b))


# ------------------------------------------------------------------ matmul
def matmul(a: Tile, b: Tile, *, trans_a: bool = False, trans_b: bool = False, out_dtype=None,
           acc: Tile | None = None) -> Tile:
    """a @ b on the cube (fp32 accumulation; ``out_dtype`` is the result's dtype, fp32 by default). ``acc``
    adds the product into an accumulator (``acc + a @ b``, kept in the cube's L0C across a loop). An fp32
    operand next to an fp16/bf16 one is cast to the half type (the cube multiplies half types)."""
    a, b = _tile(a, "matmul", "a"), _tile(b, "matmul", "b")
    if trans_a:
        a = transpose(a)
    if trans_b:
        b = transpose(b)
    va, vb = _val(a), _val(b)
    if va.dtype not in _CUBE_IN or vb.dtype not in _CUBE_IN:
        raise DTypeError(f"pt.matmul: the cube multiplies fp16, bf16, fp32 or int8 tiles, found "
                         f"{va.dtype} @ {vb.dtype}")
    if va.dtype != vb.dtype and {va.dtype, vb.dtype} <= set(_CUBE_IN[:3]) and F32 in (va.dtype, vb.dtype):
        # an fp32 tile times an fp16/bf16 one (softmax probabilities @ V): the cube takes half types
        half = vb.dtype if va.dtype == F32 else va.dtype
        if va.dtype == F32:
            a = cast(a, half)
            va = _val(a)
        else:
            b = cast(b, half)
            vb = _val(b)
    if va.dtype != vb.dtype:
        raise DTypeError(f"pt.matmul: operands must share a dtype, found {va.dtype} @ {vb.dtype}",
                         hint="pt.cast one of them")
    if va.shape[1] != vb.shape[0]:
        raise ShapeError(f"pt.matmul: incompatible tiles {_fmt(a)} @ {_fmt(b)}: a has {va.shape[1]} columns, "
                         f"b has {vb.shape[0]} rows")
    acc_dt = dtypes.int32 if va.dtype == dtypes.int8 else F32
    out_dtype = dtypes.to_dtype(out_dtype) if out_dtype is not None else acc_dt
    shape = (va.shape[0], vb.shape[1])
    _check_fits(va.shape, va.dtype, "L0A", "pt.matmul (left operand in L0A)")
    _check_fits(vb.shape, vb.dtype, "L0B", "pt.matmul (right operand in L0B)")
    _check_fits(shape, acc_dt, "L0C", "pt.matmul (accumulator in L0C)")
    args = [va, vb]
    if acc is not None:
        acc = _tile(acc, "matmul", "acc")
        vc = _val(acc)
        if tuple(vc.shape) != shape or vc.dtype != acc_dt:
            raise ShapeError(f"pt.matmul: acc must be a {acc_dt}[{shape[0]}, {shape[1]}] tile, found {_fmt(acc)}")
        if out_dtype != acc_dt:
            raise DTypeError(f"pt.matmul: with acc the result is the {acc_dt} accumulator (out_dtype={out_dtype})")
        args.append(vc)
    valid = (va.valid[0], vb.valid[1])
    return _emit("matmul", args, {"acc_dtype": acc_dt}, (shape, out_dtype, valid), hint="mm")


def _accumulable(v: Value) -> bool:
    """A value the cube can accumulate a product into: zeros, or a matmul result."""
    op = v.op
    if op is None:
        return False
    if op.op == "matmul":
        return op.out.dtype == op.attrs["acc_dtype"]
    return op.op == "full" and op.args[0] == 0


def _fresh_product(v: Value) -> bool:
    op = v.op
    return op is not None and op.op == "matmul" and len(op.args) == 2 and v.dtype == op.attrs["acc_dtype"]


# ------------------------------------------------------------------ elementwise
_COMMUTATIVE = {n for n in _BINARY if OPS[n].commutative}


def _binary(name: str, a, b) -> Tile:
    ta, tb = isinstance(a, Tile), isinstance(b, Tile)
    if not ta and not tb:
        raise TypeMismatchError(f"pt.{name}: expected at least one tile, found {type(a).__name__} and "
                                f"{type(b).__name__}")
    if ta != tb:
        t, s = (a, b) if ta else (b, a)
        if not _is_scalar(s):
            raise TypeMismatchError(f"pt.{name}: expected a tile or a number, found {type(s).__name__}")
        v = _val(t)
        dtype = dtypes.promote_scalar(v.dtype, s) if isinstance(s, (int, float)) else v.dtype
        if dtype != v.dtype:
            v = _val(cast(t, dtype))
        if name not in SCALAR_OPS:            # no scalar form of its instruction: the number as a tile
            s = full_like(Tile(v), s)
            return _binary(name, *((Tile(v), s) if ta else (s, Tile(v))))
        return _emit(SCALAR_OPS[name][0 if ta else 1], [v, s], out=_out(v))
    va, vb = _val(a), _val(b)
    if name == "add" and va.shape == vb.shape:         # acc + a @ b: accumulate on the cube
        for x, y in ((va, vb), (vb, va)):
            if _fresh_product(y) and _accumulable(x) and x.dtype == y.dtype:
                pa, pb = y.op.args
                return _emit("matmul", [pa, pb, x], dict(y.op.attrs), _out(y), hint="mm")
    if va.dtype != vb.dtype:
        dt = dtypes.promote(va.dtype, vb.dtype)
        if va.dtype != dt:
            va = _val(cast(a, dt))
        if vb.dtype != dt:
            vb = _val(cast(b, dt))
    (r1, c1), (r2, c2) = va.shape, vb.shape
    if (r1, c1) == (r2, c2):
        return _emit(name, [va, vb], out=_out(va))
    if r1 == r2 and c2 == 1 or c1 == c2 and r2 == 1:
        form = f"{name}_row" if r1 == r2 and c2 == 1 else f"{name}_col"
        if form in OPS:
            return _emit(form, [va, vb], out=_out(va))
        return _binary(name, Tile(va), _expand(Tile(vb), va.shape, valid=va.valid))   # no broadcast form
    if r1 == r2 and c1 == 1 or c1 == c2 and r1 == 1:     # the broadcast one first
        big = Tile(vb)
        if name in _COMMUTATIVE:
            return _binary(name, big, Tile(va))
        return _binary(name, _expand(Tile(va), vb.shape, valid=vb.valid), big)
    if c1 == 1 and r2 == 1:                             # [R, 1] op [1, C]
        shape = (r1, c2)
        valid = (va.valid[0], vb.valid[1])
        return _binary(name, _expand(Tile(va), shape, valid=valid), Tile(vb))
    if r1 == 1 and c2 == 1:
        return _binary(name, Tile(vb), Tile(va)) if name in _COMMUTATIVE else \
            _binary(name, _expand(Tile(va), (r2, c1), valid=(vb.valid[0], va.valid[1])), Tile(vb))
    raise ShapeError(f"pt.{name}: tiles {_fmt(a)} and {_fmt(b)} do not broadcast "
                     "(same shape, or one of them [R, 1] / [1, C])")


def _binary_fn(name: str):
    def fn(a, b) -> Tile:
        return _binary(name, a, b)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of two tiles, or of a tile and a number (torch's {name}, broadcasting " \
                 "[R, 1] / [1, C])."
    return fn


def _unary(name: str):
    result = ISA[OPS[name].pto].result

    def fn(x: Tile) -> Tile:
        v = _val(_tile(x, name))
        if not v.dtype.is_floating and ISA[OPS[name].pto].dtypes == "float":
            raise DTypeError(f"pt.{name}: expected a floating tile, found {v.dtype}")
        return _emit(name, [v], out=_out(v, dtype=dtypes.bool_ if result == "mask" else None))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of a tile (torch's {name})."
    return fn


# one function per elementwise op of the registry (optable: its binary and unary one-instruction ops)
for _n in _BINARY:
    globals()[_n] = _binary_fn(_n)
for _n in _UNARY:
    globals()[_n] = _unary(_n)
ELEMENTWISE = (*_BINARY, *_UNARY)


def cast(x: Tile, dtype, *, round: str | None = None) -> Tile:    # noqa: A002
    """The tile converted to ``dtype`` (round-to-nearest-even; ``round`` for float -> int)."""
    v = _val(_tile(x, "cast"))
    dtype = dtypes.to_dtype(dtype)
    if dtype == v.dtype:
        return x
    return _emit("cast", [v], {"round": round} if round else {}, _out(v, dtype=dtype))


def copy(x: Tile) -> Tile:
    v = _val(_tile(x, "copy"))
    return _emit("copy", [v], out=_out(v))


def reshape(x: Tile, shape) -> Tile:
    """The tile's elements in row-major order, as a tile of another shape (same element count). The
    vector core writes the tile to a GM scratch row and reads it back in the new shape, so it costs a
    store and a load. A tile with a tail has no row-major order: a static partial valid shape is an
    error; at run time the padding reshapes along (its values are undefined)."""
    v = _val(_tile(x, "reshape"))
    shape = _shape2(shape, "reshape")
    if shape[0] * shape[1] != v.shape[0] * v.shape[1]:
        raise ShapeError(f"pt.reshape: a {_fmt(x)} tile has {v.shape[0] * v.shape[1]} elements, "
                         f"[{shape[0]}, {shape[1]}] holds {shape[0] * shape[1]}")
    if any(isinstance(x, int) and x != d for x, d in zip(v.valid, v.shape)):
        raise ShapeError(f"pt.reshape: the tile's valid shape {list(v.valid)} is not its whole shape "
                         f"{list(v.shape)}; a tile with a tail has no row-major order to keep",
                         hint="reshape tiles of full views, or pt.where the tail to a value first")
    if shape == tuple(v.shape):
        return x
    return _emit("reshape", [v], out=(shape, v.dtype, shape))


def transpose(x: Tile) -> Tile:
    v = _val(_tile(x, "transpose"))
    return _emit("transpose", [v], out=((v.shape[1], v.shape[0]), v.dtype, (v.valid[1], v.valid[0])))


def expand(x: Tile, *shape) -> Tile:
    """``x`` repeated to ``shape`` (torch's expand): [R, 1] -> [R, C] (row expand) or [1, C] -> [R, C]
    (column expand). ``pt.expand(x, (R, C))``, ``pt.expand(x, R, C)`` or ``x.expand(R, C)``."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    return _expand(_tile(x, "expand"), shape)


def _expand(x: Tile, shape, *, valid=None) -> Tile:
    v = _val(_tile(x, "expand"))
    shape = tuple(shape)
    if v.shape == shape:
        return x
    if len(shape) == 2 and v.shape[1] == 1 and v.shape[0] == shape[0]:
        op, valid = "rowexpand", valid or (v.valid[0], shape[1])
    elif len(shape) == 2 and v.shape[0] == 1 and v.shape[1] == shape[1]:
        op, valid = "colexpand", valid or (shape[0], v.valid[1])
    else:
        raise ShapeError(f"pt.expand: a {_fmt(x)} tile does not expand to {list(shape)} (an [R, 1] tile "
                         "expands to [R, C], a [1, C] tile to [R, C])")
    return _emit(op, [v], out=(shape, v.dtype, valid))


# ------------------------------------------------------------------ reductions
def _reduce_dim(kind: str, x: Tile, dim: int, keepdim: bool = True) -> Tile:
    """The registry's reduction ``kind`` (sum, amax, amin, prod) over one dim of a tile: dim=-1 (or 1)
    gives one value per row ([R, 1]), dim=0 (or -2) one per column ([1, C]), over the valid part."""
    v = _val(_tile(x, kind))
    if isinstance(dim, bool) or dim not in (0, 1, -1, -2):
        raise ShapeError(f"pt.{kind}(dim={dim!r}): a tile has dims 0 (rows) and 1 (columns): dim=-1 or 1 gives "
                         "one value per row, dim=0 one per column")
    if keepdim is not True:
        raise ShapeError(f"pt.{kind}(keepdim={keepdim!r}): a tile stays two-dimensional, its reductions "
                         "keep the reduced dim ([R, 1] / [1, C])")
    row = dim in (1, -1)
    op = REDUCTIONS[kind][0 if row else 1][1:].lower()
    if not v.dtype.is_floating and ISA[OPS[op].pto].dtypes == "float":
        raise DTypeError(f"pt.{kind}: expected a floating tile, found {v.dtype}")
    shape = (v.shape[0], 1) if row else (1, v.shape[1])
    valid = (v.valid[0], 1) if row else (1, v.valid[1])
    return _emit(op, [v], out=(shape, v.dtype, valid))


def _reduction_fn(kind: str):
    def fn(x: Tile, dim: int = -1, keepdim: bool = True) -> Tile:
        return _reduce_dim(kind, x, dim, keepdim)
    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = (f"torch's {kind}(x, dim, keepdim=True) of a tile over its valid part: dim=-1 (or 1) one value "
                  f"per row ([R, 1], {REDUCTIONS[kind][0]}), dim=0 one per column ([1, C], {REDUCTIONS[kind][1]}).")
    return fn


for _n in REDUCTIONS:
    globals()[_n] = _reduction_fn(_n)


def max(x, dim=-1):     # noqa: A001
    """Row / column max of a tile (``dim``), the elementwise maximum of two tiles / a tile and a number, or
    the max of two (symbolic) integers."""
    if not isinstance(x, Tile) and not isinstance(dim, Tile):
        return sympy.Max(x, dim)
    if isinstance(dim, Tile) or _is_scalar(dim) and not isinstance(dim, int):
        return maximum(x, dim)
    return _reduce_dim("amax", x, dim)


def min(x, dim=-1):     # noqa: A001
    """Row / column min of a tile, an elementwise minimum, or the min of two (symbolic) integers."""
    if not isinstance(x, Tile) and not isinstance(dim, Tile):
        return sympy.Min(x, dim)
    if isinstance(dim, Tile) or _is_scalar(dim) and not isinstance(dim, int):
        return minimum(x, dim)
    return _reduce_dim("amin", x, dim)


def mean(x: Tile, dim: int = -1) -> Tile:
    """Row / column mean over the valid part."""
    v = _val(_tile(x, "mean"))
    n = v.valid[1] if dim in (1, -1) else v.valid[0]
    return div(_reduce_dim("sum", x, dim), n if not isinstance(n, int) else float(n))


# ------------------------------------------------------------------ generators, masks, select
def _shape2(shape, fn):
    shape = tuple(shape)
    if len(shape) != 2 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ShapeError(f"pt.{fn}: a tile shape is two positive ints, found {shape}")
    return shape


def full(shape, value, dtype=F32) -> Tile:
    shape = _shape2(shape, "full")
    if not _is_scalar(value):
        raise TypeMismatchError(f"pt.full: the fill value is a number, found {type(value).__name__}")
    return _emit("full", [value], out=(shape, dtypes.to_dtype(dtype), shape))


def zeros(shape, dtype=F32) -> Tile:
    return full(shape, 0, dtype)


def ones(shape, dtype=F32) -> Tile:
    return full(shape, 1, dtype)


def full_like(x: Tile, value) -> Tile:
    v = _val(_tile(x, "full_like"))
    return _emit("full", [value], out=_out(v))


def zeros_like(x: Tile) -> Tile:
    return full_like(x, 0)


def arange(shape, *, axis: int = 1, start=0, dtype=F32) -> Tile:
    """dst[r, c] = start + c (axis=1) or start + r (axis=0)."""
    shape = _shape2(shape, "arange")
    if axis not in (0, 1):
        raise ShapeError(f"pt.arange: axis is 0 (rows) or 1 (columns), found {axis}")
    return _emit("iota", [start], {"axis": axis}, (shape, dtypes.to_dtype(dtype), shape))


def tril(shape, diagonal=0) -> Tile:
    """A bool mask: 1 where c <= r + diagonal (``diagonal`` may be a run-time scalar)."""
    shape = _shape2(shape, "tril")
    return _emit("tril", [diagonal], out=(shape, dtypes.bool_, shape))


def triu(shape, diagonal=0) -> Tile:
    shape = _shape2(shape, "triu")
    return _emit("triu", [diagonal], out=(shape, dtypes.bool_, shape))


def causal_mask(shape, row_offset, col_offset) -> Tile:
    """The causal mask of a tile whose element [r, c] is (query row_offset + r, key col_offset + c):
    true where the key is not after the query."""
    return tril(shape, sympy.sympify(row_offset) - col_offset)


def _compare(a, b, cmp: str) -> Tile:
    """a <cmp> b elementwise as a bool tile (one of the registry's comparisons, COMPARES); a number on
    either side."""
    if not isinstance(a, Tile):
        if not isinstance(b, Tile):
            raise TypeMismatchError(f"pt.{cmp}: expected at least one tile, found {type(a).__name__} and "
                                    f"{type(b).__name__}")
        flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
        return _compare(b, a, flip[cmp])
    va = _val(a)
    if _is_scalar(b):
        return _emit("cmps", [va, b], {"cmp": cmp}, _out(va, dtype=dtypes.bool_))
    vb = _val(_tile(b, cmp, "the right operand"))
    if va.shape != vb.shape:
        raise ShapeError(f"pt.{cmp}: tiles {_fmt(a)} and {_fmt(Tile(vb))} differ in shape")
    if va.dtype != vb.dtype:
        dt = dtypes.promote(va.dtype, vb.dtype)
        va, vb = _val(cast(a, dt)), _val(cast(Tile(vb), dt))
    return _emit("cmp", [va, vb], {"cmp": cmp}, _out(va, dtype=dtypes.bool_))


def _comparison_fn(cmp: str):
    def fn(a, b) -> Tile:
        return _compare(a, b, cmp)
    fn.__name__ = fn.__qualname__ = cmp
    fn.__doc__ = f"torch's {cmp}(a, b): a bool tile; a tile and a tile of its shape, or a tile and a number."
    return fn


for _n in COMPARES:
    globals()[_n] = _comparison_fn(_n)


def where(mask: Tile, a, b) -> Tile:
    """mask ? a : b elementwise; ``a`` or ``b`` may be a number."""
    m = _val(_tile(mask, "where", "the mask"))
    if m.dtype != dtypes.bool_:
        raise DTypeError(f"pt.where: the mask must be a bool tile (a comparison or pt.tril), found {m.dtype}")
    like = a if isinstance(a, Tile) else b if isinstance(b, Tile) else None
    lv = _val(like) if like is not None else Value(m.shape, F32, m.valid)
    ta = a if isinstance(a, Tile) else _fill_as(lv, a, m)
    tb = b if isinstance(b, Tile) else _fill_as(lv, b, m)
    va, vb = _val(ta), _val(tb)
    if not (va.shape == vb.shape == m.shape):
        raise ShapeError(f"pt.where: mask {list(m.shape)}, a {list(va.shape)} and b {list(vb.shape)} must "
                         "have one shape")
    if va.dtype != vb.dtype:
        raise DTypeError(f"pt.where: a and b must share a dtype, found {va.dtype} and {vb.dtype}")
    return _emit("select", [m, va, vb], out=_out(va))


def _fill_as(like: Value, value, mask: Value) -> Tile:
    if not _is_scalar(value):
        raise TypeMismatchError(f"pt.where: expected a tile or a number, found {type(value).__name__}")
    return _emit("full", [value], out=(like.shape, like.dtype, like.valid))


# ------------------------------------------------------------------ composites
def softmax(x: Tile, dim: int = -1) -> Tile:
    """Softmax along the rows (dim=-1) or columns (dim=0), computed in fp32, in the input's dtype."""
    t = _tile(x, "softmax")
    xf = cast(t, F32) if t.dtype in _HALF else t
    row = dim in (1, -1)
    m = _reduce_dim("amax", xf, -1 if row else 0)
    e = exp(xf - m)
    s = _reduce_dim("sum", e, -1 if row else 0)
    return cast(e / s, t.dtype)


def gelu(x: Tile, approximate: str = "none") -> Tile:
    """GELU as torch: exact (erf) or approximate='tanh'."""
    t = _tile(x, "gelu")
    if approximate == "tanh":
        inner = (t + t * t * t * 0.044715) * math.sqrt(2.0 / math.pi)
        return t * 0.5 * (tanh(inner) + 1.0)
    if approximate != "none":
        raise TypeMismatchError(f"pt.gelu: approximate is 'none' or 'tanh', found {approximate!r}")
    return t * 0.5 * (erf(t * (1.0 / math.sqrt(2.0))) + 1.0)


def silu(x: Tile) -> Tile:
    t = _tile(x, "silu")
    return t * sigmoid(t)


# ------------------------------------------------------------------ old names
class UnknownNameError(TypeMismatchError, AttributeError):
    """``pt.<name>`` or ``tile.<name>`` that does not exist (an AttributeError too, for hasattr / getattr)."""


def _unknown(name: str, known, what: str) -> UnknownNameError:
    close = difflib.get_close_matches(name, [*known, *DEPRECATED], n=3)
    close = [f"pt.{DEPRECATED[c][0] if c in DEPRECATED else c}" for c in close]
    return UnknownNameError(f"{what} {name!r}", hint=f"did you mean {' or '.join(close)}?" if close else
                            "the Tile level's ops are named as in the op registry (torch's names): see "
                            "pypto/tile/README.md")


def unknown_op(name: str, known) -> UnknownNameError:
    """The error for ``pt.<name>`` that pypto.tile does not have (its module __getattr__)."""
    return _unknown(name, known, "pypto.tile has no op")


_WARNED: set[str] = set()


def _deprecated(old: str, new: str, fn):
    """``fn`` under its old name: warns once per name (PyptoDeprecationWarning at the user's line) naming
    the registry's spelling ``new``, then does what the new spelling does."""
    def wrapper(*args, **kwargs):
        if old not in _WARNED:
            _WARNED.add(old)
            loc = user_location()
            msg = f"pt.{old} is deprecated: use pt.{new} (the op registry's name)"
            if loc is None:
                warnings.warn(msg, PyptoDeprecationWarning, stacklevel=2)
            else:
                warnings.warn_explicit(msg, PyptoDeprecationWarning, loc.file, loc.line)
        return fn(*args, **kwargs)
    wrapper.__name__ = wrapper.__qualname__ = old
    wrapper.__doc__ = f"Deprecated: use pt.{new}."
    return wrapper


def _old_compare(a, b, cmp: str) -> Tile:
    if cmp not in COMPARES:
        raise TypeMismatchError(f"pt.compare: cmp is one of {', '.join(COMPARES)}, found {cmp!r}",
                                hint="write pt.eq(a, b), pt.lt(a, b), ...")
    return _compare(a, b, cmp)


# old spelling -> (the call replacing it, what it does)
DEPRECATED = {
    **{f"{side}{kind}": (f"{new}(x, dim={dim})", (lambda new, dim: lambda x: _reduce_dim(new, x, dim))(new, dim))
       for kind, new in (("sum", "sum"), ("max", "amax"), ("min", "amin"))
       for side, dim in (("row", -1), ("col", 0))},
    "compare": ("eq / ne / lt / le / gt / ge (a, b)", _old_compare),
    "broadcast_to": ("expand(x, shape)", lambda x, shape, valid=None: _expand(x, shape, valid=valid)),
}
for _old, (_new, _fn) in DEPRECATED.items():
    globals()[_old] = _deprecated(_old, _new, _fn)

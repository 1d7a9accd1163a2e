"""The table from ATen overloads to pypto's traced functions (``RULES``), and what pypto can take.

A rule is live while every pypto function it ``needs`` exists (op families land over time; a rule
switches on by itself when its functions do), and its ``accepts`` check passes on the node's
non-tensor arguments. A rule receives the node's arguments by schema name ('self' is 'input'), with
pypto Tensors for tensors and pypto sizes for SymInts, and a NodeContext holding the result torch
expects (shape and dtype from the FakeTensor)."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import torch

from .. import dtypes, symbolic as sym
from ..frontend import api
from ..frontend.tensor import Tensor
from ..ops.registry import REGISTRY
from . import sort_rules
from .conv import batch_norm, batch_norm_accepts, convolution, convolution_accepts
from .meta import ConversionError, Lazy, is_f64_scalar, size_expr

aten = torch.ops.aten
prims = torch.ops.prims


@dataclass(frozen=True)
class Rule:
    convert: Callable                    # (cx, **arguments by schema name; 'self' is 'input') -> value
    needs: tuple = ()                    # pypto functions it calls (looked up on the pypto module)
    accepts: Callable | None = None      # (arguments) -> None when fine, else why not
    compute: bool = True                 # False for views, copies and creation

    def missing(self) -> list[str]:
        return [n for n in self.needs if not callable(getattr(api, n, None))]


def fn(name: str) -> Callable:
    """The traced pypto function ``name`` (pypto.frontend.api re-exports every op family)."""
    return getattr(api, name)


@dataclass
class NodeContext:
    """What a rule may know about the node it converts: the expected result (from the FakeTensor)."""
    node: torch.fx.Node
    module: torch.nn.Module
    out_shape: tuple | None = None
    out_dtype: dtypes.DataType | None = None

    def cast(self, x, dt: dtypes.DataType | None = None):
        dt = dt or self.out_dtype
        return api.cast(x, dt) if isinstance(x, Tensor) and x.dtype != dt else x

    def common_dtype(self) -> dtypes.DataType:
        """torch's computation dtype for this node's operands (0-d tensors and Python scalars count
        the way torch counts them)."""
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in self.node.args[:2]]
        vals = [_SYMBOLIC_AS_NUMBER.get(type(v), v) for v in vals]
        vals = [v for v in vals if isinstance(v, (torch.Tensor, int, float, bool))]
        if len(vals) == 2:
            dt = torch.result_type(*vals)
            return dtypes.float32 if dt == torch.float64 else dtypes.from_torch(dt)    # 0-d float64: see is_f64_scalar
        raise ConversionError(f"{self.node.name}: cannot tell torch's computation dtype from {self.node.args}")


# a symbolic scalar operand promotes like a Python number of its kind
_SYMBOLIC_AS_NUMBER = {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}


def _numbers_only(*names):
    def accepts(a):
        for n in names:
            if a.get(n) is not None and not isinstance(a[n], (int, float)):
                return f"'{n}' must be a constant number, found {a[n]!r}"
        return None
    return accepts


# ---------------------------------------------------------------- elementwise
def _at_defaults(defaults: dict):
    """accepts: every argument beyond the operands is at its schema default (softplus's beta=1,
    threshold=20 are what pypto.softplus computes)."""
    def accepts(a):
        for k, v in defaults.items():
            if a.get(k) != v:
                return f"'{k}'={a.get(k)!r} (pypto computes {k}={v!r} only)"
        return None
    return accepts


def _unary(name, defaults=None):
    return Rule(lambda cx, input, **_: fn(name)(input), needs=(name,),
                accepts=_at_defaults(defaults) if defaults else None)


def _arith(name):
    """add/sub (with alpha), mul, div, pow, maximum...: operands cast to the result dtype first, as
    torch computes them."""
    def convert(cx, input, other=None, alpha=1, exponent=None):
        other = exponent if other is None else other      # pow's second operand is 'exponent'
        if alpha != 1:
            other = fn("mul")(other, alpha)
        return fn(name)(cx.cast(input), cx.cast(other))
    return Rule(convert, needs=(name,) + (("mul",) if name in ("add", "sub") else ()),
                accepts=_numbers_only("alpha"))


def _compare(name):
    def convert(cx, input, other):
        dt = cx.common_dtype()
        return fn(name)(cx.cast(input, dt), cx.cast(other, dt))
    return Rule(convert, needs=(name,))


def _bool_only(name):
    """bitwise ops on bool tensors are the logical ops."""
    def accepts(a):
        return None if a.get("_dtype") == torch.bool else "bitwise ops are supported on bool tensors only"
    return Rule(lambda cx, input, other=None: fn(name)(input) if other is None else fn(name)(input, other),
                needs=(name,), accepts=accepts)


def _div_mode(cx, input, other, rounding_mode=None):
    # floor: the registry's floor_divide (torch's rule; floor(a / b) is off where a / b rounds up to an integer)
    dt = cx.out_dtype if cx.out_dtype.is_floating else dtypes.float32
    q = fn("floor_divide" if rounding_mode == "floor" else "div")(cx.cast(input, dt), cx.cast(other, dt))
    return cx.cast(q)


def _div_mode_accepts(a):
    """Floor division is computed in floating point: exact for floating inputs only (int64 values beyond
    2**24 would round)."""
    mode = a.get("rounding_mode")
    if mode is None or (mode == "floor" and a.get("_dtype") is not None and a["_dtype"].is_floating_point):
        return None
    return f"div rounding_mode={mode!r} on {a.get('_dtype')}"


def _isnan(cx, input):
    return fn("ne")(input, input)


def _isinf(cx, input):
    return fn("logical_and")(fn("logical_not")(fn("isfinite")(input)), fn("eq")(input, input))


def _where(cx, condition, input, other):
    return fn("where")(condition, cx.cast(input), cx.cast(other))


def _clamp(cx, input, min=None, max=None):
    return fn("clip")(input, min, max)


def _gelu(cx, input, approximate="none"):
    return fn("gelu")(input, approximate=approximate)


def _identity(cx, input, **_):
    return input


def _to_copy(cx, input, dtype=None, **_):
    return api.cast(input, cx.out_dtype)


def _on_cpu_strided(a):
    if a.get("device") is not None and torch.device(a["device"]).type != "cpu":
        return f"device {a['device']} is not the CPU"
    if a.get("layout") not in (None, torch.strided):
        return f"layout {a['layout']} is not strided"
    return None


# ---------------------------------------------------------------- creation
def _full(cx, size, fill_value, **_):
    return api.full(tuple(size_expr(d) for d in size), fill_value, cx.out_dtype)


def _scalar_tensor(cx, s, **_):
    return api.scalar(s, cx.out_dtype)


def _full_like(cx, input, fill_value, **_):
    return api.full(tuple(input.shape), fill_value, cx.out_dtype)


def _full_accepts(a):
    return _on_cpu_strided(a) or _numbers_only("fill_value", "s")(a)


# ---------------------------------------------------------------- views
def _dims(x: Tensor) -> list:
    return list(x.shape)


def _reshape_to_out(cx, input, **_):
    return api.reshape(input, cx.out_shape)


def _norm(d: int, rank: int) -> int:
    return d % rank if rank else 0


def _offset(start, size):
    """A slice bound as a pypto offset: None -> 0, negative -> counted from the end."""
    if start is None:
        return 0
    start = size_expr(start)
    if isinstance(start, int) and start < 0:
        return sym.simplify(size + start)
    if isinstance(start, int) and isinstance(size, int):
        return min(start, size)
    return start


def _box(x: Tensor, dim: int, offset, length) -> Tensor:
    offsets = [0] * x.ndim
    shape = _dims(x)
    offsets[dim], shape[dim] = offset, length
    return api.emit("view", [x], {"offsets": tuple(offsets), "shape": tuple(shape)})


def _slice(cx, input, dim=0, start=None, end=None, step=1):
    dim = _norm(dim, input.ndim)
    off = _offset(start, input.shape[dim])
    length = cx.out_shape[dim]
    if isinstance(off, int) and off == 0 and sym.equal(length, input.shape[dim]) is True:
        return input
    return _box(input, dim, off, length)


def _select(cx, input, dim, index):
    dim = _norm(dim, input.ndim)
    return api.reshape(_box(input, dim, _offset(index, input.shape[dim]), 1), cx.out_shape)


def _split_sizes(cx, input, split_sizes, dim=0):
    dim = _norm(dim, input.ndim)
    out, off = [], 0
    for s in split_sizes:
        s = size_expr(s)
        out.append(_box(input, dim, off, s))
        off = sym.simplify(off + s)
    return out


def _split(cx, input, split_size, dim=0):
    dim = _norm(dim, input.ndim)
    sizes = [size_expr(v.shape[dim]) for v in cx.node.meta["val"]]
    return _split_sizes(cx, input, sizes, dim)


def _expand(cx, input, size, implicit=False):
    return fn("expand")(input, *cx.out_shape)


def _cat(cx, tensors, dim=0):
    tensors = [cx.cast(t) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]   # legacy empty tensors
    return fn("concat")(tensors, dim)


def _arange(cx, start=0, end=None, step=1, **_):
    return fn("arange")(start, end, step, dtype=cx.out_dtype)


def _tri(name):
    return Rule(lambda cx, input, diagonal=0: fn(name)(input, diagonal), needs=(name,))


def _getitem(cx, input, index):
    if isinstance(input, Lazy):
        return input.get(index)
    if isinstance(input, (list, tuple)):
        return input[index]
    raise ConversionError(f"getitem on {type(input).__name__}")


def _getitem_accepts(a):
    src = a.get("input")
    if isinstance(src, torch.fx.Node) and unsupported_reason(src) is None:
        return None
    return "getitem of a value pypto does not produce"


def _static_dim(node_or_val, dim):
    v = node_or_val.meta.get("val") if isinstance(node_or_val, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    d = v.shape[dim % v.dim()] if v.dim() else None
    return d if isinstance(d, int) else None


def _scatter_box(cx, input, src, dim, lo, length):
    """``input`` with the box [lo, lo + length) along ``dim`` replaced by ``src``: a concat of the kept
    pieces and src (slice_scatter / select_scatter, i.e. index assignment ``y[:, 0] = v``)."""
    size = input.shape[dim]
    parts = [_box(input, dim, 0, lo)] if lo else []
    parts.append(cx.cast(src, input.dtype))
    if size - lo - length:
        parts.append(_box(input, dim, lo + length, size - lo - length))
    return fn("concat")(parts, dim) if len(parts) > 1 else parts[0]


def _slice_scatter(cx, input, src, dim=0, start=None, end=None, step=1):
    dim = _norm(dim, input.ndim)
    size = input.shape[dim]
    lo = 0 if start is None else (start + size if start < 0 else min(start, size))
    return _scatter_box(cx, input, src, dim, lo, src.shape[dim])


def _slice_scatter_accepts(a):
    """Static bounds along a static dim (so the kept pieces have known, possibly empty, sizes), step 1."""
    if a.get("step", 1) != 1:
        return f"slice_scatter step {a.get('step')}"
    if _static_dim(a["input"], a.get("dim", 0)) is None:
        return "slice_scatter along a dynamic dim"
    for k in ("start", "end"):
        if a.get(k) is not None and not isinstance(a[k], int):
            return f"slice_scatter with a symbolic {k}"
    return None


def _select_scatter(cx, input, src, dim, index):
    dim = _norm(dim, input.ndim)
    size = input.shape[dim]
    lo = index + size if index < 0 else index
    shape = list(src.shape)
    shape.insert(dim, 1)
    return _scatter_box(cx, input, api.reshape(src, shape), dim, lo, 1)


def _select_scatter_accepts(a):
    if _static_dim(a["input"], a["dim"]) is None:
        return "select_scatter along a dynamic dim"
    return None if isinstance(a.get("index"), int) else "select_scatter with a symbolic index"


def _copy(cx, input, src, non_blocking=False):
    """aten.copy: src broadcast to input's shape, in input's dtype (what a functionalised ``y[...] = v``
    leaves)."""
    src = cx.cast(src)
    if len(src.shape) != len(cx.out_shape) or any(sym.equal(a, b) is not True for a, b in zip(src.shape, cx.out_shape)):
        src = fn("expand")(src, *cx.out_shape)
    return src


def _index(cx, input, indices):
    """input[idx] along one dim (the leading indices None): index_select of the flattened indices,
    negative ones counted from the end as torch does."""
    dim = next(k for k, t in enumerate(indices) if t is not None)
    idx = indices[dim]
    size = input.shape[dim]
    idx = fn("where")(fn("lt")(idx, 0), fn("add")(idx, size), idx)
    rows = fn("index_select")(input, dim, api.reshape(idx, [-1]))
    return api.reshape(rows, cx.out_shape)


def _index_accepts(a):
    idx = list(a.get("indices") or [])
    real = [k for k, t in enumerate(idx) if t is not None]
    if len(real) != 1 or real[0] != len(idx) - 1:
        return "index with more than one index tensor"
    v = idx[real[0]].meta.get("val") if isinstance(idx[real[0]], torch.fx.Node) else None
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.int64, torch.int32):
        return "index by a mask (data-dependent shape) or a non-integer tensor"
    return None


def _any_all(reduce):
    """any / all: the flags (x != 0) as float, their amax / amin, cast to bool."""
    def convert(cx, input, dim=None, keepdim=False):
        dims = None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim
        flags = input if input.dtype == dtypes.bool_ else fn("ne")(input, 0)
        return api.cast(fn(reduce)(api.cast(flags, dtypes.float32), dims, keepdim), dtypes.bool_)
    return Rule(convert, needs=(reduce, "ne"))


# ---------------------------------------------------------------- reductions, matmul, normalisation
def _reduce(name):
    def convert(cx, input, dim=None, keepdim=False, dtype=None):
        if dtype is not None or (name in ("sum", "mean", "prod") and input.dtype != cx.out_dtype):
            input = cx.cast(input)
        dims = None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim
        return fn(name)(input, dims, keepdim)
    return Rule(convert, needs=(name,))


def _var(cx, input, dim=None, correction=None, keepdim=False):
    return fn("var")(input, dim, keepdim=keepdim, correction=1 if correction is None else correction)


def _mm(cx, input, mat2):
    return fn("matmul")(input, mat2)


def _addmm(cx, input, mat1, mat2, beta=1, alpha=1):
    """bias + mat1 @ mat2 with one rounding at the end, as torch: fp16/bf16 products stay fp32 until
    the bias is added."""
    low = cx.out_dtype in (dtypes.float16, dtypes.bfloat16)
    prod = fn("matmul")(mat1, mat2, dtypes.float32 if low else None)
    if alpha != 1:
        prod = fn("mul")(prod, alpha)
    if beta == 0:
        return prod
    return fn("add")(prod, input if beta == 1 else fn("mul")(input, beta))


def _permute(cx, input, dims):
    return fn("permute")(input, *dims)


def _arg_reduce(name):
    return Rule(lambda cx, input, dim=None, keepdim=False: fn(name)(input, dim, keepdim), needs=(name,))


def _minmax_dim(reduce, arg):
    """max.dim / min.dim -> (values, indices); indices are built only when used."""
    def convert(cx, input, dim, keepdim=False):
        return Lazy([lambda: fn(reduce)(input, dim, keepdim), lambda: fn(arg)(input, dim, keepdim)])
    return Rule(convert, needs=(reduce, arg))


def _cumsum(cx, input, dim, dtype=None):
    """Along a static dim, pypto.cumsum; along a dynamic one (which its lowering does not scan), a
    product with a triangle of ones in fp32: x @ triu(1) for the last dim, tril(1) @ x for another
    (moved to the rows' place and back)."""
    dim = _norm(dim, input.ndim)
    n = input.shape[dim]
    if isinstance(n, int):
        return fn("cumsum")(input, dim, dtype=cx.out_dtype if dtype is not None else None)
    x = api.cast(input, dtypes.float32)
    ones = api.full((n, n), 1.0, dtypes.float32)
    if dim == input.ndim - 1:
        return fn("matmul")(x, fn("triu")(ones, 0))
    order = list(range(input.ndim))
    order[dim], order[-2] = order[-2], order[dim]
    moved = dim != input.ndim - 2
    y = fn("matmul")(fn("tril")(ones, 0), fn("permute")(x, *order) if moved else x)
    return fn("permute")(y, *order) if moved else y


def _cumsum_accepts(a):
    dim = a.get("dim")
    if isinstance(a.get("input"), torch.fx.Node) and _static_dim(a["input"], dim) is None and not (
            a.get("_dtype") is not None and a["_dtype"].is_floating_point):
        return "cumsum of integers along a dynamic dim"
    return None


def _index_select(cx, input, dim, index):
    return fn("index_select")(input, dim, index)


def _gather(cx, input, dim, index, sparse_grad=False):
    return fn("gather")(input, dim, index)


def _embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    rows = fn("index_select")(weight, 0, api.reshape(indices, [-1]))
    return api.reshape(rows, cx.out_shape)


def _pad(cx, input, pad, value=0):
    """constant_pad_nd; a negative amount crops (the backward of a pad is a pad by minus its amounts)."""
    pad = [size_expr(p) for p in pad]
    for k in range(0, len(pad), 2):
        lo, hi = pad[k], pad[k + 1]
        dim = input.ndim - 1 - k // 2
        crop_lo = -lo if isinstance(lo, int) and lo < 0 else 0
        crop_hi = -hi if isinstance(hi, int) and hi < 0 else 0
        if crop_lo or crop_hi:
            input = _box(input, dim, crop_lo, sym.simplify(input.shape[dim] - crop_lo - crop_hi))
            pad[k], pad[k + 1] = max(lo, 0) if crop_lo else lo, max(hi, 0) if crop_hi else hi
    if all(isinstance(p, int) and p == 0 for p in pad):
        return input
    return fn("pad")(input, pad, value=value)


def _softmax(name):
    def convert(cx, input, dim, half_to_float=False):
        return fn(name)(input, dim)
    return Rule(convert, needs=(name,),
                accepts=lambda a: "half_to_float" if a.get("half_to_float") else None)


def _layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """-> (out, mean, rstd) as torch's native_layer_norm; mean and rstd are built only when used
    (training saves them for backward)."""
    dims = list(range(input.ndim - len(normalized_shape), input.ndim))
    stats_dt = dtypes.float32 if input.dtype in (dtypes.float16, dtypes.bfloat16) else input.dtype

    def out():
        return fn("layer_norm")(input, list(normalized_shape), weight, bias, eps)

    def mean():
        return fn("mean")(api.cast(input, stats_dt), dims, True)

    def rstd():
        x = api.cast(input, stats_dt)
        centred = fn("sub")(x, fn("mean")(x, dims, True))
        var = fn("mean")(fn("mul")(centred, centred), dims, True)
        return fn("rsqrt")(fn("add")(var, eps))
    return Lazy([out, mean, rstd])


# ---------------------------------------------------------------- one-to-one ops, from the op registry
_OPERANDS = {"unary": 1, "binary": 2, "comparison": 2}


def one_to_one_overloads(op) -> list:
    """(overload, defaults of its further arguments) for each ATen overload computing registry op
    ``op`` itself: aten.<name>.<overload> taking a tensor 'self' (and 'other'/'exponent'), returning one
    tensor, every further argument optional (not out= variants, not in-place ones)."""
    packet = getattr(aten, op.name, None)
    if packet is None:
        return []
    n = _OPERANDS[op.form]
    found = []
    for name in packet.overloads():
        overload = getattr(packet, name)
        schema = overload._schema
        args = schema.arguments
        if schema.is_mutable or len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
            continue
        if len(args) < n or args[0].name != "self" or not all(a.has_default_value() for a in args[n:]):
            continue
        found.append((overload, {a.name: a.default_value for a in args[n:]}))
    return found


def _one_to_one(op, defaults: dict) -> Rule:
    if op.form == "unary":
        return _unary(op.name, defaults)
    if op.form == "comparison":
        return _compare(op.name)
    return _arith(op.name)      # add/sub's alpha is the one further argument (see _arith)


# ---------------------------------------------------------------- the table
REDUCE = {"sum": ("dim_IntList", "default"), "mean": ("dim", "default"), "amax": ("default",),
          "amin": ("default",), "prod": ("dim_int", "default")}
VIEW_AS_RESHAPE = [aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
                   aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default]
CPU_ONLY = _on_cpu_strided

RULES: dict = {}
for _op in REGISTRY.values():
    if _op.form is not None:
        for _overload, _defaults in one_to_one_overloads(_op):
            RULES[_overload] = _one_to_one(_op, _defaults)
RULES[aten.bitwise_not.default] = _bool_only("logical_not")
RULES[aten.bitwise_and.Tensor] = _bool_only("logical_and")
RULES[aten.bitwise_or.Tensor] = _bool_only("logical_or")
RULES[aten.bitwise_xor.Tensor] = _bool_only("ne")            # on bools, xor is "not equal"
RULES[aten.logical_xor.default] = Rule(lambda cx, input, other: fn("ne")(api.cast(input, dtypes.bool_),
                                                                         api.cast(other, dtypes.bool_)),
                                       needs=("ne",))
RULES[aten.true_divide.Tensor] = RULES[aten.div.Tensor]
RULES[aten.div.Tensor_mode] = Rule(_div_mode, needs=("div", "floor_divide"), accepts=_div_mode_accepts)
RULES[aten.where.self] = Rule(_where, needs=("where",))
RULES[aten.isnan.default] = Rule(_isnan, needs=("ne",))
RULES[aten.isinf.default] = Rule(_isinf, needs=("logical_and", "logical_not", "isfinite", "eq"))
RULES[aten.clamp.default] = Rule(_clamp, needs=("clip",), accepts=_numbers_only("min", "max"))
RULES[aten.gelu.default] = Rule(_gelu, needs=("gelu",))
RULES[aten._to_copy.default] = Rule(_to_copy, accepts=CPU_ONLY, compute=False)
RULES[prims.convert_element_type.default] = Rule(lambda cx, a, dtype: api.cast(a, cx.out_dtype), compute=False)
for _op in (aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default):
    RULES[_op] = Rule(_identity, compute=False)
RULES[aten.full.default] = Rule(_full, accepts=_full_accepts, compute=False)
RULES[aten.scalar_tensor.default] = Rule(_scalar_tensor, accepts=_full_accepts, compute=False)
RULES[aten.full_like.default] = Rule(_full_like, accepts=_full_accepts, compute=False)
RULES[aten.slice_scatter.default] = Rule(_slice_scatter, needs=("concat",), accepts=_slice_scatter_accepts,
                                         compute=False)
RULES[aten.select_scatter.default] = Rule(_select_scatter, needs=("concat",), accepts=_select_scatter_accepts,
                                          compute=False)
RULES[aten.copy.default] = Rule(_copy, needs=("expand",), compute=False)
RULES[aten.index.Tensor] = Rule(_index, needs=("index_select", "where", "lt", "add"), accepts=_index_accepts,
                                compute=False)
for _op in (aten.any.dim, aten.any.dims, aten.any.default):
    RULES[_op] = _any_all("amax")
for _op in (aten.all.dim, aten.all.dims, aten.all.default):
    RULES[_op] = _any_all("amin")
for _op in VIEW_AS_RESHAPE:
    RULES[_op] = Rule(_reshape_to_out, compute=False)
RULES[aten.slice.Tensor] = Rule(_slice, compute=False,
                                accepts=lambda a: None if a.get("step", 1) == 1 else f"slice step {a.get('step')}")
RULES[aten.select.int] = Rule(_select, compute=False)
RULES[aten.split_with_sizes.default] = Rule(_split_sizes, compute=False)
RULES[aten.split.Tensor] = Rule(_split, compute=False)
RULES[aten.expand.default] = Rule(_expand, needs=("expand",), compute=False)
RULES[aten.cat.default] = Rule(_cat, needs=("concat",), compute=False)
for _op in (aten.arange.default, aten.arange.start, aten.arange.start_step):
    RULES[_op] = Rule(_arange, needs=("arange",), accepts=_on_cpu_strided, compute=False)
RULES[aten.tril.default] = _tri("tril")
RULES[aten.triu.default] = _tri("triu")
RULES[operator.getitem] = Rule(_getitem, accepts=_getitem_accepts, compute=False)
RULES[aten.permute.default] = Rule(_permute, needs=("permute",), compute=False)
for _n, _overloads in REDUCE.items():
    for _o in _overloads:
        RULES[getattr(getattr(aten, _n), _o)] = _reduce(_n)
RULES[aten.var.correction] = Rule(_var, needs=("var",), accepts=_numbers_only("correction"))
RULES[aten.mm.default] = Rule(_mm, needs=("matmul",))
RULES[aten.bmm.default] = Rule(_mm, needs=("matmul",))
RULES[aten.addmm.default] = Rule(_addmm, needs=("matmul", "mul", "add"), accepts=_numbers_only("beta", "alpha"))
for _n in ("argmax", "argmin"):
    RULES[getattr(aten, _n).default] = _arg_reduce(_n)
RULES[aten.max.dim] = _minmax_dim("amax", "argmax")
RULES[aten.min.dim] = _minmax_dim("amin", "argmin")
RULES[aten.cumsum.default] = Rule(_cumsum, needs=("cumsum", "matmul", "tril", "triu", "permute"),
                                  accepts=_cumsum_accepts)
RULES[aten.index_select.default] = Rule(_index_select, needs=("index_select",), compute=False)
RULES[aten.gather.default] = Rule(_gather, needs=("gather",), compute=False)
RULES[aten.embedding.default] = Rule(_embedding, needs=("index_select",), compute=False)
RULES[aten.constant_pad_nd.default] = Rule(_pad, needs=("pad",), accepts=_numbers_only("value"), compute=False)
RULES[aten._softmax.default] = _softmax("softmax")
RULES[aten._log_softmax.default] = _softmax("log_softmax")
RULES[aten.native_layer_norm.default] = Rule(_layer_norm, needs=("layer_norm", "mean", "sub", "mul", "add",
                                                                  "rsqrt"))
RULES[aten.topk.default] = Rule(sort_rules.topk, needs=("topk",))
RULES[aten.sort.default] = Rule(sort_rules.sort, needs=("sort",))
RULES[aten.sort.stable] = Rule(sort_rules.sort, needs=("sort",))
RULES[aten.index_put.default] = Rule(sort_rules.index_put_accumulate, needs=("index_add", "expand"),
                                     accepts=sort_rules.index_put_accepts)
RULES[aten.convolution.default] = Rule(convolution, needs=("matmul", "concat", "pad", "mul", "add"),
                                       accepts=convolution_accepts)
RULES[aten._native_batch_norm_legit_no_training.default] = Rule(batch_norm, needs=("rsqrt", "add", "mul", "sub"),
                                                                accepts=batch_norm_accepts)
# ops torch can decompose for us when pypto lacks them (see dynamo.decompositions)
DECOMPOSABLE = (aten._softmax.default, aten._log_softmax.default, aten.native_layer_norm.default,
                aten.addmm.default, aten.var.correction)


# ---------------------------------------------------------------- support
def bind_arguments(target, args, kwargs) -> dict:
    """A call's arguments by schema name ('self' renamed 'input'), defaults filled in."""
    if target is operator.getitem:
        return {"input": args[0], "index": args[1]}
    out = {}
    for i, a in enumerate(target._schema.arguments):
        name = "input" if a.name == "self" else a.name
        if i < len(args) and not a.kwarg_only:
            out[name] = args[i]
        elif a.name in kwargs:
            out[name] = kwargs[a.name]
        elif a.has_default_value():
            out[name] = a.default_value
    return out


def _tensor_vals(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensor_vals(x)


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why pypto cannot take this node (None when it can)."""
    if node.op != "call_function":
        return f"{node.op} node"
    rule = RULES.get(node.target)
    if rule is None:
        return f"no pypto rule for {node.target}"
    missing = rule.missing()
    if missing:
        return f"{node.target} needs pypto.{', pypto.'.join(missing)}, not available yet"
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    if vals[0] is None:
        return "no FakeTensor metadata"
    for v in vals:
        if isinstance(v, (torch.SymFloat, torch.SymBool)):
            return f"symbolic {type(v).__name__} value"
        for t in _tensor_vals(v):
            if t.device.type != "cpu":
                return f"tensor on {t.device}"
            if is_f64_scalar(t):      # computed in float32 (fx/meta.is_f64_scalar)
                continue
            if t.layout != torch.strided or t.dtype not in dtypes._BY_TORCH:
                return f"{t.dtype}/{t.layout} tensor"
    if rule.accepts is not None:
        a = bind_arguments(node.target, node.args, node.kwargs)
        first = next(iter(_tensor_vals(node.args[0].meta.get("val")))) if node.args and isinstance(
            node.args[0], torch.fx.Node) and isinstance(node.args[0].meta.get("val"), torch.Tensor) else None
        a["_dtype"] = first.dtype if first is not None else None
        return rule.accepts(a)
    return None


def is_compute(node: torch.fx.Node) -> bool:
    rule = RULES.get(node.target) if node.op == "call_function" else None
    return rule is not None and rule.compute

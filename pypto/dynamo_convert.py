"""ATen FX graph -> pypto TensorGraph, for the torch.compile backend (pypto/dynamo.py).

``RULES`` maps an ATen overload to the pypto functions that compute it. A rule is live while every
pypto function it ``needs`` exists (op families land over time; a rule switches on by itself when its
functions do), and its ``accepts`` check passes on the node's non-tensor arguments. ``convert`` walks
one partition's FX graph in order and calls the rules inside a pypto trace, so the TensorGraph is built
by pypto's own op functions (shape/dtype inference, checks and source locations included).

Sizes: a FakeTensor dim or a SymInt placeholder carries a torch sympy expression over shape-env
symbols (``node.meta["val"]``); it becomes a pypto size expression over symbols of the same names.
At run time every symbol is bound from a tensor dim or a SymInt argument that is exactly that symbol.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Callable

import sympy
import torch

import pypto
from . import dtypes, symbolic as sym
from .errors import CompileError, SourceLoc
from .frontend import api, context as ctx
from .frontend.jit import trace_callable
from .frontend.tensor import Tensor, TensorSpec

aten = torch.ops.aten
prims = torch.ops.prims


class ConversionError(CompileError):
    """An FX graph (or one node of it) that pypto cannot take; the caller falls back to eager."""


class NothingToCompute(ConversionError):
    """Every output of the graph is one of its inputs (views and copies only)."""


# ============================================================================ sizes
def _translations():
    from torch.utils._sympy import functions as F
    floor_div = lambda a, b: sympy.floor(a / b)   # noqa: E731
    return {
        F.FloorDiv: floor_div, F.CleanDiv: floor_div,
        F.CeilDiv: lambda a, b: sympy.ceiling(a / b),
        F.Mod: sympy.Mod, F.PythonMod: sympy.Mod,
        F.ModularIndexing: lambda x, d, m: sympy.Mod(sympy.floor(x / d), m),
        F.Max: sympy.Max, F.Min: sympy.Min, F.Identity: lambda x: x,
    }


_KNOWN_FUNCS = (sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min)


def size_expr(v):
    """A torch size (int, SymInt, sympy expression) -> a pypto size (int or sympy over pypto symbols)."""
    if isinstance(v, bool):
        raise ConversionError(f"a bool where a size was expected: {v}")
    if isinstance(v, int):
        return v
    if isinstance(v, torch.SymInt):
        v = v.node.expr
    if not isinstance(v, sympy.Basic):
        raise ConversionError(f"not a size: {v!r}")
    for cls, fn in _translations().items():
        v = v.replace(cls, fn)
    v = v.xreplace({s: sym.symbol(s.name) for s in v.free_symbols})
    for f in v.atoms(sympy.Function):
        if not isinstance(f, _KNOWN_FUNCS):
            raise ConversionError(f"size expression {v} uses {type(f).__name__}, which pypto does not model")
    if _opaque and v.free_symbols:
        v = v.subs(_opaque)
    return sym.simplify(v)


# while converting one partition: size expressions none of whose symbols can be bound, each standing for
# a fresh symbol bound from the input dim it is (a [s0*s1, 64] input whose s0, s1 appear nowhere alone)
_opaque: dict = {}
_V = sym.symbol("_v")       # the bound value in a solved binder


def plan_sizes(placeholders) -> list[tuple]:
    """Binders (argument position, dim or None, symbol name, solution or None) that bind every size
    symbol of a partition at run time from its arguments: a dim (or SymInt) that is exactly a symbol
    binds it; one with a single unknown symbol is solved for it (s0*s1 with s0 known: s1 = v / s0);
    what is left is made opaque (``_opaque``)."""
    dims = []
    for pos, p in enumerate(placeholders):
        v = p.meta.get("val")
        exprs = list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else \
            [(None, v)] if isinstance(v, torch.SymInt) else []
        for d, e in exprs:
            e = size_expr(e)
            if not isinstance(e, int):
                dims.append((pos, d, e))
    binders, bound = [], set()
    for pos, d, e in dims:
        if isinstance(e, sympy.Symbol) and e not in bound:
            binders.append((pos, d, e.name, None))
            bound.add(e)
    progress = True
    while progress:
        progress = False
        for pos, d, e in dims:
            unknown = e.free_symbols - bound
            if len(unknown) != 1:
                continue
            s = unknown.pop()
            try:
                sols = sympy.solve(sympy.Eq(e, _V), s)
            except Exception:       # noqa: BLE001 - floor/Mod and the like: not solvable here
                sols = []
            if len(sols) == 1:
                binders.append((pos, d, s.name, sols[0]))
                bound.add(s)
                progress = True
    for pos, d, e in dims:
        if e not in _opaque and e.free_symbols and not e.free_symbols & bound:
            _opaque[e] = sym.symbol(f"u{len(_opaque)}")
            binders.append((pos, d, _opaque[e].name, None))
    return binders


def shape_of(t) -> tuple:
    return tuple(size_expr(d) for d in t.shape)


def dtype_of(t) -> dtypes.DataType:
    if is_f64_scalar(t):
        return dtypes.float32
    try:
        return dtypes.from_torch(t.dtype)
    except pypto.PyptoError as e:
        raise ConversionError(e.message) from None


def is_f64_scalar(t) -> bool:
    """A 0-d float64 tensor: how dynamo passes a Python float it does not specialise (a module's eps
    under dynamic=True). pypto has no float64: such a value enters a partition rounded to float32, and
    only the conversions that round it to float32 anyway may take it (F64_SCALAR_OPS)."""
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.dim() == 0


# ============================================================================ rules
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
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in self.node.args]
        vals = [v for v in vals if isinstance(v, (torch.Tensor, int, float, bool))]
        return dtypes.from_torch(torch.result_type(*vals)) if len(vals) >= 2 else self.out_dtype


class Lazy(tuple):
    """A multi-result value whose members are built on first use (unused ones are never traced)."""

    def __new__(cls, thunks):
        obj = super().__new__(cls, thunks)
        obj.memo = {}
        return obj

    def get(self, i):
        if i not in self.memo:
            self.memo[i] = tuple.__getitem__(self, i)()
        return self.memo[i]


def _numbers_only(*names):
    def accepts(a):
        for n in names:
            if a.get(n) is not None and not isinstance(a[n], (int, float)):
                return f"'{n}' must be a constant number, found {a[n]!r}"
        return None
    return accepts


# ---------------------------------------------------------------- elementwise
def _unary(name):
    return Rule(lambda cx, input: fn(name)(input), needs=(name,))


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
    q = fn("div")(cx.cast(input, cx.out_dtype if cx.out_dtype.is_floating else dtypes.float32),
                  cx.cast(other, cx.out_dtype if cx.out_dtype.is_floating else dtypes.float32))
    if rounding_mode == "floor":
        q = fn("floor")(q)
    return cx.cast(q)


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
    if isinstance(src, torch.fx.Node) and src.op == "call_function" and src.target in RULES:
        return None
    return "getitem of a value pypto does not produce"


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
    return fn("cumsum")(input, dim, dtype=cx.out_dtype if dtype is not None else None)


def _index_select(cx, input, dim, index):
    return fn("index_select")(input, dim, index)


def _gather(cx, input, dim, index, sparse_grad=False):
    return fn("gather")(input, dim, index)


def _embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    rows = fn("index_select")(weight, 0, api.reshape(indices, [-1]))
    return api.reshape(rows, cx.out_shape)


def _pad(cx, input, pad, value=0):
    return fn("pad")(input, list(pad), value=value)


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


# ---------------------------------------------------------------- the table
UNARY = ["abs", "neg", "exp", "exp2", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh",
         "sin", "cos", "floor", "ceil", "sign", "relu", "logical_not", "silu"]
ARITH = {"add": ("Tensor", "Scalar"), "sub": ("Tensor", "Scalar"), "mul": ("Tensor", "Scalar"),
         "div": ("Tensor", "Scalar"), "pow": ("Tensor_Scalar", "Tensor_Tensor", "Scalar"),
         "maximum": ("default",), "minimum": ("default",), "remainder": ("Tensor", "Scalar")}
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
REDUCE = {"sum": ("dim_IntList", "default"), "mean": ("dim", "default"), "amax": ("default",),
          "amin": ("default",), "prod": ("dim_int", "default")}
VIEW_AS_RESHAPE = [aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
                   aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default]
CPU_ONLY = _on_cpu_strided

RULES: dict = {}
for _n in UNARY:
    if hasattr(aten, _n):
        RULES[getattr(aten, _n).default] = _unary(_n)
RULES[aten.round.default] = _unary("round")
for _n, _overloads in ARITH.items():
    for _o in _overloads:
        RULES[getattr(getattr(aten, _n), _o)] = _arith(_n)
for _n in COMPARE:
    for _o in ("Tensor", "Scalar"):
        RULES[getattr(getattr(aten, _n), _o)] = _compare(_n)
for _n in ("logical_and", "logical_or"):
    RULES[getattr(aten, _n).default] = _compare(_n)
RULES[aten.bitwise_not.default] = _bool_only("logical_not")
RULES[aten.bitwise_and.Tensor] = _bool_only("logical_and")
RULES[aten.bitwise_or.Tensor] = _bool_only("logical_or")
RULES[aten.div.Tensor_mode] = Rule(_div_mode, needs=("div", "floor"),
                                   accepts=lambda a: None if a.get("rounding_mode") in (None, "floor")
                                   else f"rounding_mode {a.get('rounding_mode')!r}")
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
RULES[aten.cumsum.default] = Rule(_cumsum, needs=("cumsum",))
RULES[aten.index_select.default] = Rule(_index_select, needs=("index_select",), compute=False)
RULES[aten.gather.default] = Rule(_gather, needs=("gather",), compute=False)
RULES[aten.embedding.default] = Rule(_embedding, needs=("index_select",), compute=False)
RULES[aten.constant_pad_nd.default] = Rule(_pad, needs=("pad",), accepts=_numbers_only("value"), compute=False)
RULES[aten._softmax.default] = _softmax("softmax")
RULES[aten._log_softmax.default] = _softmax("log_softmax")
RULES[aten.native_layer_norm.default] = Rule(_layer_norm, needs=("layer_norm", "mean", "sub", "mul", "add",
                                                                  "rsqrt"))
F64_SCALAR_OPS = (aten._to_copy.default, prims.convert_element_type.default)
# ops torch can decompose for us when pypto lacks them (see dynamo.decompositions)
DECOMPOSABLE = (aten._softmax.default, aten._log_softmax.default, aten.native_layer_norm.default,
                aten.addmm.default, aten.var.correction)


# ============================================================================ support
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
            if is_f64_scalar(t) and node.target in F64_SCALAR_OPS:
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


# ============================================================================ conversion
@dataclass
class Converted:
    """One partition as a pypto graph, and how to call it."""
    graph: object                                   # TensorGraph
    tensor_args: list[int]                          # FX argument positions feeding graph inputs, in order
    binders: list[tuple]                            # see plan_sizes
    outputs: list[tuple]                            # per FX output: ("graph", k) | ("arg", position)
    out_shapes: list[tuple]                         # expected shape of every graph output (pypto sizes)
    out_dtypes: list[dtypes.DataType]
    returns_tuple: bool
    in_dtypes: list[torch.dtype] = field(default_factory=list)      # per graph input (f64 scalars: f32)
    result_dtypes: list[torch.dtype] = field(default_factory=list)  # per FX output, as torch has it

    def bind(self, args) -> dict:
        env = {}
        for pos, dim, name, solution in self.binders:
            v = int(args[pos].shape[dim]) if dim is not None else int(args[pos])
            if solution is not None:
                v = sym.evaluate(solution, {**env, _V.name: v})
            if env.setdefault(name, v) != v:
                raise ConversionError(f"size {name} is bound to {env[name]} and {v}")
        return env


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


# id(dynamo FX graph) -> {node name: user source line}; ATen nodes reach them through meta["from_node"]
_LOCATIONS: dict[int, dict[str, SourceLoc]] = {}


def _parse_stack(trace: str | None) -> SourceLoc | None:
    frames = _FRAME_RE.findall(trace or "")
    if not frames:
        return None
    f, line, func = frames[-1]          # the innermost frame
    return SourceLoc(f, int(line), func)


def remember_locations(gm: torch.fx.GraphModule) -> None:
    """Record the user's source line of every node of the graph dynamo captured."""
    locs = {n.name: _parse_stack(n.meta.get("stack_trace")) for n in gm.graph.nodes}
    _LOCATIONS[id(gm.graph)] = {k: v for k, v in locs.items() if v is not None}


def node_location(node: torch.fx.Node) -> SourceLoc | None:
    """The user's source line that produced an ATen node: its own stack trace, or that of the dynamo
    node it was made from (following meta["from_node"] provenance)."""
    loc = _parse_stack(node.meta.get("stack_trace"))
    sources = list(node.meta.get("from_node") or [])
    while loc is None and sources:
        src = sources.pop()
        loc = _LOCATIONS.get(src.graph_id, {}).get(src.name)
        sources += list(src.from_node or [])
    return loc


def convert(gm: torch.fx.GraphModule, name: str) -> Converted:
    """Trace the FX graph ``gm`` (ATen ops, FakeTensor metadata on every node) into a TensorGraph."""
    _opaque.clear()
    try:
        return _convert(gm, name)
    finally:
        _opaque.clear()


def _convert(gm: torch.fx.GraphModule, name: str) -> Converted:
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    binders = plan_sizes(placeholders)
    specs, tensor_args, sizes = [], [], {}
    for pos, p in enumerate(placeholders):
        v = p.meta.get("val")
        if isinstance(v, torch.Tensor):
            specs.append(TensorSpec(shape_of(v), dtype_of(v), p.name))
            tensor_args.append(pos)
        elif isinstance(v, torch.SymInt):
            sizes[p] = size_expr(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            raise ConversionError(f"placeholder {p.name} is a plain int")
        else:
            raise ConversionError(f"placeholder {p.name} holds {type(v).__name__}, not a tensor or SymInt")
    out_node = next(n for n in nodes if n.op == "output")
    returned = out_node.args[0]
    returns_tuple = isinstance(returned, (tuple, list))
    returned = list(returned) if returns_tuple else [returned]
    plan: dict = {}

    def body(*inputs):
        values = dict(sizes)
        values.update({placeholders[pos]: t for pos, t in zip(tensor_args, inputs)})
        g = ctx.current().graph
        for n in nodes:
            if n.op in ("placeholder", "output"):
                continue
            first_new = len(g.nx)
            values[n] = _convert_node(gm, n, values)
            loc = node_location(n)
            if loc is not None:
                for nid in range(first_new, len(g.nx)):
                    g.node(nid)["loc"] = loc
        graph_outs, outputs = [], []
        input_ids = {id(t): pos for pos, t in zip(tensor_args, inputs)}
        for r in returned:
            v = values.get(r) if isinstance(r, torch.fx.Node) else r
            if not isinstance(v, Tensor):
                raise ConversionError(f"output {r} is {type(v).__name__}, not a tensor")
            if id(v) in input_ids:
                outputs.append(("arg", input_ids[id(v)]))
                continue
            k = next((i for i, t in enumerate(graph_outs) if t is v), None)
            if k is None:
                graph_outs.append(v)
                k = len(graph_outs) - 1
            outputs.append(("graph", k))
        if not graph_outs:
            raise NothingToCompute("the partition computes nothing (every output is an input)")
        plan["outputs"] = outputs
        return tuple(graph_outs)

    try:
        graph = trace_callable(body, specs, name, symbols=[sym.symbol(b[2]) for b in binders])
    except ConversionError:
        raise
    except pypto.PyptoError as e:
        raise ConversionError(f"pypto rejected the graph: {e.message}", loc=e.loc) from None
    bound = {b[2] for b in binders}
    free = set()
    for nid in graph.nodes():
        info = graph.info(nid)
        for i in (info if isinstance(info, (list, tuple)) else [info]):
            free |= {s.name for s in sym.free_symbols(i.shape)}
        free |= {s.name for s in sym.free_symbols(*_attr_sizes(graph.node(nid)["attrs"]))}
    if free - bound:
        raise ConversionError(f"sizes {sorted(free - bound)} cannot be bound from the partition's inputs")
    infos = [graph.info(o.node) for o in graph.outputs]
    return Converted(graph, tensor_args, binders, plan["outputs"], [i.shape for i in infos],
                     [i.dtype for i in infos], returns_tuple, [s.dtype.torch_dtype for s in specs],
                     [r.meta["val"].dtype for r in returned])


def _attr_sizes(attrs: dict) -> list:
    out = []
    for v in attrs.values():
        if isinstance(v, sympy.Basic):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [x for x in v if isinstance(x, sympy.Basic)]
    return out


def _map_arg(v, values):
    if isinstance(v, torch.fx.Node):
        if v not in values:
            raise ConversionError(f"{v.name} has no pypto value")
        return values[v]
    if isinstance(v, (list, tuple)):
        return type(v)(_map_arg(x, values) for x in v)
    if isinstance(v, torch.SymInt):
        return size_expr(v)
    return v


def _convert_node(gm, n: torch.fx.Node, values: dict):
    if n.op == "get_attr":
        t = getattr(gm, n.target)
        if not isinstance(t, torch.Tensor):
            raise ConversionError(f"get_attr {n.target} is not a tensor")
        return api.constant(t)
    if n.op != "call_function":
        raise ConversionError(f"{n.op} node {n.name}")
    why = unsupported_reason(n)
    if why is not None:
        raise ConversionError(f"{n.name}: {why}")
    rule = RULES[n.target]
    args = {k: _map_arg(v, values) for k, v in bind_arguments(n.target, n.args, n.kwargs).items()}
    val = n.meta.get("val")
    cx = NodeContext(n, gm)
    if isinstance(val, torch.Tensor):
        cx.out_shape, cx.out_dtype = shape_of(val), dtype_of(val)
    try:
        result = rule.convert(cx, **args)
    except ConversionError:
        raise
    except Exception as e:      # a pypto error or a rule bug: either way this graph stays in eager
        raise ConversionError(f"{n.name} ({n.target}): {type(e).__name__}: {e}") from e
    return _check(n, result, val, cx)


def _check(n, result, val, cx):
    """The converted value must be what torch computes: same shape; the dtype is made to match."""
    if isinstance(val, torch.Tensor):
        if not isinstance(result, Tensor):
            raise ConversionError(f"{n.name}: rule produced {type(result).__name__}, expected a tensor")
        if len(result.shape) != len(cx.out_shape) or any(
                sym.equal(a, b) is False for a, b in zip(result.shape, cx.out_shape)):
            raise ConversionError(f"{n.name} ({n.target}): pypto shape {list(result.shape)} differs from "
                                  f"torch's {list(cx.out_shape)}")
        return api.cast(result, cx.out_dtype) if result.dtype != cx.out_dtype else result
    if isinstance(val, (list, tuple)) and isinstance(result, list):
        if len(val) != len(result):
            raise ConversionError(f"{n.name}: {len(result)} results, torch has {len(val)}")
        return [_check(n, r, v, NodeContext(n, cx.module, shape_of(v), dtype_of(v))) for r, v in zip(result, val)]
    return result

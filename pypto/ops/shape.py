"""Shape and data-movement ops: transpose permute expand concat tril triu arange pad fillpad gather
index_select index_copy scatter. (unsqueeze/squeeze/flatten are ``reshape``; split/chunk are ``view``s — see the frontend.)

Attrs hold normalised, non-negative dims; sizes may be symbolic. Every op keeps its input's dtype
except arange (its own) and the index inputs of gather/index_select/scatter (int32 or int64)."""
from __future__ import annotations

import torch
import torch.nn.functional as TF

from .. import dtypes, symbolic as sym
from ..errors import DTypeError, ShapeError
from ..ir.tensor_graph import ValueInfo
from .reduce import check_dims
from .registry import OpDef, register
from .shape_rules import fmt_shape

INDEX_DTYPES = (dtypes.int32, dtypes.int64)


def _known_greater(a, b) -> bool:
    """True when a > b is certain (static, or provably for every positive size)."""
    if isinstance(a, int) and isinstance(b, int):
        return a > b
    return sym.prove_nonnegative(sym.simplify(a - b - 1), {})


# ------------------------------------------------------------------ transpose / permute
def _transpose_infer(ins, attrs):
    x = ins[0]
    (d0,), (d1,) = check_dims(x, (attrs["dim0"],), "transpose"), check_dims(x, (attrs["dim1"],), "transpose")
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return ValueInfo(tuple(shape), x.dtype)


register(OpDef("transpose", "shape", _transpose_infer,
               lambda ins, attrs: ins[0].transpose(attrs["dim0"], attrs["dim1"]), flops=0, num_inputs=1,
               doc="attrs: dim0, dim1. TTRANS when they are the last two dims"))


def _permute_infer(ins, attrs):
    x = ins[0]
    dims = tuple(attrs["dims"])
    if sorted(dims) != list(range(x.rank)):
        raise ShapeError(f"permute: dims {list(dims)} are not a permutation of the {x.rank} dims of "
                         f"a tensor of shape {fmt_shape(x.shape)}")
    return ValueInfo(tuple(x.shape[d] for d in dims), x.dtype)


register(OpDef("permute", "shape", _permute_infer, lambda ins, attrs: ins[0].permute(tuple(attrs["dims"])),
               flops=0, num_inputs=1, doc="attrs: dims (a permutation)"))


# ------------------------------------------------------------------ expand / concat
def _expand_infer(ins, attrs):
    x = ins[0]
    shape = tuple(attrs["shape"])
    if len(shape) < x.rank:
        raise ShapeError(f"expand: target {fmt_shape(shape)} has fewer dims than the tensor {fmt_shape(x.shape)}")
    for i, d in enumerate(x.shape):
        t = shape[len(shape) - x.rank + i]
        if not (isinstance(d, int) and d == 1) and sym.equal(d, t) is not True:
            raise ShapeError(f"expand: dim {i} of {fmt_shape(x.shape)} has size {d}, which cannot expand to {t} "
                             f"(target {fmt_shape(shape)})", hint="only size-1 dims expand")
    return ValueInfo(shape, x.dtype)


register(OpDef("expand", "shape", _expand_infer, lambda ins, attrs: ins[0].expand(tuple(attrs["shape"])),
               flops=0, num_inputs=1,
               doc="attrs: shape (the full target shape; size-1 dims broadcast)"))


def _concat_infer(ins, attrs):
    if not ins:
        raise ShapeError("concat: expected at least one tensor")
    first, dim = ins[0], attrs["dim"]
    check_dims(first, (dim,), "concat")
    total = 0
    for k, t in enumerate(ins):
        if t.rank != first.rank:
            raise ShapeError(f"concat: tensor {k} has rank {t.rank}, tensor 0 has rank {first.rank}")
        if t.dtype != first.dtype:
            raise DTypeError(f"concat: tensor {k} is {t.dtype.name}, tensor 0 is {first.dtype.name}")
        for i, (a, b) in enumerate(zip(first.shape, t.shape)):
            if i != dim and sym.equal(a, b) is not True:
                raise ShapeError(f"concat along dim {dim}: tensor {k} {fmt_shape(t.shape)} differs from tensor 0 "
                                 f"{fmt_shape(first.shape)} in dim {i}")
        total = sym.simplify(total + t.shape[dim])
    shape = list(first.shape)
    shape[dim] = total
    return ValueInfo(tuple(shape), first.dtype)


register(OpDef("concat", "shape", _concat_infer, lambda ins, attrs: torch.cat(list(ins), attrs["dim"]), flops=0,
               doc="inputs: the tensors (one dtype); attrs: dim"))


# ------------------------------------------------------------------ triangles and index generation
def _triangle_infer(op):
    def infer(ins, attrs):
        x = ins[0]
        if x.rank < 2:
            raise ShapeError(f"{op}: expected a tensor of rank >= 2, found {fmt_shape(x.shape)}")
        if not isinstance(attrs.get("diagonal", 0), int):
            raise ShapeError(f"{op}: diagonal must be an int, found {attrs['diagonal']!r}")
        return ValueInfo(x.shape, x.dtype)
    return infer


for _name, _fn in (("tril", torch.tril), ("triu", torch.triu)):
    register(OpDef(_name, "shape", _triangle_infer(_name),
                   (lambda fn: lambda ins, attrs: fn(ins[0], attrs.get("diagonal", 0)))(_fn), num_inputs=1,
                   doc="attrs: diagonal. Lowered as a TTRIL/TTRIU mask and a select"))


def arange_size(start, end, step):
    if all(isinstance(v, int) for v in (start, end, step)):
        return max(-(-(end - start) // step), 0)
    import sympy
    return sym.simplify(sympy.ceiling(sympy.sympify(end - start) / step))


def _arange_infer(ins, attrs):
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if isinstance(step, (int, float)) and step == 0:
        raise ShapeError("arange: step must be nonzero")
    size = arange_size(start, end, step)
    if isinstance(size, int) and (end - start) * step < 0:
        raise ShapeError(f"arange: the range [{start}, {end}) is empty or runs against step {step}")
    return ValueInfo((size,), attrs["dtype"])


def _arange_ref(ins, attrs):
    return torch.arange(attrs["start"], attrs["end"], attrs["step"], dtype=attrs["dtype"].torch_dtype)


register(OpDef("arange", "shape", _arange_infer, _arange_ref, num_inputs=0,
               doc="attrs: start, end, step (numbers or sizes), dtype; length ceil((end - start) / step)"))


# ------------------------------------------------------------------ padding
def _pad_infer(ins, attrs):
    x = ins[0]
    pad = tuple(attrs["pad"])
    if len(pad) % 2 or len(pad) > 2 * x.rank:
        raise ShapeError(f"pad: expected pairs (left, right) for at most {x.rank} dims, found {len(pad)} values")
    shape = list(x.shape)
    for k in range(len(pad) // 2):
        lo, hi = pad[2 * k], pad[2 * k + 1]
        for v in (lo, hi):
            if isinstance(v, int) and v < 0:
                raise ShapeError(f"pad: negative padding {v} is not supported (found pad {list(pad)})")
        d = x.rank - 1 - k
        shape[d] = sym.simplify(shape[d] + lo + hi)
    return ValueInfo(tuple(shape), x.dtype)


register(OpDef("pad", "shape", _pad_infer,
               lambda ins, attrs: TF.pad(ins[0], tuple(attrs["pad"]), value=attrs.get("value", 0)), flops=0,
               num_inputs=1, doc="attrs: pad (torch order: last dim first, (left, right) pairs), value; "
                                 "constant mode"))


def _fillpad_infer(ins, attrs):
    x = ins[0]
    shape = tuple(attrs["shape"])
    if len(shape) != x.rank:
        raise ShapeError(f"fillpad: target {fmt_shape(shape)} and tensor {fmt_shape(x.shape)} differ in rank")
    for v, t in zip(x.shape, shape):
        if _known_greater(v, t):
            raise ShapeError(f"fillpad: the tensor {fmt_shape(x.shape)} does not fit in {fmt_shape(shape)}")
    return ValueInfo(shape, x.dtype)


def _fillpad_ref(ins, attrs):
    x = ins[0]
    out = torch.full(tuple(attrs["shape"]), attrs.get("value", 0.0), dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


register(OpDef("fillpad", "shape", _fillpad_infer, _fillpad_ref, flops=0, num_inputs=1,
               doc="attrs: shape (the full tile shape), value. The input (a valid region) at the origin, the rest "
                   "filled with value (CANN pypto.fillpad)"))


# ------------------------------------------------------------------ gather / index_select
def _check_index(index: ValueInfo, op: str):
    if index.dtype not in INDEX_DTYPES:
        raise DTypeError(f"{op}: index must be int32 or int64, found {index.dtype.name}")


def _check_index_fits(index: ValueInfo, x: ValueInfo, dim: int, op: str):
    """gather / scatter: the index has the input's rank and is no larger than it outside ``dim``."""
    if index.rank != x.rank:
        raise ShapeError(f"{op}: index {fmt_shape(index.shape)} and input {fmt_shape(x.shape)} differ in rank")
    for i, (a, b) in enumerate(zip(index.shape, x.shape)):
        if i != dim and _known_greater(a, b):
            raise ShapeError(f"{op}: index {fmt_shape(index.shape)} is larger than input {fmt_shape(x.shape)} "
                             f"in dim {i}")


def _gather_infer(ins, attrs):
    x, index = ins
    dim = check_dims(x, (attrs["dim"],), "gather")[0]
    _check_index(index, "gather")
    _check_index_fits(index, x, dim, "gather")
    return ValueInfo(index.shape, x.dtype)


register(OpDef("gather", "shape", _gather_infer,
               lambda ins, attrs: torch.gather(ins[0], attrs["dim"], ins[1].long()), flops=0, num_inputs=2,
               doc="inputs: (input, index); attrs: dim. out[i][j] = input[index[i][j]][j] (dim 0), as torch"))


def _index_select_infer(ins, attrs):
    x, index = ins
    dim = check_dims(x, (attrs["dim"],), "index_select")[0]
    _check_index(index, "index_select")
    if index.rank != 1:
        raise ShapeError(f"index_select: index must be 1-D, found {fmt_shape(index.shape)}")
    shape = list(x.shape)
    shape[dim] = index.shape[0]
    return ValueInfo(tuple(shape), x.dtype)


register(OpDef("index_select", "shape", _index_select_infer,
               lambda ins, attrs: torch.index_select(ins[0], attrs["dim"], ins[1].long()), flops=0, num_inputs=2,
               doc="inputs: (input, index 1-D); attrs: dim"))


def _index_copy_infer(ins, attrs):
    x, index, src = ins
    dim = check_dims(x, (attrs["dim"],), "index_copy")[0]
    _check_index(index, "index_copy")
    if index.rank != 1:
        raise ShapeError(f"index_copy: index must be 1-D, found {fmt_shape(index.shape)}")
    if src.dtype != x.dtype:
        raise DTypeError(f"index_copy: source ({src.dtype.name}) must have the input's dtype ({x.dtype.name})")
    want = list(x.shape)
    want[dim] = index.shape[0]
    if src.rank != x.rank or any(_known_greater(a, b) or _known_greater(b, a) for a, b in zip(src.shape, want)):
        raise ShapeError(f"index_copy: source must have shape {fmt_shape(tuple(want))} (the input's, with dim {dim} "
                         f"the index's length), found {fmt_shape(src.shape)}")
    return ValueInfo(x.shape, x.dtype)


register(OpDef("index_copy", "shape", _index_copy_infer,
               lambda ins, attrs: torch.index_copy(ins[0], attrs["dim"], ins[1].long(), ins[2]), flops=0,
               num_inputs=3,
               doc="inputs: (input, index 1-D, source); attrs: dim. out = input, then out[index[i]] = source[i] "
                   "along dim, as torch.index_copy; where indices repeat, the last one wins (torch CPU's order)"))


SCATTER_REDUCE = (None, "add", "multiply")


def _scatter_infer(ins, attrs):
    if len(ins) not in (2, 3):
        raise ShapeError(f"scatter: expected (input, index) with a scalar value or (input, index, src), "
                         f"found {len(ins)} inputs")
    x, index = ins[0], ins[1]
    dim = check_dims(x, (attrs["dim"],), "scatter")[0]
    _check_index(index, "scatter")
    if attrs.get("reduce") not in SCATTER_REDUCE:
        raise ShapeError(f"scatter: reduce must be None, 'add' or 'multiply', found {attrs.get('reduce')!r}")
    _check_index_fits(index, x, dim, "scatter")
    if len(ins) == 3:
        src = ins[2]
        if src.dtype != x.dtype:
            raise DTypeError(f"scatter: src ({src.dtype.name}) must have the input's dtype ({x.dtype.name})")
        if src.rank != x.rank:
            raise ShapeError(f"scatter: src {fmt_shape(src.shape)} and input {fmt_shape(x.shape)} differ in rank")
        for i, (a, b) in enumerate(zip(index.shape, src.shape)):
            if _known_greater(a, b):
                raise ShapeError(f"scatter: index {fmt_shape(index.shape)} is larger than src {fmt_shape(src.shape)} "
                                 f"in dim {i}")
    elif "value" not in attrs:
        raise ShapeError("scatter: give src, a tensor or a Python number")
    return ValueInfo(x.shape, x.dtype)


def _scatter_ref(ins, attrs):
    x, index, dim = ins[0], ins[1].long(), attrs["dim"]
    src = ins[2] if len(ins) == 3 else torch.full(index.shape, attrs["value"], dtype=x.dtype)
    if len(ins) == 3:
        src = src[tuple(slice(0, n) for n in index.shape)]
    reduce = attrs.get("reduce")
    if reduce is None:
        return torch.scatter(x, dim, index, src)
    return torch.scatter_reduce(x, dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)


register(OpDef("scatter", "shape", _scatter_infer, _scatter_ref, flops=0, num_inputs=None,
               doc="inputs: (input, index) with attrs value, or (input, index, src); attrs: dim, reduce (None, "
                   "'add', 'multiply'). out = input, then out[index[i][j]][j] = src[i][j] (dim 0), as "
                   "torch.scatter; where indices repeat without reduce, the last one along dim wins (torch CPU's "
                   "order; torch leaves it undefined)"))

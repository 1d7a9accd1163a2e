"""Counting ops over integer labels: one_hot, bincount, histc, index_add. Each is a composite whose
output length is known at trace time (num_classes, minlength, bins, the input's dim).

one_hot and bincount are scatters into zeros (one_hot writes 1, bincount adds 1 or the weight), so
their labels get scatter's range checks: an argument's on the host before the run
(runtime/index_bounds.py), a computed one counted by the run (passes/index_checks.py). A label outside
[0, num_classes) / [0, minlength) is an IndexOutOfRangeError, never a dropped count. index_add's index
goes through one_hot, so it is checked the same way.
"""
from __future__ import annotations

import torch
import torch.nn.functional as TF

from .. import dtypes, symbolic as sym
from ..errors import DTypeError, ShapeError, TypeMismatchError
from ..ir.tensor_graph import ValueInfo
from .reduce import check_dims
from .registry import OpDef, numel, register
from .shape_rules import fmt_shape

LABEL_DTYPES = (dtypes.int32, dtypes.int64)


def _labels(x: ValueInfo, op: str, what: str = "input") -> None:
    if x.dtype not in LABEL_DTYPES:
        raise DTypeError(f"{op}: {what} must be int32 or int64, found {x.dtype.name}",
                         hint=f"cast it: {what}.long()" if x.dtype.is_floating else None)


def _positive_int(v, op: str, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise TypeMismatchError(f"{op}: {what} must be a positive static int, found {v!r}")
    return v


# ------------------------------------------------------------------ one_hot
def _one_hot_infer(ins, attrs):
    x = ins[0]
    _labels(x, "one_hot")
    c = _positive_int(attrs["num_classes"], "one_hot", "num_classes")
    return ValueInfo(tuple(x.shape) + (c,), dtypes.int64)


def _one_hot_decompose(P, ins, attrs):
    x, c = ins[0], attrs["num_classes"]
    zeros = P.full(tuple(x.shape) + (c,), 0, dtypes.int64)
    return P.scatter(zeros, x.ndim, P.reshape(x, tuple(x.shape) + (1,)), 1)


register(OpDef("one_hot", "counting", _one_hot_infer,
               lambda ins, attrs: TF.one_hot(ins[0].long(), attrs["num_classes"]), num_inputs=1,
               decompose=_one_hot_decompose,
               doc="attrs: num_classes (static). int64 [..., num_classes], 1 at each label, as F.one_hot"))


# ------------------------------------------------------------------ bincount
def bincount_dtype(weights: dtypes.DataType | None) -> dtypes.DataType:
    """int64 counts; with weights their dtype (torch gives float64 for fp16/bf16 weights: pypto fp32)."""
    if weights is None:
        return dtypes.int64
    if weights in (dtypes.float16, dtypes.bfloat16):
        return dtypes.float32
    return weights if weights.is_floating else dtypes.float32


def _bincount_infer(ins, attrs):
    x = ins[0]
    _labels(x, "bincount")
    if x.rank != 1:
        raise ShapeError(f"bincount: input must be 1-D, found {fmt_shape(x.shape)}")
    n = _positive_int(attrs["minlength"], "bincount", "minlength")
    w = ins[1] if len(ins) == 2 else None
    if w is not None:
        if w.rank != 1 or sym.equal(w.shape[0], x.shape[0]) is not True:
            raise ShapeError(f"bincount: weights {fmt_shape(w.shape)} must have the input's shape "
                             f"{fmt_shape(x.shape)}")
        if w.dtype == dtypes.bool_:
            raise DTypeError("bincount: weights must be numeric, found bool")
    return ValueInfo((n,), bincount_dtype(w.dtype if w is not None else None))


def _bincount_ref(ins, attrs):
    w = ins[1].double() if len(ins) == 2 else None
    out = torch.bincount(ins[0].long(), w, minlength=attrs["minlength"])
    return out.to(bincount_dtype(dtypes.from_torch(ins[1].dtype) if w is not None else None).torch_dtype)


def _bincount_decompose(P, ins, attrs):
    x, n = ins[0], attrs["minlength"]
    if len(ins) == 1:
        return P.scatter(P.full((n,), 0, dtypes.int64), 0, x, 1, reduce="add")
    out_dt = bincount_dtype(ins[1].dtype)
    w = P.cast(ins[1], out_dt)
    return P.scatter(P.full((n,), 0, out_dt), 0, x, w, reduce="add")


register(OpDef("bincount", "counting", _bincount_infer, _bincount_ref, decompose=_bincount_decompose,
               flops_fn=lambda ins, attrs, out: numel(ins[0].shape) * attrs["minlength"],
               doc="inputs: (labels 1-D) or (labels, weights); attrs: minlength (static, the output length: "
                   "labels must lie in [0, minlength))"))


# ------------------------------------------------------------------ histc
def _histc_infer(ins, attrs):
    x = ins[0]
    if not x.dtype.is_floating:
        raise DTypeError(f"histc: input must be a floating tensor, found {x.dtype.name}",
                         hint="cast it: x.float()")
    _positive_int(attrs["bins"], "histc", "bins")
    lo, hi = attrs["min"], attrs["max"]
    if lo > hi:
        raise ShapeError(f"histc: max ({hi}) must not be below min ({lo})")
    return ValueInfo((attrs["bins"],), x.dtype)


def _histc_ref(ins, attrs):
    return torch.histc(ins[0].float(), attrs["bins"], attrs["min"], attrs["max"]).to(ins[0].dtype)


def _histc_decompose(P, ins, attrs):
    """Each element's bin is trunc((x - min) * bins / (max - min)) in fp32 (the order of torch's CPU
    kernel), max itself in the last bin, elements outside [min, max] (and NaN) in none; the counts are a
    sum over a one-hot of the bins. min == max (torch's default 0, 0) takes the data's min and max, and
    widens an empty range by 1 on each side, as torch."""
    x, bins = P.cast(P.reshape(ins[0], (-1,)), dtypes.float32), attrs["bins"]
    lo, hi = float(attrs["min"]), float(attrs["max"])
    if lo == hi:
        lo_t, hi_t = P.amin(x, 0, keepdim=True), P.amax(x, 0, keepdim=True)
        same = P.eq(lo_t, hi_t)
        lo_t, hi_t = P.where(same, lo_t - 1.0, lo_t), P.where(same, hi_t + 1.0, hi_t)
        width = hi_t - lo_t
    else:       # scalars, the range's width rounded as fp32 computes it
        lo_t, hi_t = float(torch.tensor(lo, dtype=torch.float32)), float(torch.tensor(hi, dtype=torch.float32))
        width = float(torch.tensor(hi_t, dtype=torch.float32) - torch.tensor(lo_t, dtype=torch.float32))
    pos = P.floor(P.div(P.mul(x - lo_t, float(bins)), width))
    inside = P.logical_and(P.ge(x, lo_t), P.le(x, hi_t))
    pos = P.minimum(pos, float(bins - 1))
    edges = P.reshape(P.arange(0, bins, 1, dtype=dtypes.float32), (1, bins))
    hit = P.logical_and(P.eq(P.reshape(pos, (-1, 1)), edges), P.reshape(inside, (-1, 1)))
    return P.cast(P.sum(P.cast(hit, dtypes.float32), 0), ins[0].dtype)   # exact counts up to 2**24


register(OpDef("histc", "counting", _histc_infer, _histc_ref, num_inputs=1, decompose=_histc_decompose,
               flops_fn=lambda ins, attrs, out: 4 * numel(ins[0].shape) * attrs["bins"],
               doc="attrs: bins, min, max (numbers; min == max: the data's range). Counts in the input's dtype"))


# ------------------------------------------------------------------ index_add
def _index_add_infer(ins, attrs):
    x, index, src = ins
    d = check_dims(x, (attrs["dim"],), "index_add")[0]
    _labels(index, "index_add", "index")
    if index.rank != 1:
        raise ShapeError(f"index_add: index must be 1-D, found {fmt_shape(index.shape)}")
    if src.dtype != x.dtype:
        raise DTypeError(f"index_add: source ({src.dtype.name}) must have the input's dtype ({x.dtype.name})")
    want = tuple(index.shape[0] if i == d else s for i, s in enumerate(x.shape))
    if src.rank != x.rank or any(sym.equal(a, b) is not True for a, b in zip(src.shape, want)):
        raise ShapeError(f"index_add: source must have shape {fmt_shape(want)} (the input's, with dim {d} the "
                         f"index's length), found {fmt_shape(src.shape)}")
    return ValueInfo(x.shape, x.dtype)


def _index_add_ref(ins, attrs):
    x, index, src = ins
    d, alpha = attrs["dim"], attrs.get("alpha", 1)
    if x.dtype.is_floating_point:       # fp32 sums, rounded once (as the decomposition; torch fp16 rounds per add)
        return torch.index_add(x.float(), d, index.long(), src.float(), alpha=alpha).to(x.dtype)
    return torch.index_add(x, d, index.long(), src, alpha=alpha)


def _index_add_decompose(P, ins, attrs):
    """out = input + alpha * (one_hot(index, n)^T @ source) over the dim: a matmul on the cube whose products
    are exact (x 1 or x 0) and whose sums add the rows a position receives in fp32. Its work is
    n * m * (the other dims): for a permutation (MoE unpermute) an index_select of the inverse is cheaper."""
    x, index, src = ins
    d, alpha = attrs["dim"], attrs.get("alpha", 1)
    n, m = x.shape[d], index.shape[0]
    if not x.dtype.is_floating:            # no integer matmul: the scatter's one-hot sum
        shape = (1,) * d + (m,) + (1,) * (x.ndim - d - 1)
        idx = P.expand(P.reshape(index, shape), *src.shape)
        return P.scatter(x, d, idx, src if alpha == 1 else P.cast(src * alpha, x.dtype), reduce="add")
    rest = [s for i, s in enumerate(x.shape) if i != d]
    s = src if d == 0 else P.permute(src, d, *[i for i in range(x.ndim) if i != d])
    s = P.reshape(s, (m, numel(rest)))
    mm_dt = x.dtype if x.dtype in (dtypes.float16, dtypes.bfloat16) else dtypes.float32
    onehot_t = P.transpose(P.cast(P.emit("one_hot", [index], {"num_classes": n}), mm_dt), 0, 1)  # [n, m]
    delta = P.matmul(onehot_t, P.cast(s, mm_dt), dtypes.float32)                                  # [n, R]
    delta = P.reshape(delta, (n, *rest))
    if d != 0:
        inv = list(range(1, x.ndim))
        inv.insert(d, 0)
        delta = P.permute(delta, *inv)
    if alpha != 1:
        delta = delta * float(alpha)
    return P.cast(P.cast(x, dtypes.float32) + delta, x.dtype)


register(OpDef("index_add", "counting", _index_add_infer, _index_add_ref, num_inputs=3,
               decompose=_index_add_decompose,
               flops_fn=lambda ins, attrs, out: 2 * numel(ins[2].shape) * ins[0].shape[attrs["dim"]],
               doc="inputs: (input, index 1-D, source); attrs: dim, alpha. out = input, then "
                   "out[index[i]] += alpha * source[i] along dim, as torch.index_add"))

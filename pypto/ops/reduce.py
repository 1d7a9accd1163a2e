"""Reductions over dims (one int, a tuple, or all): sum prod amax amin argmax argmin, and the
composites mean and var. ``attrs["dims"]`` holds sorted non-negative dims (the frontend normalises
them), ``attrs["keepdim"]`` keeps reduced dims as size 1.

fp16/bf16 inputs accumulate in fp32 and round once to the result dtype, as the hardware's row/col
reduction instructions do. The vector lowering (passes/vector_rules.py REDUCE) maps a reduction over the
tile's columns to a TROW* instruction and over its rows to a TCOL* one.
"""
from __future__ import annotations

import torch

from .. import dtypes
from ..errors import DTypeError, ShapeError
from ..ir.tensor_graph import ValueInfo
from .registry import OpDef, numel, register
from .shape_rules import fmt_shape, reduced_shape

_HALF = (torch.float16, torch.bfloat16)


def accumulate_dtype(t: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 values widened to fp32 for accumulation; other dtypes unchanged."""
    return t.float() if t.dtype in _HALF else t


def check_dims(x: ValueInfo, dims, op: str) -> tuple:
    rank = max(x.rank, 1)
    for d in dims:
        if not isinstance(d, int) or not 0 <= d < rank:
            raise ShapeError(f"{op}: dim {d} is out of range for a tensor of shape {fmt_shape(x.shape)}")
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{op}: dims {list(dims)} repeat a dim")
    return tuple(dims)


# ------------------------------------------------------------------ result dtype rules
def _widen_int(x: ValueInfo, attrs) -> dtypes.DataType:
    """sum/prod: an explicit dtype wins; integer and bool inputs give int64 (as torch)."""
    if attrs.get("dtype") is not None:
        return attrs["dtype"]
    return x.dtype if x.dtype.is_floating else dtypes.int64


def _same(x: ValueInfo, attrs) -> dtypes.DataType:
    return x.dtype


def _floating(op):
    def rule(x: ValueInfo, attrs) -> dtypes.DataType:
        dt = attrs.get("dtype") or x.dtype
        if not dt.is_floating:
            raise DTypeError(f"{op}: expected a floating tensor (or dtype=a floating type), found {x.dtype.name}",
                             hint=f"cast first: x.float().{op}(...)")
        return dt
    return rule


def _index(x: ValueInfo, attrs) -> dtypes.DataType:
    return dtypes.int64


# ------------------------------------------------------------------ references
def _sum(x, dims, keepdim, attrs):
    return torch.sum(accumulate_dtype(x), dim=dims, keepdim=keepdim)


def _prod(x, dims, keepdim, attrs):
    x = accumulate_dtype(x)
    if x.dim() == 0:
        return torch.prod(x)
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


def _amax(x, dims, keepdim, attrs):
    return torch.amax(x, dim=dims, keepdim=keepdim)


def _amin(x, dims, keepdim, attrs):
    return torch.amin(x, dim=dims, keepdim=keepdim)


def _mean(x, dims, keepdim, attrs):
    return torch.mean(x.float(), dim=dims, keepdim=keepdim)


def _var(x, dims, keepdim, attrs):
    return torch.var(x.float(), dim=dims, correction=attrs["correction"], keepdim=keepdim)


# name: (reference, result dtype rule, flops per input element)
REDUCTIONS = {
    "sum": (_sum, _widen_int, 1),
    "prod": (_prod, _widen_int, 1),
    "amax": (_amax, _same, 1),
    "amin": (_amin, _same, 1),
    "mean": (_mean, _floating("mean"), 1),
    "var": (_var, _floating("var"), 4),
}


def _reduce_infer(op, rule):
    def infer(ins, attrs):
        x = ins[0]
        dims = check_dims(x, attrs["dims"], op)
        return ValueInfo(reduced_shape(x.shape, dims, attrs.get("keepdim", False)), rule(x, attrs))
    return infer


def _reduce_ref(fn, rule):
    def ref(ins, attrs):
        x = ins[0]
        out_dt = rule(ValueInfo(tuple(x.shape), dtypes.from_torch(x.dtype)), attrs)
        return fn(x, tuple(attrs["dims"]), attrs.get("keepdim", False), attrs).to(out_dt.torch_dtype)
    return ref


def _input_flops(per_element):
    def flops(ins, attrs, out):
        return per_element * numel(ins[0].shape)
    return flops


def reduced_count(shape, dims):
    """How many elements each output element of a reduction over ``dims`` combines (symbolic)."""
    return numel([shape[d] for d in dims])


# ------------------------------------------------------------------ composites
def _mean_decompose(P, ins, attrs):
    x = ins[0]
    out_dt = _floating("mean")(x._info, attrs)
    xf = P.cast(x, dtypes.float32)
    s = P.sum(xf, attrs["dims"], attrs.get("keepdim", False))
    return P.cast(P.div(s, reduced_count(x.shape, attrs["dims"])), out_dt)


def _var_decompose(P, ins, attrs):
    x = ins[0]
    dims = attrs["dims"]
    out_dt = _floating("var")(x._info, attrs)
    xf = P.cast(x, dtypes.float32)
    n = reduced_count(x.shape, dims)
    centred = P.sub(xf, P.div(P.sum(xf, dims, keepdim=True), n))
    s = P.sum(P.mul(centred, centred), dims, attrs.get("keepdim", False))
    return P.cast(P.div(s, n - attrs["correction"]), out_dt)


_DECOMPOSE = {"mean": _mean_decompose, "var": _var_decompose}

for _name, (_fn, _rule, _flops) in REDUCTIONS.items():
    register(OpDef(_name, "reduce", _reduce_infer(_name, _rule), _reduce_ref(_fn, _rule), flops=_flops,
                   num_inputs=1, decompose=_DECOMPOSE.get(_name), flops_fn=_input_flops(_flops),
                   doc="attrs: dims (sorted, non-negative), keepdim" +
                       (", dtype (optional)" if _name in ("sum", "prod", "mean") else "") +
                       (", correction" if _name == "var" else "")))


# ------------------------------------------------------------------ argmax / argmin
def _arg_infer(op):
    def infer(ins, attrs):
        x = ins[0]
        dim = attrs.get("dim")
        if dim is None:
            shape = (1,) * x.rank if attrs.get("keepdim") else ()
        else:
            shape = reduced_shape(x.shape, check_dims(x, (dim,), op), attrs.get("keepdim", False))
        return ValueInfo(shape, dtypes.int64)
    return infer


def _arg_ref(fn):
    def ref(ins, attrs):
        return fn(ins[0], dim=attrs.get("dim"), keepdim=attrs.get("keepdim", False))
    return ref


def _argmin_decompose(P, ins, attrs):
    return P.argmax(P.neg(ins[0]), attrs.get("dim"), attrs.get("keepdim", False))


register(OpDef("argmax", "reduce", _arg_infer("argmax"), _arg_ref(torch.argmax), num_inputs=1,
               flops_fn=_input_flops(1),
               doc="attrs: dim (int, or None for the flattened tensor), keepdim; int64 indices as torch"))
register(OpDef("argmin", "reduce", _arg_infer("argmin"), _arg_ref(torch.argmin), num_inputs=1,
               flops_fn=_input_flops(1), decompose=_argmin_decompose,
               doc="attrs: dim, keepdim; lowered as argmax of the negated input"))

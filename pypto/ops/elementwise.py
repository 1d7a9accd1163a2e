"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons, where, clip, cast.

Each table row is one op: its torch reference and FLOPs per output element. Python scalars reach
these ops as 0-d ``scalar`` nodes, so broadcasting covers them.

Adding an elementwise op named as torch names it is a row here and nothing else: a UNARY / BINARY row
(its reference), plus either a PTO row (the instruction computing it; a new instruction is one
entry in pypto/ir/isa.py, see its docstring) or a decomposition into existing ops (as log2). The
pypto.<name> function, the Tensor method, the torch.compile rule of aten.<name> and the vector
lowering follow from the entry.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as TF

from .. import dtypes
from ..errors import DTypeError
from ..ir.tensor_graph import ValueInfo
from .registry import OpDef, register
from .shape_rules import broadcast_shapes


def _float_result(dt):
    return dt if dt.is_floating else dtypes.float32


def _same(dt):
    return dt


def _bool(dt):
    return dtypes.bool_


# name: (torch reference, result dtype rule, flops per element)
UNARY = {
    "abs": (torch.abs, _same, 1), "neg": (torch.neg, _same, 1),
    "exp": (torch.exp, _float_result, 4), "exp2": (torch.exp2, _float_result, 4),
    "log": (torch.log, _float_result, 4), "log1p": (torch.log1p, _float_result, 4),
    "sqrt": (torch.sqrt, _float_result, 4), "rsqrt": (torch.rsqrt, _float_result, 4),
    "reciprocal": (torch.reciprocal, _float_result, 4), "sigmoid": (torch.sigmoid, _float_result, 6),
    "silu": (TF.silu, _float_result, 7), "relu": (torch.relu, _same, 1),
    "softplus": (TF.softplus, _float_result, 10), "tanh": (torch.tanh, _float_result, 6),
    "sin": (torch.sin, _float_result, 6), "cos": (torch.cos, _float_result, 6),
    "floor": (torch.floor, _same, 1), "ceil": (torch.ceil, _same, 1), "round": (torch.round, _same, 1),
    "sign": (torch.sign, _same, 1), "logical_not": (torch.logical_not, _bool, 1),
    "isfinite": (torch.isfinite, _bool, 1), "erf": (torch.erf, _float_result, 8),
    "log2": (torch.log2, _float_result, 5),
    "erfc": (torch.erfc, _float_result, 9), "expm1": (torch.expm1, _float_result, 5),
    "trunc": (torch.trunc, _same, 2),
}

BINARY = {
    "add": (torch.add, 1), "sub": (torch.sub, 1), "mul": (torch.mul, 1), "div": (torch.div, 4),
    "pow": (torch.pow, 8), "maximum": (torch.maximum, 1), "minimum": (torch.minimum, 1),
    "remainder": (torch.remainder, 4), "floor_divide": (torch.floor_divide, 5),
}
COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
LOGICAL = {"logical_and": torch.logical_and, "logical_or": torch.logical_or}


def _unary_infer(rule):
    def infer(ins, attrs):
        return ValueInfo(ins[0].shape, rule(ins[0].dtype))
    return infer


def _floatify(x, out_dt):
    return x if x.dtype == out_dt.torch_dtype else x.to(out_dt.torch_dtype)


def _unary_ref(fn, rule):
    def ref(ins, attrs):
        x = ins[0]
        out_dt = rule(dtypes.from_torch(x.dtype))
        if out_dt.is_floating and not x.dtype.is_floating_point:
            x = x.to(out_dt.torch_dtype)
        return fn(x)
    return ref


def _gelu_ref(ins, attrs):
    return TF.gelu(ins[0], approximate=attrs.get("approximate", "none"))


def _binary_infer(result_dtype):
    def infer(ins, attrs):
        shape = broadcast_shapes(ins[0].shape, ins[1].shape)
        return ValueInfo(shape, result_dtype(dtypes.promote(ins[0].dtype, ins[1].dtype)))
    return infer


def _div_dtype(dt):
    return _float_result(dt)


# op -> the PTO instruction the vector lowering emits for it (tile-tile form; passes/vector_rules.py
# picks the tile-scalar and broadcast forms). Ops absent here are a short instruction sequence written
# in passes/vector_rules.py (silu, softplus, gelu, exp2, logical_not, clip, where, cast) or a
# decomposition (log2).
PTO = {"abs": "TABS", "neg": "TNEG", "exp": "TEXP", "log": "TLOG", "sqrt": "TSQRT", "rsqrt": "TRSQRT",
       "reciprocal": "TRECIP", "relu": "TRELU", "sigmoid": "TSIGMOID", "tanh": "TTANH", "sin": "TSIN",
       "cos": "TCOS", "floor": "TFLOOR", "ceil": "TCEIL", "round": "TROUND", "sign": "TSIGN",
       "isfinite": "TISFINITE", "log1p": "TLOG1P", "erf": "TERF", "erfc": "TERFC", "expm1": "TEXPM1",
       "add": "TADD", "sub": "TSUB", "mul": "TMUL", "div": "TDIV", "pow": "TPOW", "maximum": "TMAX",
       "minimum": "TMIN", "remainder": "TREM", "logical_and": "TAND", "logical_or": "TOR",
       "eq": "TCMP", "ne": "TCMP", "lt": "TCMP", "le": "TCMP", "gt": "TCMP", "ge": "TCMP"}


def _log2_decompose(P, ins, attrs):
    # log(x) / ln 2 in fp32, rounded once to the result dtype (as torch.log2 computes half types)
    x = ins[0]
    out = _float_result(x.dtype)
    return P.cast(P.mul(P.log(P.cast(x, dtypes.float32)), 1.0 / math.log(2.0)), out)


def _trunc_decompose(P, ins, attrs):
    # toward zero: floor of the non-negative values, ceil of the negative ones (an integer is itself)
    x = ins[0]
    if not x.dtype.is_floating:
        return x
    return P.where(P.ge(x, 0), P.floor(x), P.ceil(x))


def _floor_divide_decompose(P, ins, attrs):
    # torch's rule: the integer nearest (a - remainder(a, b)) / b, in fp32, rounded once to the result
    # dtype. floor(a / b) would differ where a / b rounds up to an integer (1 // 0.1 is 9, not 10).
    a, b = ins
    out = dtypes.promote(a.dtype, b.dtype)
    a32, b32 = P.cast(a, dtypes.float32), P.cast(b, dtypes.float32)
    q = P.round(P.div(P.sub(a32, P.remainder(a32, b32)), b32))
    return q if out == dtypes.float32 else P.cast(q, out)


_DECOMPOSE = {"log2": _log2_decompose,
              "trunc": _trunc_decompose,
              "floor_divide": _floor_divide_decompose}

for _name, (_fn, _rule, _flops) in UNARY.items():
    register(OpDef(_name, "elementwise", _unary_infer(_rule), _unary_ref(_fn, _rule), flops=_flops, num_inputs=1,
                   form="unary", pto=PTO.get(_name), decompose=_DECOMPOSE.get(_name),
                   doc=f"Elementwise {_name}, as torch.{_name}."))
register(OpDef("gelu", "elementwise", _unary_infer(_float_result), _gelu_ref, flops=12, num_inputs=1,
               doc="attrs: approximate in {'none', 'tanh'} as torch"))


def _bin_ref(fn, out_rule):
    def ref(ins, attrs):
        a, b = ins
        out_dt = out_rule(dtypes.promote(dtypes.from_torch(a.dtype), dtypes.from_torch(b.dtype)))
        if out_dt.is_floating:
            a, b = _floatify(a, out_dt), _floatify(b, out_dt)
        return fn(a, b)
    return ref


def _float_only(dt):
    if not dt.is_floating:
        raise DTypeError(f"floor_divide (//) of {dt} tensors is not supported yet: the vector unit divides in "
                         "floating point, exact for integers only below 2^24; cast to a float dtype first")
    return dt


for _name, (_fn, _flops) in BINARY.items():
    _rule = {"div": _div_dtype, "floor_divide": _float_only}.get(_name, _same)
    register(OpDef(_name, "elementwise", _binary_infer(_rule), _bin_ref(_fn, _rule), flops=_flops, num_inputs=2,
                   form="binary", pto=PTO.get(_name), decompose=_DECOMPOSE.get(_name),
                   doc=f"Elementwise {_name} with broadcasting and Python-scalar operands, as torch.{_name}."))
for _name, _fn in (COMPARE | LOGICAL).items():
    register(OpDef(_name, "elementwise", _binary_infer(_bool), _bin_ref(_fn, _same), flops=1, num_inputs=2,
                   form="comparison", pto=PTO[_name],
                   doc=f"Elementwise {_name} with broadcasting and Python-scalar operands (a bool result), "
                       f"as torch.{_name}."))


def _where_infer(ins, attrs):
    cond, a, b = ins
    if cond.dtype != dtypes.bool_:
        raise DTypeError(f"where: condition must be bool, found {cond.dtype}")
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    return ValueInfo(shape, dtypes.promote(a.dtype, b.dtype))


def _where_ref(ins, attrs):
    cond, a, b = ins
    dt = torch.promote_types(a.dtype, b.dtype)
    return torch.where(cond, a.to(dt), b.to(dt))


register(OpDef("where", "elementwise", _where_infer, _where_ref, num_inputs=3))


def _clip_infer(ins, attrs):
    return ValueInfo(ins[0].shape, ins[0].dtype)


def _clip_ref(ins, attrs):
    return torch.clamp(ins[0], attrs.get("min"), attrs.get("max"))


register(OpDef("clip", "elementwise", _clip_infer, _clip_ref, flops=2, num_inputs=1,
               doc="attrs: min, max (Python numbers or None)"))


def _cast_infer(ins, attrs):
    return ValueInfo(ins[0].shape, attrs["dtype"])


def _cast_ref(ins, attrs):
    return ins[0].to(attrs["dtype"].torch_dtype)


register(OpDef("cast", "elementwise", _cast_infer, _cast_ref, num_inputs=1, doc="attrs: dtype"))


def _scalar_infer(ins, attrs):
    return ValueInfo((), attrs["dtype"])


def _scalar_ref(ins, attrs):
    return torch.tensor(attrs["value"], dtype=attrs["dtype"].torch_dtype)


register(OpDef("scalar", "elementwise", _scalar_infer, _scalar_ref, unit="none", flops=0, num_inputs=0,
               doc="a 0-d constant from a Python or symbolic scalar; attrs: value, dtype"))

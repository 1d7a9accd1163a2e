"""Matrix multiplication on the cube unit, and linear (a composite: matmul with b_trans, plus bias).

``matmul`` takes operands of rank >= 2 (the frontend maps torch's 1-D cases onto it): a is [..., M, K]
([..., K, M] with ``a_trans``), b is [..., K, N] ([..., N, K] with ``b_trans``); batch dims broadcast.
Inputs of one dtype; fp16/bf16 multiply with fp32 accumulation (TMATMUL into an fp32 L0C) and round
once to ``out_dtype``; int8 accumulates in int32.
"""
from __future__ import annotations

import torch

from .. import dtypes, symbolic as sym
from ..errors import DTypeError, ShapeError
from ..ir.tensor_graph import ValueInfo
from .registry import OpDef, numel, register
from .shape_rules import broadcast_shapes, fmt_shape

# input dtype -> (default result dtype, allowed result dtypes); the cube's accumulator is fp32 or int32
OUT_DTYPES = {
    dtypes.float16: (dtypes.float16, (dtypes.float16, dtypes.float32)),
    dtypes.bfloat16: (dtypes.bfloat16, (dtypes.bfloat16, dtypes.float32)),
    dtypes.float32: (dtypes.float32, (dtypes.float32,)),
    dtypes.int8: (dtypes.int32, (dtypes.int32,)),
}


def result_dtype(a: dtypes.DataType, b: dtypes.DataType, out_dtype, op: str = "matmul") -> dtypes.DataType:
    if a != b:
        raise DTypeError(f"{op}: both operands must have one dtype, found {a.name} and {b.name}",
                         hint="cast one of them first")
    if a not in OUT_DTYPES:
        raise DTypeError(f"{op}: operands must be one of {', '.join(d.name for d in OUT_DTYPES)}, found {a.name}")
    default, allowed = OUT_DTYPES[a]
    if out_dtype is None:
        return default
    if out_dtype not in allowed:
        raise DTypeError(f"{op}: out_dtype {out_dtype.name} is not available for {a.name} operands "
                         f"(expected one of {', '.join(d.name for d in allowed)})")
    return out_dtype


def matmul_dims(a: ValueInfo, b: ValueInfo, a_trans: bool, b_trans: bool, op: str = "matmul"):
    """-> (batch shape, M, K, N), checking ranks, K and batch broadcasting."""
    for name, v in (("first", a), ("second", b)):
        if v.rank < 2:
            raise ShapeError(f"{op}: the {name} operand must have rank >= 2, found shape {fmt_shape(v.shape)}")
    m, ka = (a.shape[-1], a.shape[-2]) if a_trans else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if b_trans else (b.shape[-2], b.shape[-1])
    if sym.equal(ka, kb) is not True:
        raise ShapeError(
            f"{op}: inner dimensions differ: {fmt_shape(a.shape)}{' (a_trans)' if a_trans else ''} has K={ka} "
            f"but {fmt_shape(b.shape)}{' (b_trans)' if b_trans else ''} has K={kb}",
            hint="expected a [..., M, K] @ [..., K, N]" + ("; dynamic K must be the same symbol" if
                                                           sym.equal(ka, kb) is None else ""))
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ShapeError as e:
        raise ShapeError(f"{op}: batch dims of {fmt_shape(a.shape)} and {fmt_shape(b.shape)} do not broadcast: "
                         f"{e.message}") from None
    return batch, m, ka, n


def _matmul_infer(ins, attrs):
    a, b = ins
    batch, m, _, n = matmul_dims(a, b, attrs.get("a_trans", False), attrs.get("b_trans", False))
    return ValueInfo((*batch, m, n), result_dtype(a.dtype, b.dtype, attrs.get("out_dtype")))


def _accumulator(dt: torch.dtype) -> torch.dtype:
    return torch.float32 if dt.is_floating_point else torch.int32


def matmul_ref(a: torch.Tensor, b: torch.Tensor, a_trans=False, b_trans=False, out_dtype=None) -> torch.Tensor:
    out = result_dtype(dtypes.from_torch(a.dtype), dtypes.from_torch(b.dtype), out_dtype)
    if a_trans:
        a = a.transpose(-1, -2)
    if b_trans:
        b = b.transpose(-1, -2)
    acc = _accumulator(a.dtype)
    return torch.matmul(a.to(acc), b.to(acc)).to(out.torch_dtype)


def _matmul_ref(ins, attrs):
    return matmul_ref(ins[0], ins[1], attrs.get("a_trans", False), attrs.get("b_trans", False),
                      attrs.get("out_dtype"))


def _matmul_flops(ins, attrs, out):
    k = ins[0].shape[-2] if attrs.get("a_trans") else ins[0].shape[-1]
    return 2 * numel(out.shape) * k


register(OpDef("matmul", "matmul", _matmul_infer, _matmul_ref, unit="cube", flops=2, num_inputs=2,
               flops_fn=_matmul_flops,
               doc="attrs: a_trans, b_trans, out_dtype (None: the input dtype; int8 -> int32)"))


# ------------------------------------------------------------------ linear (composite)
def _linear_infer(ins, attrs):
    x, w = ins[0], ins[1]
    if w.rank != 2:
        raise ShapeError(f"linear: weight must be [out_features, in_features], found {fmt_shape(w.shape)}")
    if x.rank < 1:
        raise ShapeError("linear: input must have rank >= 1, found a 0-d tensor")
    x2 = ValueInfo(x.shape if x.rank >= 2 else (1, *x.shape), x.dtype)
    batch, m, _, n = matmul_dims(x2, w, False, True, "linear")
    out = ValueInfo((*batch, m, n) if x.rank >= 2 else (n,), result_dtype(x.dtype, w.dtype, None, "linear"))
    if len(ins) == 3:
        bias = ins[2]
        try:
            fits = broadcast_shapes(bias.shape, out.shape) == tuple(out.shape)
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"linear: bias {fmt_shape(bias.shape)} does not broadcast to the output "
                             f"{fmt_shape(out.shape)}")
    return out


def _linear_ref(ins, attrs):
    x, w = ins[0], ins[1]
    y = matmul_ref(x.unsqueeze(0) if x.dim() == 1 else x, w, b_trans=True)
    if x.dim() == 1:
        y = y.squeeze(0)
    if len(ins) == 3:
        y = (y.float() + ins[2].float()).to(y.dtype) if y.dtype.is_floating_point else y + ins[2]
    return y


def _linear_decompose(P, ins, attrs):
    x, w = ins[0], ins[1]
    if x.ndim > 2:
        # the leading dims folded into the rows: one [rows, K] x [K, N] product reads the weight once, where a
        # batched matmul with the weight broadcast reads it once per batch (a [32, 1, K] decode input: 32 times)
        lead, rows = tuple(x.shape[:-1]), 1
        for d in lead:
            rows = rows * d
        y = P.reshape(P.matmul(P.reshape(x, (rows, x.shape[-1])), w, b_trans=True), lead + (w.shape[0],))
    else:
        y = P.matmul(x, w, b_trans=True)
    return P.add(y, ins[2]) if len(ins) == 3 else y


register(OpDef("linear", "matmul", _linear_infer, _linear_ref, unit="cube", flops=2, decompose=_linear_decompose,
               flops_fn=lambda ins, attrs, out: 2 * numel(out.shape) * ins[1].shape[1],
               doc="inputs: (x [..., K], weight [N, K], bias [N] optional) -> x @ weight.T + bias"))

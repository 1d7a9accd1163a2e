"""Normalisations, as composites: softmax log_softmax rms_norm layer_norm l2norm.

Each is registered with its torch reference and a ``decompose`` into primitive pypto ops that the
decomposition pass applies before tiling. Both compute in fp32 and round once to the result dtype,
as the hardware does for fp16/bf16 inputs (TCVT up, vector math in fp32, TCVT down).
"""
from __future__ import annotations

import torch
import torch.nn.functional as TF

from .. import dtypes, symbolic as sym
from ..errors import DTypeError, ShapeError
from ..ir.tensor_graph import ValueInfo
from .reduce import check_dims
from .registry import OpDef, register
from .shape_rules import fmt_shape


def _floating(x: ValueInfo, op: str, what: str = "input") -> None:
    if not x.dtype.is_floating:
        raise DTypeError(f"{op}: {what} must be a floating tensor (f16, bf16, f32), found {x.dtype.name}")


def _same_trailing(x: ValueInfo, p: ValueInfo, k: int, op: str, what: str) -> None:
    """``p`` must have the shape of the last ``k`` dims of ``x``."""
    _floating(p, op, what)
    want = x.shape[x.rank - k:]
    if p.rank != k or any(sym.equal(a, b) is not True for a, b in zip(p.shape, want)):
        raise ShapeError(f"{op}: {what} must have shape {fmt_shape(want)} (the normalised dims of "
                         f"{fmt_shape(x.shape)}), found {fmt_shape(p.shape)}")


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.float()


def _fp32_in(P, x):
    return P.cast(x, dtypes.float32)


# ------------------------------------------------------------------ softmax / log_softmax
def _softmax_infer(op):
    def infer(ins, attrs):
        x = ins[0]
        check_dims(x, (attrs["dim"],), op)
        out = attrs.get("dtype") or x.dtype
        _floating(ValueInfo(x.shape, out), op)
        return ValueInfo(x.shape, out)
    return infer


def _softmax_ref(fn):
    def ref(ins, attrs):
        out = attrs.get("dtype") or dtypes.from_torch(ins[0].dtype)
        return fn(_f32(ins[0]), dim=attrs["dim"]).to(out.torch_dtype)
    return ref


def _softmax_decompose(P, ins, attrs):
    x, dim = ins[0], attrs["dim"]
    xf = _fp32_in(P, x)
    e = P.exp(P.sub(xf, P.amax(xf, dim, keepdim=True)))
    return P.cast(P.div(e, P.sum(e, dim, keepdim=True)), attrs.get("dtype") or x.dtype)


def _log_softmax_decompose(P, ins, attrs):
    x, dim = ins[0], attrs["dim"]
    xf = _fp32_in(P, x)
    shifted = P.sub(xf, P.amax(xf, dim, keepdim=True))
    return P.cast(P.sub(shifted, P.log(P.sum(P.exp(shifted), dim, keepdim=True))), attrs.get("dtype") or x.dtype)


register(OpDef("softmax", "norm", _softmax_infer("softmax"), _softmax_ref(torch.softmax), flops=5, num_inputs=1,
               decompose=_softmax_decompose, doc="attrs: dim, dtype (optional result dtype)"))
register(OpDef("log_softmax", "norm", _softmax_infer("log_softmax"), _softmax_ref(torch.log_softmax), flops=6,
               num_inputs=1, decompose=_log_softmax_decompose, doc="attrs: dim, dtype (optional result dtype)"))


# ------------------------------------------------------------------ rms_norm
def _rms_norm_infer(ins, attrs):
    x = ins[0]
    _floating(x, "rms_norm")
    if x.rank < 1:
        raise ShapeError("rms_norm: expected a tensor of rank >= 1, found a 0-d tensor")
    if len(ins) == 2:
        _same_trailing(x, ins[1], 1, "rms_norm", "weight")
    return ValueInfo(x.shape, x.dtype)


def _rms_norm_ref(ins, attrs):
    x = _f32(ins[0])
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + attrs["eps"])
    if len(ins) == 2:
        y = y * _f32(ins[1])
    return y.to(ins[0].dtype)


def _rms_norm_decompose(P, ins, attrs):
    x = ins[0]
    xf = _fp32_in(P, x)
    y = P.mul(xf, P.rsqrt(P.add(P.mean(P.mul(xf, xf), -1, keepdim=True), attrs["eps"])))
    if len(ins) == 2:
        y = P.mul(y, _fp32_in(P, ins[1]))
    return P.cast(y, x.dtype)


register(OpDef("rms_norm", "norm", _rms_norm_infer, _rms_norm_ref, flops=4, decompose=_rms_norm_decompose,
               doc="inputs: (x, weight [C] optional); attrs: eps. x * rsqrt(mean(x^2, -1) + eps) * weight"))


# ------------------------------------------------------------------ layer_norm
def _layer_norm_infer(ins, attrs):
    x, k = ins[0], attrs["ndim"]
    _floating(x, "layer_norm")
    if not 1 <= k <= x.rank:
        raise ShapeError(f"layer_norm: cannot normalise the last {k} dims of a tensor of shape {fmt_shape(x.shape)}")
    params = ins[1:]
    names = [n for n, has in (("weight", attrs.get("has_weight")), ("bias", attrs.get("has_bias"))) if has]
    if len(names) != len(params):
        raise ShapeError(f"layer_norm: expected {len(names)} parameter tensors ({', '.join(names) or 'none'}), "
                         f"found {len(params)}")
    for name, p in zip(names, params):
        _same_trailing(x, p, k, "layer_norm", name)
    return ValueInfo(x.shape, x.dtype)


def _split_params(ins, attrs):
    params = list(ins[1:])
    w = params.pop(0) if attrs.get("has_weight") else None
    b = params.pop(0) if attrs.get("has_bias") else None
    return w, b


def _layer_norm_ref(ins, attrs):
    x = ins[0]
    w, b = _split_params(ins, attrs)
    shape = tuple(x.shape[x.dim() - attrs["ndim"]:])
    y = TF.layer_norm(_f32(x), shape, None if w is None else _f32(w), None if b is None else _f32(b), attrs["eps"])
    return y.to(x.dtype)


def _layer_norm_decompose(P, ins, attrs):
    x = ins[0]
    w, b = _split_params(ins, attrs)
    dims = tuple(range(x.ndim - attrs["ndim"], x.ndim))
    xf = _fp32_in(P, x)
    centred = P.sub(xf, P.mean(xf, dims, keepdim=True))
    var = P.mean(P.mul(centred, centred), dims, keepdim=True)
    y = P.mul(centred, P.rsqrt(P.add(var, attrs["eps"])))
    if w is not None:
        y = P.mul(y, _fp32_in(P, w))
    if b is not None:
        y = P.add(y, _fp32_in(P, b))
    return P.cast(y, x.dtype)


register(OpDef("layer_norm", "norm", _layer_norm_infer, _layer_norm_ref, flops=8, decompose=_layer_norm_decompose,
               doc="inputs: (x, weight?, bias?); attrs: ndim (normalised trailing dims), eps, has_weight, has_bias"))


# ------------------------------------------------------------------ l2norm (as flash-linear-attention's)
def _l2norm_infer(ins, attrs):
    x = ins[0]
    _floating(x, "l2norm")
    check_dims(x, (attrs["dim"],), "l2norm")
    return ValueInfo(x.shape, x.dtype)


def _l2norm_ref(ins, attrs):
    x = _f32(ins[0])
    return (x * torch.rsqrt((x * x).sum(attrs["dim"], keepdim=True) + attrs["eps"])).to(ins[0].dtype)


def _l2norm_decompose(P, ins, attrs):
    x = ins[0]
    xf = _fp32_in(P, x)
    ss = P.sum(P.mul(xf, xf), attrs["dim"], keepdim=True)
    return P.cast(P.mul(xf, P.rsqrt(P.add(ss, attrs["eps"]))), x.dtype)


register(OpDef("l2norm", "norm", _l2norm_infer, _l2norm_ref, flops=4, num_inputs=1, decompose=_l2norm_decompose,
               doc="attrs: dim, eps. x * rsqrt(sum(x^2, dim) + eps)"))

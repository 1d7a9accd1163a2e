"""Traced normalisations: ``pypto.softmax``, ``log_softmax``, ``rms_norm``, ``layer_norm``, ``l2norm``
(composite ops: recorded as one node, decomposed into primitives by the compiler)."""
from __future__ import annotations

import numbers

from .. import dtypes
from ..errors import ShapeError, TypeMismatchError
from ..ops.shape_rules import fmt_shape
from .api import _shape_args, as_tensor, emit
from .api_reduce import normalize_dim
from .tensor import Tensor

__all__ = ["softmax", "log_softmax", "rms_norm", "layer_norm", "l2norm"]


def _eps(eps, op: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeMismatchError(f"{op}: eps must be a number, found {type(eps).__name__} {eps!r}")
    return float(eps)


def _softmax(op: str, input, dim, dtype) -> Tensor:
    x = as_tensor(input, op)
    if dim is None:
        raise ShapeError(f"{op}: dim is required (found None)")
    attrs = {"dim": normalize_dim(x, dim, op)}
    if dtype is not None:
        attrs["dtype"] = dtypes.to_dtype(dtype)
    return emit(op, [x], attrs)


def softmax(input, dim: int, dtype=None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``, computed in fp32, as torch.softmax."""
    return _softmax("softmax", input, dim, dtype)


def log_softmax(input, dim: int, dtype=None) -> Tensor:
    return _softmax("log_softmax", input, dim, dtype)


def rms_norm(input, weight=None, eps: float = 1e-6) -> Tensor:
    """x * rsqrt(mean(x^2, -1) + eps) * weight over the last dim (CANN pypto.rms_norm; weight [C])."""
    ins = [as_tensor(input, "rms_norm")]
    if weight is not None:
        ins.append(as_tensor(weight, "rms_norm", "weight"))
    return emit("rms_norm", ins, {"eps": _eps(eps, "rms_norm")})


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm: normalise over the trailing ``normalized_shape`` dims."""
    x = as_tensor(input, "layer_norm")
    shape = _shape_args([normalized_shape])
    if len(shape) > x.ndim or tuple(shape) != tuple(x.shape[x.ndim - len(shape):]) or not shape:
        raise ShapeError(f"layer_norm: normalized_shape {list(shape)} must equal the last dims of the input "
                         f"{fmt_shape(x.shape)}")
    ins = [x]
    if weight is not None:
        ins.append(as_tensor(weight, "layer_norm", "weight"))
    if bias is not None:
        ins.append(as_tensor(bias, "layer_norm", "bias"))
    return emit("layer_norm", ins, {"ndim": len(shape), "eps": _eps(eps, "layer_norm"),
                                    "has_weight": weight is not None, "has_bias": bias is not None})


def l2norm(input, dim: int = -1, eps: float = 1e-6) -> Tensor:
    """x * rsqrt(sum(x^2, dim) + eps), as flash-linear-attention's l2norm."""
    x = as_tensor(input, "l2norm")
    return emit("l2norm", [x], {"dim": normalize_dim(x, dim, "l2norm"), "eps": _eps(eps, "l2norm")})

"""Traced ``pypto.matmul`` (torch's rank rules; CANN's ``out_dtype``, ``a_trans``, ``b_trans``), ``mm``,
``bmm`` and ``linear``."""
from __future__ import annotations

from .. import dtypes
from ..errors import ShapeError, UnsupportedOpError
from ..ops.shape_rules import fmt_shape
from .api import add, as_tensor, cast, emit, reshape
from .tensor import Tensor

__all__ = ["matmul", "mm", "bmm", "linear"]


def matmul(input, other, out_dtype=None, *, a_trans: bool = False, b_trans: bool = False,
           extend_params: dict | None = None, c_matrix_nz: bool = False) -> Tensor:
    """``input @ other`` as torch.matmul: 1-D operands are a row (first) or a column (second) vector
    that is removed from the result; batch dims broadcast. ``a_trans``/``b_trans``: the operand is
    stored transposed ([..., K, M] / [..., N, K]). fp16/bf16 accumulate in fp32; the result has the
    input dtype unless ``out_dtype`` asks for fp32.

    CANN's ``extend_params={"bias_tensor": bias}`` adds ``bias`` (broadcast over the rows, e.g. [1, N]
    or [N]) to the fp32 product before the result's dtype; its dequantisation entries (``scale``,
    ``scale_tensor``, ``relu_type``) and ``trans_mode`` are refused, and ``c_matrix_nz`` (CANN's NZ
    layout of the result in device memory) has no meaning for a traced value and is refused."""
    if c_matrix_nz:
        raise UnsupportedOpError("matmul: c_matrix_nz (the NZ device layout of the result) is not modelled "
                                 "by pypto", hint="drop c_matrix_nz; pypto's tensors are row-major values")
    params = dict(extend_params or {})
    bias = params.pop("bias_tensor", None)
    if params:
        raise UnsupportedOpError(f"matmul: extend_params {sorted(params)} are not supported by pypto "
                                 "(only 'bias_tensor')", hint="apply the scale / relu to the result with pypto ops")
    if bias is not None:
        out = matmul(input, other, dtypes.float32, a_trans=a_trans, b_trans=b_trans)
        bias = as_tensor(bias, "matmul", "extend_params['bias_tensor']")
        res_dt = (dtypes.to_dtype(out_dtype) if out_dtype is not None
                  else as_tensor(input, "matmul", "input").dtype)
        return cast(add(out, cast(bias, dtypes.float32)), res_dt)
    a, b = as_tensor(input, "matmul", "input"), as_tensor(other, "matmul", "other")
    out_dt = dtypes.to_dtype(out_dtype) if out_dtype is not None else None
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands must have rank >= 1, found shapes {fmt_shape(a.shape)} and "
                         f"{fmt_shape(b.shape)}")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a, a_trans = reshape(a, 1, a.shape[0]), False
    if b_vec:
        b, b_trans = reshape(b, b.shape[0], 1), False
    attrs = {"a_trans": bool(a_trans), "b_trans": bool(b_trans)}
    if out_dt is not None:
        attrs["out_dtype"] = out_dt
    out = emit("matmul", [a, b], attrs)
    if a_vec or b_vec:
        shape = list(out.shape)
        if b_vec:
            shape.pop(-1)
        if a_vec:
            shape.pop(-1 if b_vec else -2)
        out = reshape(out, shape)
    return out


def mm(input, mat2, out_dtype=None) -> Tensor:
    a, b = as_tensor(input, "mm", "input"), as_tensor(mat2, "mm", "mat2")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expected two 2-D tensors, found {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return matmul(a, b, out_dtype)


def bmm(input, mat2, out_dtype=None) -> Tensor:
    a, b = as_tensor(input, "bmm", "input"), as_tensor(mat2, "bmm", "mat2")
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: expected two 3-D tensors, found {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return matmul(a, b, out_dtype)


def linear(input, weight, bias=None) -> Tensor:
    """``input @ weight.T + bias`` (weight [out_features, in_features]), as torch.nn.functional.linear."""
    ins = [as_tensor(input, "linear", "input"), as_tensor(weight, "linear", "weight")]
    if bias is not None:
        ins.append(as_tensor(bias, "linear", "bias"))
    return emit("linear", ins)

"""Scans: cumsum along one dim (fp16/bf16 accumulate in fp32; integers widen to int64, as torch).
The vector lowering (passes/vector_rules.py) scans a tile's columns with TROWCUMSUM and its rows with
TCOLCUMSUM."""
from __future__ import annotations

import torch

from .. import dtypes
from ..ir.tensor_graph import ValueInfo
from .reduce import accumulate_dtype, check_dims
from .registry import OpDef, register


def _result_dtype(x: ValueInfo, attrs) -> dtypes.DataType:
    if attrs.get("dtype") is not None:
        return attrs["dtype"]
    return x.dtype if x.dtype.is_floating else dtypes.int64


def _cumsum_infer(ins, attrs):
    x = ins[0]
    check_dims(x, (attrs["dim"],), "cumsum")
    return ValueInfo(x.shape, _result_dtype(x, attrs))


def _cumsum_ref(ins, attrs):
    x = ins[0]
    out_dt = _result_dtype(ValueInfo(tuple(x.shape), dtypes.from_torch(x.dtype)), attrs)
    return torch.cumsum(accumulate_dtype(x), dim=attrs["dim"]).to(out_dt.torch_dtype)


register(OpDef("cumsum", "scan", _cumsum_infer, _cumsum_ref, num_inputs=1,
               doc="attrs: dim (non-negative), dtype (optional)"))

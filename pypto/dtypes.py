"""Data types: one DataType per element type, torch/numpy mapping, CANN-style aliases, promotion."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DataType:
    name: str
    torch_dtype: torch.dtype
    itemsize: int
    cpp: str  # element type name in generated PTO C++

    @property
    def is_floating(self) -> bool:
        return self.torch_dtype.is_floating_point

    @property
    def is_integer(self) -> bool:
        return not self.is_floating and self.torch_dtype != torch.bool

    def __repr__(self) -> str:
        return f"pypto.{self.name}"

    def __str__(self) -> str:
        return SHORT_NAMES.get(self.name, self.name)


float16 = DataType("float16", torch.float16, 2, "half")
bfloat16 = DataType("bfloat16", torch.bfloat16, 2, "bfloat16_t")
float32 = DataType("float32", torch.float32, 4, "float")
int8 = DataType("int8", torch.int8, 1, "int8_t")
int16 = DataType("int16", torch.int16, 2, "int16_t")
int32 = DataType("int32", torch.int32, 4, "int32_t")
int64 = DataType("int64", torch.int64, 8, "int64_t")
uint8 = DataType("uint8", torch.uint8, 1, "uint8_t")
bool_ = DataType("bool", torch.bool, 1, "bool")

ALL = (float16, bfloat16, float32, int8, int16, int32, int64, uint8, bool_)
SHORT_NAMES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int8": "i8", "int16": "i16",
               "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}

# CANN PyPTO spellings
DT_FP16, DT_BF16, DT_FP32 = float16, bfloat16, float32
DT_INT8, DT_INT16, DT_INT32, DT_INT64, DT_UINT8, DT_BOOL = int8, int16, int32, int64, uint8, bool_
half = float16
# CANN's wider unsigned types, so that its programs' dtype tables load: names only, outside ALL (no
# argument, no op of pypto takes them: from_torch refuses their torch dtypes)
DT_UINT16 = DataType("uint16", torch.uint16, 2, "uint16_t")
DT_UINT32 = DataType("uint32", torch.uint32, 4, "uint32_t")
DT_UINT64 = DataType("uint64", torch.uint64, 8, "uint64_t")

_BY_TORCH = {d.torch_dtype: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL} | {SHORT_NAMES[d.name]: d for d in ALL}


def from_torch(dt: torch.dtype) -> DataType:
    try:
        return _BY_TORCH[dt]
    except KeyError:
        from .errors import DTypeError
        raise DTypeError(f"torch dtype {dt} has no pypto equivalent; supported: "
                         + ", ".join(d.name for d in ALL)) from None


def to_dtype(x) -> DataType:
    """Accept a DataType, a torch.dtype or a name ('float16', 'f16')."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, torch.dtype):
        return from_torch(x)
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    from .errors import DTypeError
    raise DTypeError(f"expected a pypto dtype, found {x!r}")


def promote(a: DataType, b: DataType) -> DataType:
    """Type promotion of two tensors, as torch does it."""
    return from_torch(torch.promote_types(a.torch_dtype, b.torch_dtype))


def promote_scalar(t: DataType, scalar) -> DataType:
    """Promotion of a tensor with a Python scalar (torch rules: the tensor's category wins)."""
    if isinstance(scalar, bool):
        return t
    if isinstance(scalar, float) and not t.is_floating:
        return float32
    return t

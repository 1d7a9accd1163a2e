"""The type vocabulary of Professional mode: memory spaces, tile types, tensor and scalar annotations.

``MemorySpace`` names the on-chip buffers the way Ascend programmers do (Vec = the vector core's
unified buffer, Mat = the cube's L1, Left/Right = L0A/L0B, Acc = L0C) and maps them onto Block IR
memory spaces. ``GM`` is global memory: a tile type in GM describes one slot of a workspace group.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pypto import dtypes
from pypto.dtypes import (DT_BF16, DT_BOOL, DT_FP16, DT_FP32, DT_INT8, DT_INT16, DT_INT32,  # noqa: F401
                          DT_INT64, DT_UINT8, DataType)
from pypto.ir.block import CoreType
from pypto.ir.isa import MemSpace, Pipe
from pypto.symbolic import DYNAMIC  # noqa: F401


class _Static:
    """A tensor dim specialised at compile time (its size is part of the compilation signature)."""

    def __repr__(self) -> str:
        return "pl.STATIC"


STATIC = _Static()


class MemorySpace(str, Enum):
    Vec = "Vec"
    Mat = "Mat"
    Left = "Left"
    Right = "Right"
    Acc = "Acc"
    GM = "GM"

    def __str__(self) -> str:
        return self.value

    @property
    def ir_space(self) -> MemSpace:
        return _IR_SPACE[self]

    @property
    def core(self) -> CoreType | None:
        """The core type whose buffer this is (None for GM, which both cores reach)."""
        return _CORE_OF[self]


_IR_SPACE = {MemorySpace.Vec: MemSpace.UB, MemorySpace.Mat: MemSpace.L1, MemorySpace.Left: MemSpace.L0A,
             MemorySpace.Right: MemSpace.L0B, MemorySpace.Acc: MemSpace.L0C, MemorySpace.GM: MemSpace.GM}
_CORE_OF = {MemorySpace.Vec: CoreType.AIV, MemorySpace.Mat: CoreType.AIC, MemorySpace.Left: CoreType.AIC,
            MemorySpace.Right: CoreType.AIC, MemorySpace.Acc: CoreType.AIC, MemorySpace.GM: None}

# Pipe names as Ascend programmers spell them, for manual synchronisation.
PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 = Pipe.MTE1, Pipe.MTE2, Pipe.MTE3
PIPE_M, PIPE_V, PIPE_FIX, PIPE_S = Pipe.M, Pipe.V, Pipe.FIX, Pipe.S


@dataclass(frozen=True)
class TileType:
    """A tile's static description: ``shape`` (rows, cols), element ``dtype``, ``target_memory``, and
    an optional static ``valid_shape`` (tails can also be set per use, see ``Tile.with_valid``)."""
    shape: tuple
    dtype: DataType
    target_memory: MemorySpace = MemorySpace.Vec
    valid_shape: tuple | None = None
    layout: str = "ND"

    def __init__(self, shape, dtype, target_memory=MemorySpace.Vec, valid_shape=None, layout="ND"):
        shape = tuple(shape)
        if len(shape) == 1:
            shape = (1, shape[0])
        if len(shape) != 2 or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"a tile shape is two positive ints (rows, cols), found {list(shape)}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.to_dtype(dtype))
        object.__setattr__(self, "target_memory", MemorySpace(target_memory))
        object.__setattr__(self, "valid_shape", tuple(valid_shape) if valid_shape is not None else None)
        object.__setattr__(self, "layout", layout)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize


@dataclass(frozen=True)
class TensorAnnotation:
    """``pl.Tensor[[dims...], dtype]``: a GM tensor parameter; ``pl.DYNAMIC`` dims are run-time sizes."""
    shape: tuple
    dtype: DataType | None


class Tensor:
    """Annotation factory: ``pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP16]``."""

    def __class_getitem__(cls, item) -> TensorAnnotation:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("annotate a tensor parameter as pl.Tensor[[dims...], dtype]")
        shape, dt = item
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
        return TensorAnnotation(shape, dtypes.to_dtype(dt) if dt is not None else None)


@dataclass(frozen=True)
class ScalarAnnotation:
    """``pl.Scalar[pl.DT_INT32]``: a run-time integer argument (a Block IR scalar parameter)."""
    dtype: DataType


class Scalar:
    def __class_getitem__(cls, dt) -> ScalarAnnotation:
        dt = dtypes.to_dtype(dt)
        if not dt.is_integer:
            raise TypeError("run-time scalars are integers; pass floats as compile-time constants")
        return ScalarAnnotation(dt)


def const_key(v):
    """A constant argument as part of a kernel's signature key: itself when hashable, else its repr."""
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)

"""Professional mode (``import pypto_pro.language as pl``): kernels whose buffers, addresses, multi-core
split and pipeline depth the author places, parsed (never traced) from Python into pypto's Block IR;
the compiler inserts synchronisation, unrolls double buffering and pipelines stages.
"""
from pypto.dtypes import (DT_BF16, DT_BOOL, DT_FP16, DT_FP32, DT_INT8, DT_INT16, DT_INT32,  # noqa: F401
                          DT_INT64, DT_UINT8)
from pypto.ir.isa import Pipe  # noqa: F401
from pypto.symbolic import DYNAMIC  # noqa: F401

from . import control as _control, memory as _memory, ops as _ops  # noqa: F401  (register the DSL)
from .dsl import REGISTRY as _REGISTRY
from .errors import LaunchError, MemoryPlanError, ParseError, ProError, SyncError  # noqa: F401
from .jit import ProKernel, jit  # noqa: F401
from .pipeline import PipelineConfig  # noqa: F401
from .system import system  # noqa: F401
from .tiling_key import TilingKey  # noqa: F401
from .types import (PIPE_FIX, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_S, PIPE_V,  # noqa: F401
                    STATIC, MemorySpace, Scalar, Tensor, TileType)

globals().update({name: fn for name, fn in _REGISTRY.items() if name not in ("min", "max", "range")})
range = _REGISTRY["range"]
min = _REGISTRY["min"]
max = _REGISTRY["max"]

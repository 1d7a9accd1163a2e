"""pypto: a tile-centric tensor compiler for AI accelerators (public API, re-exported)."""
from .dtypes import (DataType, float16, bfloat16, float32, int8, int16, int32, int64, uint8, bool_, half,
                     DT_FP16, DT_BF16, DT_FP32, DT_INT8, DT_INT16, DT_INT32, DT_INT64, DT_UINT8, DT_BOOL)
from .symbolic import DYNAMIC, dynamic, floordiv, ceildiv
from .errors import (PyptoError, ShapeError, DTypeError, TypeMismatchError, SymbolicError, TilingError,
                     CompileError, SimError, BackendUnavailableError, UnsupportedOpError, NoSuchMethodError,
                     IndexOutOfRangeError)
from .machine import set_machine, get_machine, load_machine, MachineSpec
from .backends import set_backend, get_backend
from .frontend.tensor import Tensor, TensorSpec
from .frontend.jit import jit, JitFunction
from .runtime.report import last_report
from .frontend.control import loop
from .frontend.api import *  # noqa: F401,F403  the traced op functions
from .frontend.api import min, max, view, assemble, getitem, setitem  # min/max: torch's on tensors, on sizes too
from .creation import randn, rand, zeros, ones, full, from_torch  # concrete outside a trace, traced inside
from .nn import Module, Parameter
from .frontend.hints import set_vec_tile_shapes, set_cube_tile_shapes, get_vec_tile_shapes, get_cube_tile_shapes
from .ops import load_all as _load_ops

_load_ops()

"""pypto: a tile-centric tensor compiler for AI accelerators (public API, re-exported).

``import pypto`` loads only the errors, the dtypes (and so torch, whose tensors the API takes) and the
backend table. Every other public name — ``pypto.jit``, ``pypto.Tensor``, the op functions,
``pypto.nn``, ``pypto.DYNAMIC`` (sympy) — is imported on first use by the module ``__getattr__`` below
and then kept as an ordinary attribute, so ``pypto.<name>`` and ``from pypto import <name>`` work as
if everything were imported up front (tests/test_import.py checks both, and what an import loads).
"""
import importlib as _importlib
from pathlib import Path as _Path

from .dtypes import (DataType, float16, bfloat16, float32, int8, int16, int32, int64, uint8, bool_, half,
                     DT_FP16, DT_BF16, DT_FP32, DT_INT8, DT_INT16, DT_INT32, DT_INT64, DT_UINT8, DT_BOOL,
                     DT_UINT16, DT_UINT32, DT_UINT64)
from .errors import (PyptoError, ShapeError, DTypeError, TypeMismatchError, SymbolicError, TilingError,
                     CompileError, SimError, BackendUnavailableError, UnsupportedOpError, NoSuchMethodError,
                     IndexOutOfRangeError)
from .backends import set_backend, get_backend

# name -> the module that defines it (a name not listed is looked up in frontend.api, the op functions)
_LAZY = {
    **dict.fromkeys(("DYNAMIC", "dynamic", "floordiv", "ceildiv"), ".symbolic"),
    **dict.fromkeys(("set_machine", "get_machine", "load_machine", "MachineSpec"), ".machine"),
    **dict.fromkeys(("Tensor", "TensorSpec"), ".frontend.tensor"),
    "tensor": ".frontend.tensor",
    **dict.fromkeys(("jit", "JitFunction"), ".frontend.jit"),
    "last_report": ".runtime.report",
    **dict.fromkeys(("loop", "item", "cond", "is_loop_begin", "is_loop_end"), ".frontend.control"),
    # min/max: torch's on tensors, on sizes too; zeros/ones/full: creation's (concrete outside a trace)
    **dict.fromkeys(("min", "max", "view", "assemble", "getitem", "setitem"), ".frontend.api"),
    **dict.fromkeys(("randn", "rand", "zeros", "ones", "full", "from_torch"), ".creation"),
    **dict.fromkeys(("Module", "Parameter"), ".nn"),
    # CANN PyPTO's names (frontend/cann.py: what pypto does not model is accepted and recorded as ignored)
    **dict.fromkeys(("RunMode", "options", "set_options", "set_pass_options", "set_host_options",
                     "set_codegen_options", "set_runtime_options", "set_verify_options", "set_debug_options",
                     "get_pass_options", "get_host_options", "get_codegen_options", "get_runtime_options",
                     "get_verify_options", "get_debug_options", "set_matrix_size", "experimental"),
                    ".frontend.cann"),
    **dict.fromkeys(("set_vec_tile_shapes", "set_cube_tile_shapes", "get_vec_tile_shapes",
                     "get_cube_tile_shapes"), ".frontend.hints"),
}
_HERE = _Path(__file__).resolve().parent


def _is_subpackage(name: str) -> bool:
    return name.isidentifier() and ((_HERE / name / "__init__.py").is_file() or (_HERE / f"{name}.py").is_file())


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name], __name__), name)
    elif _is_subpackage(name):
        value = _importlib.import_module(f".{name}", __name__)
    else:
        api = _importlib.import_module(".frontend.api", __name__)
        if name.startswith("_") or not hasattr(api, name):
            raise AttributeError(f"module 'pypto' has no attribute '{name}'")
        value = getattr(api, name)
    globals()[name] = value
    return value


def __dir__():
    api = _importlib.import_module(".frontend.api", __name__)
    return sorted(set(globals()) | set(_LAZY) | {n for n in vars(api) if not n.startswith("_")})

"""pypto.tile (``import pypto.tile as pt``): Tile-level kernels — tiles are values, tensors are addressed by
tile views (no pointers, offsets or masks), the compiler places buffers, moves data between memory
levels (GM, L1/L0A/L0B/L0C on the cube, UB on the vector cores) and synchronises pipes and cores.
See pypto/tile/README.md for the API and the lowering."""
import importlib

from ..dtypes import float16, bfloat16, float32, int8, int32, bool_
from . import api as _api
from .api import (Tile, load, store, matmul, transpose, reshape, cast, copy, expand, mean, max, min,
                  full, zeros, ones, full_like, zeros_like, arange, tril, triu, causal_mask, where,
                  softmax, gelu, silu, UnknownNameError)
from .control import program_id, num_programs, range, cdiv
from .kernel import kernel, TileKernel
from ..runtime.report import last_report
from .views import TensorArg, TileGrid, TileView, tile_view

# pt.expand is the registry's op (torch's expand); the lowering module of the same name (pypto/tile/expand.py)
# is loaded now so that importing it later does not rebind pt.expand to the module
_lowering = importlib.import_module(f"{__name__}.expand")
expand = _api.expand
# the registry's ops (pypto/tile/optable.py reads them from pypto.ops): elementwise, comparisons, reductions
globals().update({n: getattr(_api, n) for n in (*_api.ELEMENTWISE, *_api.COMPARES, *_api.REDUCTIONS)})
# old spellings (rowsum, colmax, compare, broadcast_to ...): still work, warn once naming the new one
globals().update({n: getattr(_api, n) for n in _api.DEPRECATED})

__all__ = [n for n in dir() if not n.startswith("_") and n not in _api.DEPRECATED]


def __getattr__(name: str):
    """pt.<name> that does not exist: a pypto error at the user's line, with the closest names."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise _api.unknown_op(name, __all__)

"""pypto.tile (``import pypto.tile as pt``): Tile-level kernels — tiles are values, tensors are addressed by
tile views (no pointers, offsets or masks), the compiler places buffers, moves data between memory
levels (GM, L1/L0A/L0B/L0C on the cube, UB on the vector cores) and synchronises pipes and cores.
See pypto/tile/README.md for the API and the lowering."""
from ..dtypes import float16, bfloat16, float32, int8, int32, bool_
from .api import (Tile, load, store, matmul, transpose, reshape, cast, copy, broadcast_to, add, sub, mul, div, maximum,
                  minimum, pow, exp, log, sqrt, rsqrt, abs, neg, relu, tanh, sigmoid, erf, sin, cos, log1p, expm1,
                  floor, ceil, reciprocal, rowsum, rowmax, rowmin, colsum, colmax, colmin, sum, max, min, mean,
                  full, zeros, ones, full_like, zeros_like, arange, tril, triu, causal_mask, compare, where,
                  softmax, gelu, silu)
from .control import program_id, num_programs, range, cdiv
from .kernel import kernel, TileKernel
from ..runtime.report import last_report
from .views import TensorArg, TileGrid, TileView, tile_view

__all__ = [n for n in dir() if not n.startswith("_")]

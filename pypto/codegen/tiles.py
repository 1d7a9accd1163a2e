"""PTO-ISA C++ types for Block IR tiles and GM tensor views.

Vector tiles (UB) are row-major ``Tile<TileType::Vec, ...>``, except a tile with one valid
column (the [rows, 1] result of a row reduction, the column a TROWEXPAND* reads) or with
columns that are not 32-byte multiples while its rows are: those are column-major (the form
pto-isa's row-expand instructions and alignment rules expect), their columns stored one after
another. An instruction that pto-isa only takes on RowMajor tiles (TADDS, TMULS, ...) works on
such a tile through ``transposed_view_type``: the RowMajor [cols, rows] tile over the same bytes.
A one-column tile whose rows are not a 32-byte multiple (one row, three rows) cannot be ColMajor in
pto-isa and stays RowMajor; a TROWEXPAND<op> reads it through a one-32-byte-block-per-row view that
codegen fills first (``kernel.BlockEmitter.row_blocks``).
L1 tiles feed the cube and use the NZ fractal layout (TLOAD converts from ND GM); L0A / L0B / L0C
use the TileLeft / TileRight / TileAcc aliases of the target.
"""
from __future__ import annotations

from ..ir.block import TileDecl
from ..ir.isa import MemSpace
from ..symbolic import is_static

ALIGN_BYTES = 32


def _valid_arg(valid, full: int) -> str:
    """Template argument of one valid dimension: the static count or DYNAMIC."""
    if is_static(valid):
        return str(int(valid))
    return "DYNAMIC"


def valid_args(t: TileDecl) -> tuple[str, str]:
    vr, vc = t.valid_shape
    return _valid_arg(vr, t.shape[0]), _valid_arg(vc, t.shape[1])


def dynamic_dims(t: TileDecl) -> tuple[bool, bool]:
    vr, vc = t.valid_shape
    return not is_static(vr), not is_static(vc)


def is_col_major(t: TileDecl) -> bool:
    """Whether a UB tile is declared BLayout::ColMajor (see the module docstring)."""
    if MemSpace(t.space) != MemSpace.UB:
        return False
    rows, cols = t.shape
    rows_aligned = (rows * t.dtype.itemsize) % ALIGN_BYTES == 0
    one_column = is_static(t.valid_shape[1]) and int(t.valid_shape[1]) == 1
    return t.layout == "DN" or (rows_aligned and (one_column or (cols * t.dtype.itemsize) % ALIGN_BYTES != 0))


def tile_type(t: TileDecl) -> str:
    """The C++ type of a tile, e.g. ``Tile<TileType::Vec, half, 4, 4096, BLayout::RowMajor, DYNAMIC, 4096>``."""
    rows, cols = t.shape
    vr, vc = valid_args(t)
    el = t.dtype.cpp
    space = MemSpace(t.space)
    if space == MemSpace.UB:
        layout = "BLayout::ColMajor" if is_col_major(t) else "BLayout::RowMajor"
        return f"Tile<TileType::Vec, {el}, {rows}, {cols}, {layout}, {vr}, {vc}>"
    if space == MemSpace.L1:
        return f"Tile<TileType::Mat, {el}, {rows}, {cols}, BLayout::ColMajor, {vr}, {vc}, SLayout::RowMajor>"
    alias = {MemSpace.L0A: "TileLeft", MemSpace.L0B: "TileRight", MemSpace.L0C: "TileAcc"}[space]
    return f"{alias}<{el}, {rows}, {cols}, {vr}, {vc}>"


def transposed_view_type(t: TileDecl) -> str:
    """The RowMajor tile whose element (c, r) is element (r, c) of the ColMajor UB tile ``t``: the same
    bytes (t's columns are its rows), valid [vc, vr]. A tile is ColMajor by the alignment rule only when
    its rows are 32-byte multiples, so the view's rows are too."""
    rows, cols = t.shape
    vr, vc = valid_args(t)
    return f"Tile<TileType::Vec, {t.dtype.cpp}, {cols}, {rows}, BLayout::RowMajor, {vc}, {vr}>"


def scratch_type(dtype, shape) -> str:
    rows, cols = shape
    return f"Tile<TileType::Vec, {dtype.cpp}, {rows}, {cols}>"


def gm_view_type(dtype, transposed: bool) -> str:
    """A GM view whose box shape and row stride are set at run time (see pypto::gm_box)."""
    if transposed:
        return (f"GlobalTensor<{dtype.cpp}, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, 1, DYNAMIC>, "
                f"Layout::DN>")
    return (f"GlobalTensor<{dtype.cpp}, Shape<1, 1, 1, DYNAMIC, DYNAMIC>, Stride<1, 1, 1, DYNAMIC, 1>, "
            f"Layout::ND>")

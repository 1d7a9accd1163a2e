"""The simulator's indexed row moves, MGATHER and MSCATTER (pypto/ir/isa.py): row i of the rows tile is
row ``r0 + idx[i]`` of a 2-D GM tensor, columns ``c0 .. c0 + cols`` (the region's offsets (r0, c0), the
tile's valid cols), ``idx`` the int32 index tile [rows, 1].

What is checked where: the column range against the tensor before the move (``cols_fit_source``, every
run, timing-only ones too); each index against the tensor's rows when the move runs (``execute``: the
functional run has the index values; an index outside is a SimError naming the instruction, and nothing
moves). The race checks of one launch (core.gm_check) do not see these moves: which rows they touch is
data. Timing (``measure``): one DMA descriptor per row, each row rounded up to the burst.
"""
from __future__ import annotations

import numpy as np

from ...errors import IndexOutOfRangeError, SimError
from ...ir import gm_bounds

GATHER, SCATTER = "gather", "scatter"
REGIONS = (GATHER, SCATTER)


def cols_fit_source(cop) -> str:
    """Python source of ``(v, s) -> bool``: the row offset and the columns lie inside a tensor of shape s.
    v: rows tile valid (rows, cols), index tile valid (rows, cols), then the region's offsets (r0, c0)."""
    return "0 <= v[4] <= s[0] and 0 <= v[5] and v[5] + v[1] <= s[1] and v[2] == v[0] and 0 <= v[3] <= 1"


def fit_error(cop, vals, shape) -> SimError:
    r, c, ir, ic, r0, c0 = vals[:6]
    if ir != r or ic > 1:
        why = f"the index tile's valid shape [{ir}, {ic}] is not [{r}, 1] (one index per row)"
    else:
        why = (f"rows from offset {r0}, columns {c0}:{c0 + c}, but {cop.gm_param} has shape {list(shape)}")
    return SimError(f"{cop.op} outside its tensor: {why}\n  in {cop.where()}", loc=cop.loc)


def execute(tv, gm: dict, cop, vals, arrays) -> None:
    t = gm[cop.gm_param]
    r, c, r0, c0 = vals[0], vals[1], vals[4], vals[5]
    rows = tv.tiles[cop.tiles[1].index][:r, 0].numpy().astype(np.int64) + r0
    n = t.shape[0]
    bad = np.nonzero((rows < r0) | (rows >= n))[0]
    if bad.size:
        i = int(bad[0])
        raise IndexOutOfRangeError(gm_bounds.row_index_text(cop.stmt, int(rows[i] - r0), i, n - r0, cop.gm_param))
    g = arrays.get(t)
    tile = tv.raw[cop.tiles[0].index][:r, :c]
    if cop.region == GATHER:
        tile[...] = g[rows, c0:c0 + c]
    else:
        for i in range(r):          # in order: of duplicate indices the last row wins
            g[rows[i], c0:c0 + c] = tile[i]


def measure(cop, issue: int, burst: int, port: float):
    """vals -> the timing tuple of timing.Cost.measure_fn: one descriptor (``issue`` cycles) per row."""
    isz = cop.gm_itemsize
    load = cop.region == GATHER

    def m(vals):
        rows, cols = vals[0], vals[1]
        nbytes = rows * (-(-cols * isz // burst)) * burst
        return (issue * max(rows, 1), nbytes, port, 0, 0.0, rows * cols * isz if load else 0)
    return m


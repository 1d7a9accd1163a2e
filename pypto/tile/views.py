"""Tensors inside a kernel and their tile views: no pointers, no offsets, no masks.

``Q`` (a kernel's tensor argument) ``Q[b, h]`` fixes leading dims; ``Q.tile((BM, D))`` is the grid of
[BM, D] tiles over its last two dims and ``Q.tile((BM, D))[i, 0]`` the tile at tile coordinates
(i, 0) — element offsets (i * BM, 0). ``pt.tile_view(Q, (BM, D), (i, 0))`` says the same. A tile that
runs past the end of the tensor is a tail: its valid shape is what lies inside (never less than 0), and
only that part is ever read or written.
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..errors import ShapeError, TypeMismatchError
from .exprs import smax, smin
from .ir import GMTensor, GMView


def _is_index(x) -> bool:
    return isinstance(x, (int, sympy.Expr)) and not isinstance(x, bool)


def extent(tile: int, size, offset):
    """The valid extent of a tile of ``tile`` elements at ``offset`` in a dim of ``size``."""
    if isinstance(size, int) and isinstance(offset, int):
        return max(0, min(tile, size - offset))
    return smax(0, smin(tile, sympy.sympify(size) - offset))


def _clamp(offset, size):
    """A tile past the end of the tensor starts at its end (and has no valid part): never read."""
    if isinstance(offset, int) and isinstance(size, int):
        return min(offset, size)
    return offset if offset == 0 else smin(offset, size)


class TensorArg:
    """A GM tensor argument of a kernel (or the part of it left after fixing leading indices)."""

    def __init__(self, gm: GMTensor, lead: tuple = ()):
        self._gm, self._lead = gm, tuple(lead)

    @property
    def name(self) -> str:
        return self._gm.name

    @property
    def dtype(self):
        return self._gm.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self._gm.shape[len(self._lead):])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, dim: int):
        return self.shape[dim]

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        for x in idx:
            if not _is_index(x):
                raise TypeMismatchError(f"{self.name}[...]: index leading dims with integers or program ids / loop "
                                        f"indices, found {x!r}",
                                        hint="address tiles with .tile((rows, cols))[i, j] or pt.tile_view")
        if len(idx) >= self.ndim:
            raise ShapeError(f"{self.name}[...]: {len(idx)} indices leave no tile dims of the "
                             f"{self.ndim}-d tensor {self.name}{list(self.shape)}",
                             hint="fix leading dims only (e.g. Q[b, h] of a [B, H, S, D] tensor)")
        return TensorArg(self._gm, self._lead + idx)

    def tile(self, shape) -> "TileGrid":
        return TileGrid(self, shape)

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


class TileGrid:
    """The tiles of one shape over a tensor's last two dims (its last dim for a 1-d tensor)."""

    def __init__(self, tensor: TensorArg, shape):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        nd = tensor.ndim
        if nd >= 2 and len(shape) == nd and all(s == 1 for s in shape[:-2]):
            shape = shape[-2:]
        want = 1 if nd == 1 else 2
        if len(shape) != want or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
            raise ShapeError(f"{tensor.name}.tile({shape}): a tile of the {nd}-d tensor {tensor.name}"
                             f"{list(tensor.shape)} takes {want} positive int extent(s) for its last "
                             f"{'dim' if want == 1 else 'two dims'}")
        self.tensor = tensor
        self.tile_shape = (1, shape[0]) if nd == 1 else shape

    @property
    def shape(self) -> tuple:
        """Number of tiles along each tiled dim (ceil division: the last may be a tail)."""
        dims = self.tensor.shape[-1:] if self.tensor.ndim == 1 else self.tensor.shape[-2:]
        tiles = self.tile_shape[-len(dims):]
        return tuple(sym.ceildiv(d, t) for d, t in zip(dims, tiles))

    def __getitem__(self, coords) -> "TileView":
        coords = coords if isinstance(coords, tuple) else (coords,)
        t = self.tensor
        nd = t.ndim
        tiled = 1 if nd == 1 else 2
        if len(coords) == nd and nd > tiled:
            lead, coords = coords[:-tiled], coords[-tiled:]
            t = t[lead]
        if len(coords) != tiled:
            raise ShapeError(f"{t.name}.tile(...)[...]: expected {tiled} tile coordinate(s) for the "
                             f"{t.ndim}-d tensor {t.name}{list(t.shape)} (or {nd} with the leading indices), "
                             f"found {len(coords)}")
        for c in coords:
            if not _is_index(c):
                raise TypeMismatchError(f"tile coordinates are integers, program ids or loop indices, found {c!r}")
        rows, cols = self.tile_shape
        gm = t._gm
        if nd == 1:
            off = _clamp(sym.simplify(sympy.sympify(coords[0]) * cols), gm.shape[-1])
            return TileView(gm, t._lead + (off,), (1, cols), (1, extent(cols, gm.shape[-1], off)))
        r0 = _clamp(sym.simplify(sympy.sympify(coords[0]) * rows), gm.shape[-2])
        c0 = _clamp(sym.simplify(sympy.sympify(coords[1]) * cols), gm.shape[-1])
        valid = (extent(rows, gm.shape[-2], r0), extent(cols, gm.shape[-1], c0))
        return TileView(gm, t._lead + (r0, c0), (rows, cols), valid)


class TileView:
    """One tile of a GM tensor: element offsets in every dim, the tile shape and its valid part."""

    def __init__(self, gm: GMTensor, offsets: tuple, shape: tuple, valid: tuple):
        self.gm, self.offsets, self.shape, self.valid = gm, tuple(offsets), tuple(shape), tuple(valid)

    @property
    def dtype(self):
        return self.gm.dtype

    @property
    def tensor(self) -> str:
        return self.gm.name

    def region(self) -> GMView:
        return GMView(self.gm.name, self.offsets, self.shape, self.valid)

    def __repr__(self) -> str:
        return f"TileView({self.region()})"


def tile_view(tensor: TensorArg, shape, coords) -> TileView:
    """``pt.tile_view(Q, (BM, D), (i, 0))`` = ``Q.tile((BM, D))[i, 0]``."""
    if not isinstance(tensor, TensorArg):
        raise TypeMismatchError(f"pt.tile_view: expected a kernel tensor argument, found {type(tensor).__name__}")
    coords = coords if isinstance(coords, tuple) else tuple(coords) if isinstance(coords, list) else (coords,)
    return TileGrid(tensor, shape)[coords]

"""Shared shape/dtype inference helpers: broadcasting, dim normalisation, reductions (symbolic)."""
from __future__ import annotations

from .. import symbolic as sym
from ..errors import ShapeError


def broadcast_shapes(*shapes) -> tuple:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        res = 1
        for d in dims:
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(res, int) and res == 1:
                res = d
                continue
            eq = sym.equal(res, d)
            if eq is not True:
                raise ShapeError(
                    f"cannot broadcast shapes {' and '.join(fmt_shape(s) for s in shapes)}: "
                    f"dimension {i - rank} is {res} in one and {d} in another",
                    hint="sizes must be equal or 1" + ("; dynamic sizes must be the same symbol" if eq is None else ""))
        out.append(res)
    return tuple(out)


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def norm_dim(dim: int, rank: int, what: str = "dim") -> int:
    if not isinstance(dim, int):
        raise ShapeError(f"{what} must be an int, found {dim!r}")
    if not -rank <= dim < max(rank, 1):
        raise ShapeError(f"{what} {dim} is out of range for a tensor of rank {rank} "
                         f"(expected {-rank} <= {what} < {rank})")
    return dim % rank if rank else 0


def norm_dims(dims, rank: int) -> tuple[int, ...]:
    if dims is None:
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({norm_dim(d, rank) for d in dims}))
    return out


def reduced_shape(shape, dims, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)

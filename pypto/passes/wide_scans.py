"""Scans and arg-reductions along a dim too long for one tile, rewritten blockwise (canonicalize rules).

A tile holds the whole scanned dim of ``cumsum`` and ``argmax``; along a longer (static) dim the dim
is cut into blocks of ``BLOCK`` elements (the last zero / -inf padded), the block results combined:

    cumsum:  c = cumsum within each block;  out = c + (exclusive cumsum of the blocks' last values)
    argmax:  the block holding the first maximum (argmax of the blocks' maxima), then the index
             inside that block (picked from the per-block argmaxes with a one-hot sum)

Both are exact: cumsum accumulates in the op's accumulation dtype (fp32 for fp16/bf16, int64 for
integers), the carries included; argmax keeps torch's first-occurrence rule because blocks and the
indices inside them are both searched in order.
"""
from __future__ import annotations

from .. import dtypes
from ..frontend import api as P

LIMIT = 2048        # longest scanned dim kept whole
BLOCK = 1024        # block length of a longer one
# along rows (the dim is not the innermost one), a tile is an aligned block of columns wide too
ROW_LIMIT = 512
ROW_BLOCK = 256


def _inner(shape, dim: int) -> bool:
    """``dim`` is the innermost dim of the shape that is not of size 1."""
    return all(isinstance(d, int) and d == 1 for d in shape[dim + 1:])


def _block(x, dim: int) -> int:
    return BLOCK if _inner(x.shape, dim) else ROW_BLOCK


def _split(x, dim: int, fill, block: int):
    """x [..., N, ...] padded to nb * block along ``dim`` and viewed as [..., nb, block, ...]."""
    n = x.shape[dim]
    nb = -(-n // block)
    if nb * block != n:
        pad = [0, 0] * (x.ndim - 1 - dim) + [0, nb * block - n]
        x = P.pad(x, tuple(pad), value=fill)
    return P.reshape(x, tuple(x.shape[:dim]) + (nb, block) + tuple(x.shape[dim + 1:])), nb


def _is_wide(shape, dim: int) -> bool:
    n = shape[dim]
    return isinstance(n, int) and n > (LIMIT if _inner(shape, dim) else ROW_LIMIT)


def blocked_cumsum(x, dim: int, acc_dtype):
    """cumsum of x along a wide ``dim``, in ``acc_dtype``."""
    n = x.shape[dim]
    block = _block(x, dim)
    x = P.cast(x, acc_dtype) if x.dtype != acc_dtype else x
    xs, nb = _split(x, dim, 0, block)
    within = P.emit("cumsum", [xs], {"dim": dim + 1})
    last = P.view(within, tuple(xs.shape[:dim + 1]) + (1,) + tuple(xs.shape[dim + 2:]),
                  (0,) * (dim + 1) + (block - 1,) + (0,) * (xs.ndim - dim - 2))
    squeezed = tuple(x.shape[:dim]) + (nb,) + tuple(x.shape[dim + 1:])
    if _is_wide(squeezed, dim):   # the blocks' totals squeezed to [..., nb, ...] (a contiguous copy), then blockwise
        totals = P.reshape(last, squeezed)
        carried = P.reshape(blocked_cumsum(totals, dim, acc_dtype), tuple(last.shape))
    else:
        carried = P.emit("cumsum", [last], {"dim": dim})
    out = P.reshape(within + (carried - last), tuple(x.shape[:dim]) + (nb * block,) + tuple(x.shape[dim + 1:]))
    if nb * block != n:
        out = P.view(out, tuple(x.shape), (0,) * x.ndim)
    return out


def cumsum_rule(g, nid, ins):
    x = ins[0]
    dim = g.node(nid)["attrs"]["dim"]
    if not _is_wide(x.shape, dim):
        return None
    out_dt = g.info(nid).dtype
    acc = dtypes.float32 if out_dt in (dtypes.float16, dtypes.bfloat16) else out_dt
    out = blocked_cumsum(x, dim, acc)
    return out if out.dtype == out_dt else P.cast(out, out_dt)


def blocked_argmax(x, dim: int, keepdim: bool):
    """argmax of x along a wide ``dim`` (int64 indices); None when the dim fits one tile."""
    if not _is_wide(x.shape, dim):
        return None
    block = _block(x, dim)
    lowest = float("-inf") if x.dtype.is_floating else -(2 ** (8 * x.dtype.itemsize - 1))
    xs, nb = _split(x, dim, lowest, block)
    block_max = P.amax(xs, dim + 1, keepdim=True)                       # [..., nb, 1, ...]
    inside = P.emit("argmax", [xs], {"dim": dim + 1, "keepdim": True})  # [..., nb, 1, ...]
    squeezed = tuple(x.shape[:dim]) + (nb,) + tuple(x.shape[dim + 1:])
    if _is_wide(squeezed, dim):
        maxima = P.reshape(block_max, squeezed)
        best = P.reshape(blocked_argmax(maxima, dim, True), tuple(x.shape[:dim]) + (1, 1) + tuple(x.shape[dim + 1:]))
    else:
        best = P.emit("argmax", [block_max], {"dim": dim, "keepdim": True})   # [..., 1, 1, ...]
    ids = P.reshape(P.arange(0, nb, 1, dtype=dtypes.int64), (1,) * dim + (nb,) + (1,) * (xs.ndim - dim - 1))
    picked = P.sum(P.where(P.eq(ids, best), inside, 0), dim, keepdim=True)
    out = best * block + picked                                          # [..., 1, 1, ...]
    shape = tuple(x.shape[:dim]) + ((1,) if keepdim else ()) + tuple(x.shape[dim + 1:])
    return P.reshape(out, shape)


def argmax_rule(g, nid, ins):
    a = g.node(nid)["attrs"]
    if a.get("dim") is None:
        return None
    return blocked_argmax(ins[0], a["dim"], a.get("keepdim", False))

"""Where materialised values live in GM: buffers and accesses (boxes of buffers).

An ``Access`` is how a tensor value is read from GM: a box (``offsets``/``extents`` per buffer dim)
of a buffer, and for each dim of the value the buffer dim it runs along (``vdims``; None for a
size-1 dim or a broadcast one — ``expand`` reads the same data again). Views never move data:
``view`` narrows the box, ``expand`` adds broadcast dims, ``transpose``/``permute`` reorder
``vdims``, a size-1 reshape re-maps them; a general ``reshape`` reinterprets a contiguous box as a
new buffer (``Buffer.view_of``) and needs a copy otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .. import symbolic as sym
from ..ir.execution import Buffer
from .iterspace import is_one
from .exprs import same


@dataclass
class Access:
    buffer: str
    shape: tuple          # the buffer's shape
    offsets: tuple        # box offset per buffer dim
    extents: tuple        # box extent per buffer dim
    vdims: tuple          # per value dim: buffer dim index, or None (size 1 / broadcast)

    @property
    def is_full(self) -> bool:
        return all(o == 0 for o in self.offsets) and all(same(e, s)
                                                         for e, s in zip(self.extents, self.shape)) \
            and list(self.vdims) == list(range(len(self.shape)))


def full_access(buf: Buffer) -> Access:
    r = len(buf.shape)
    return Access(buf.name, tuple(buf.shape), (0,) * r, tuple(buf.shape), tuple(range(r)))


def _add(a, b):
    return sym.simplify(sympy.sympify(a) + b) if not (isinstance(a, int) and isinstance(b, int)) else a + b


def view_access(acc: Access, offsets, shape) -> Access:
    offs, ext = list(acc.offsets), list(acc.extents)
    for j, (o, s) in enumerate(zip(offsets, shape)):
        b = acc.vdims[j]
        if b is None:
            continue
        offs[b] = _add(offs[b], o)
        ext[b] = s
    # a view narrowing a broadcast dim keeps reading the broadcast data
    return Access(acc.buffer, acc.shape, tuple(offs), tuple(ext), acc.vdims)


def expand_access(acc: Access, in_shape, out_shape) -> Access:
    lead = len(out_shape) - len(in_shape)
    vd = [None] * lead + [None if (is_one(d) and not is_one(t)) else v
                          for d, t, v in zip(in_shape, out_shape[lead:], acc.vdims)]
    return Access(acc.buffer, acc.shape, acc.offsets, acc.extents, tuple(vd))


def permute_access(acc: Access, perm) -> Access:
    return Access(acc.buffer, acc.shape, acc.offsets, acc.extents, tuple(acc.vdims[p] for p in perm))


def unit_reshape_access(acc: Access, in_shape, out_shape) -> Access:
    """A reshape that only adds/removes size-1 dims: the non-unit dims keep their buffer dims."""
    src = [v for d, v in zip(in_shape, acc.vdims) if not is_one(d)]
    it = iter(src)
    return Access(acc.buffer, acc.shape, acc.offsets, acc.extents,
                  tuple(None if is_one(d) else next(it) for d in out_shape))


def contiguous_start(acc: Access):
    """The element offset of the box in its buffer when the box is one contiguous run read in
    order (so it can be reinterpreted with another shape), else None."""
    used = [v for v in acc.vdims if v is not None]
    if used != sorted(used) or len(set(used)) != len(used):
        return None
    # value dims that broadcast (None with size > 1) cannot be reinterpreted
    r = len(acc.shape)
    first = next((b for b in range(r) if not is_one(acc.extents[b])), r)
    for b in range(first + 1, r):
        if acc.offsets[b] != 0 or not same(acc.extents[b], acc.shape[b]):
            return None
    start, stride = 0, 1
    for b in reversed(range(r)):
        start = _add(start, sympy.sympify(acc.offsets[b]) * stride) if acc.offsets[b] != 0 else start
        stride = stride * acc.shape[b]
    return sym.simplify(start) if not isinstance(start, int) else start


def numel(shape):
    n = 1
    for d in shape:
        n = n * d
    return sym.simplify(n) if not isinstance(n, int) else n

"""GM regions as boxes: every region a task reads or writes becomes a box (rows, cols) of its *base*
buffer seen as a 2-D array [prod(leading dims), last dim]. A box of an N-d buffer is bounded over its
leading dims. A region of a view (``Buffer.view_of``) whose rows are rows of its base (same row
length and item size, starting at a row: a block of rows chosen by a loop variable, one copy of a
multi-buffered workspace) is the same box shifted to the view's first row; a region of any other
view becomes the base rows its bytes span. All conservative (they may cover more than the region,
never less). A box is the tuple
(base, r0, r1, c0, c1), half-open."""
from __future__ import annotations

import math


class Geometry:
    """Boxes of the program's buffers in base-buffer coordinates (``bufs``: a buffers.GMBuffers)."""

    def __init__(self, bufs):
        self.bufs = bufs
        self.shapes = bufs.shapes
        self.base_rc = {}
        for name in self.shapes:
            base = bufs.base_of(name)
            shape = self.shapes[base]
            cols = shape[-1] if len(shape) else 1
            rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
            self.base_rc[base] = (rows, cols, bufs.itemsize[base])

    def box(self, name: str, offsets, extents, env: dict):
        """(base, r0, r1, c0, c1) or None for an empty region; ``env`` gives loop-dependent view offsets."""
        if any(e <= 0 for e in extents):
            return None
        base, byte_off = self.bufs.location(name, env)
        isz = self.bufs.itemsize[name]
        shape = self.shapes[name]
        row0 = self._first_row(name, base, byte_off)
        if row0 is not None:
            # the base itself, or a view whose rows are rows of its base (a loop's block of rows, a
            # multi-buffered workspace's copy): the exact box, shifted by the view's first row
            if len(shape) <= 1:
                o, e = (offsets[0], extents[0]) if shape else (0, 1)
                return (base, row0, row0 + 1, o, o + e)
            stride, r0, r1 = 1, 0, 0
            for d in range(len(shape) - 2, -1, -1):
                r0 += offsets[d] * stride
                r1 += (offsets[d] + extents[d] - 1) * stride
                stride *= shape[d]
            return (base, row0 + r0, row0 + r1 + 1, offsets[-1], offsets[-1] + extents[-1])
        # any other view: the base rows its bytes span (whole rows unless it stays within one)
        stride, fs, fe = 1, 0, 0
        for d in range(len(shape) - 1, -1, -1):
            fs += offsets[d] * stride
            fe += (offsets[d] + extents[d] - 1) * stride
            stride *= shape[d]
        _, cols, base_isz = self.base_rc[base]
        es = (byte_off + fs * isz) // base_isz
        ee = -(-(byte_off + (fe + 1) * isz) // base_isz)
        rs, re = es // cols, (ee - 1) // cols + 1
        if re - rs == 1:
            return (base, rs, re, es % cols, (ee - 1) % cols + 1)
        return (base, rs, re, 0, cols)

    def _first_row(self, name: str, base: str, byte_off: int):
        """The base row where buffer ``name`` starts when its rows are rows of its base (the base
        itself, or a view with the base's row length and item size starting at a row); else None."""
        if base == name:
            return 0
        _, cols, base_isz = self.base_rc[base]
        shape = self.shapes[name]
        if not shape or shape[-1] != cols or self.bufs.itemsize[name] != base_isz:
            return None
        row, rem = divmod(byte_off, cols * base_isz)
        return None if rem else row

    def access_box(self, name: str, offsets, extents, env: dict):
        """The exact base box of an instruction's GM access (extent 1 in leading dims), or None when the
        buffer is a view whose rows do not line up with its base's (then no exact box exists)."""
        base, byte_off = self.bufs.location(name, env)
        if self._first_row(name, base, byte_off) is None:
            return None
        return self.box(name, offsets, extents, env)

    def whole(self, name: str, env: dict):
        shape = self.shapes[name]
        return self.box(name, (0,) * len(shape), tuple(shape), env)

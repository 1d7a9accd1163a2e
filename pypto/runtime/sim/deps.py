"""Task dependencies from the GM regions tasks read and write (RAW, WAR, WAW in program order).

Every region becomes a box (rows, cols) of its *base* buffer seen as a 2-D array
[prod(leading dims), last dim]: a box of an N-d buffer is bounded over its leading dims, and a region
of a view (``Buffer.view_of``) becomes the base rows its bytes span — both conservative (an extra
dependency, never a missing one). A grid over each base buffer keeps the lookups short; a write that
covers earlier accesses replaces them (they are ordered before it, so later tasks that overlap them
also overlap the write).
"""
from __future__ import annotations

import math

GRID = 32


class Geometry:
    """Evaluated shapes of the program's buffers and where views sit in their bases.
    ``shapes``: name -> shape; ``itemsize``: name -> bytes; ``views``: name -> (base, byte offset)."""

    def __init__(self, shapes: dict, itemsize: dict, views: dict):
        self.shapes = shapes
        self.info = {n: (*views.get(n, (n, 0)), itemsize[n]) for n in shapes}
        self.base_rc = {}
        for name in shapes:
            base = self.info[name][0]
            shape = shapes[base]
            cols = shape[-1] if len(shape) else 1
            rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
            self.base_rc[base] = (rows, cols, itemsize[base])

    def box(self, name: str, offsets, extents):
        """(base, r0, r1, c0, c1) or None for an empty region."""
        if any(e <= 0 for e in extents):
            return None
        base, byte_off, isz = self.info[name]
        shape = self.shapes[name]
        if base == name:
            if len(shape) <= 1:
                o, e = (offsets[0], extents[0]) if shape else (0, 1)
                return (base, 0, 1, o, o + e)
            stride, r0, r1 = 1, 0, 0
            for d in range(len(shape) - 2, -1, -1):
                r0 += offsets[d] * stride
                r1 += (offsets[d] + extents[d] - 1) * stride
                stride *= shape[d]
            return (base, r0, r1 + 1, offsets[-1], offsets[-1] + extents[-1])
        # a view: the base rows its bytes span
        stride, fs, fe = 1, 0, 0
        for d in range(len(shape) - 1, -1, -1):
            fs += offsets[d] * stride
            fe += (offsets[d] + extents[d] - 1) * stride
            stride *= shape[d]
        rows, cols, base_isz = self.base_rc[base]
        es = (byte_off + fs * isz) // base_isz
        ee = -(-(byte_off + (fe + 1) * isz) // base_isz)
        rs, re = es // cols, (ee - 1) // cols + 1
        if re - rs == 1:
            return (base, rs, re, es % cols, (ee - 1) % cols + 1)
        return (base, rs, re, 0, cols)

    def whole(self, name: str):
        shape = self.shapes[name]
        return self.box(name, (0,) * len(shape), tuple(shape))


def _overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]


def _covers(a, b) -> bool:
    return a[1] <= b[1] and b[2] <= a[2] and a[3] <= b[3] and b[4] <= a[4]


class DependencyTracker:
    def __init__(self, geometry: Geometry):
        self.geo = geometry
        self.grids: dict = {}       # base -> {(cell_r, cell_c): [(box, tid, is_write)]}
        self.cell: dict = {}

    def _cells(self, box):
        base = box[0]
        if base not in self.cell:
            rows, cols, _ = self.geo.base_rc[base]
            self.cell[base] = (max(1, -(-rows // GRID)), max(1, -(-cols // GRID)))
            self.grids[base] = {}
        cr, cc = self.cell[base]
        grid = self.grids[base]
        for r in range(box[1] // cr, (box[2] - 1) // cr + 1):
            for c in range(box[3] // cc, (box[4] - 1) // cc + 1):
                yield grid, (r, c)

    def add(self, tid: int, reads: list, writes: list) -> set:
        """Record a task's accesses (boxes); returns the ids of earlier tasks it must follow."""
        deps = set()
        for box in reads:
            for grid, key in self._cells(box):
                for other, otid, w in grid.get(key, ()):
                    if w and otid != tid and _overlap(box, other):
                        deps.add(otid)
        for box in writes:
            for grid, key in self._cells(box):
                for other, otid, w in grid.get(key, ()):
                    if otid != tid and _overlap(box, other):
                        deps.add(otid)
        for box in writes:
            for grid, key in self._cells(box):
                lst = grid.get(key)
                if lst:
                    lst[:] = [e for e in lst if not _covers(box, e[0])]
                grid.setdefault(key, []).append((box, tid, True))
        for box in reads:
            for grid, key in self._cells(box):
                grid.setdefault(key, []).append((box, tid, False))
        return deps

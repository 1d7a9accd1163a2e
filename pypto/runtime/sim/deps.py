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

WIDE_CELLS = 64      # a box over more grid cells than this is kept in the per-buffer "wide" list


class Geometry:
    """Boxes of the program's buffers in base-buffer coordinates (``bufs``: a buffers.GMBuffers)."""

    def __init__(self, bufs):
        self.bufs = bufs
        self.shapes = bufs.shapes
        self.base_rc = {}
        for name in self.shapes:
            base = bufs.location(name, {})[0] if not bufs.is_dynamic(name) else bufs.views[name][0]
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

    def access_box(self, name: str, offsets, extents, env: dict):
        """The exact base box of an instruction's GM access (extent 1 in leading dims), or None when the
        buffer is a view whose rows do not line up with its base's (then no exact box exists)."""
        base, byte_off = self.bufs.location(name, env)
        shape = self.shapes[name]
        if base != name:
            rows, cols, base_isz = self.base_rc[base]
            if (not shape or shape[-1] != cols or self.bufs.itemsize[name] != base_isz
                    or byte_off % (cols * base_isz)):
                return None
        box = self.box(name, offsets, extents, env)
        return box

    def whole(self, name: str, env: dict):
        shape = self.shapes[name]
        return self.box(name, (0,) * len(shape), tuple(shape), env)


def _overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]


def _covers(a, b) -> bool:
    return a[1] <= b[1] and b[2] <= a[2] and a[3] <= b[3] and b[4] <= a[4]


class DependencyTracker:
    """Earlier accesses per base buffer, in a sparse grid whose cells take the size of the first box
    seen (tiles of one buffer are usually alike); a box spanning more than ``WIDE_CELLS`` cells (or the
    whole buffer) goes to a short list every lookup scans instead."""

    def __init__(self, geometry: Geometry):
        self.geo = geometry
        self.grids: dict = {}       # base -> {(cell_r, cell_c): [(box, tid, is_write)]}
        self.wide: dict = {}        # base -> [(box, tid, is_write)]
        self.cell: dict = {}

    def _cell_range(self, box):
        base = box[0]
        cr, cc = self.cell.setdefault(base, (max(1, box[2] - box[1]), max(1, box[4] - box[3])))
        r0, r1 = box[1] // cr, (box[2] - 1) // cr + 1
        c0, c1 = box[3] // cc, (box[4] - 1) // cc + 1
        return r0, r1, c0, c1, (r1 - r0) * (c1 - c0)

    def _candidates(self, box):
        base = box[0]
        yield from self.wide.get(base, ())
        grid = self.grids.get(base)
        if not grid:
            return
        r0, r1, c0, c1, n = self._cell_range(box)
        if n > len(grid):
            for lst in grid.values():
                yield from lst
            return
        for r in range(r0, r1):
            for c in range(c0, c1):
                lst = grid.get((r, c))
                if lst:
                    yield from lst

    def add(self, tid: int, reads: list, writes: list) -> set:
        """Record a task's accesses (boxes); returns the ids of earlier tasks it must follow."""
        deps = set()
        for box in reads:
            for other, otid, w in self._candidates(box):
                if w and otid != tid and _overlap(box, other):
                    deps.add(otid)
        for box in writes:
            for other, otid, w in self._candidates(box):
                if otid != tid and _overlap(box, other):
                    deps.add(otid)
        for box in writes:
            self._record(box, tid, True)
        for box in reads:
            self._record(box, tid, False)
        return deps

    def _record(self, box, tid, write):
        base = box[0]
        entry = (box, tid, write)
        r0, r1, c0, c1, n = self._cell_range(box)
        if n > WIDE_CELLS:
            wide = self.wide.setdefault(base, [])
            if write:                  # later accesses overlapping what it covers also overlap it
                wide[:] = [e for e in wide if not _covers(box, e[0])]
                if self.geo_whole(box):
                    self.grids[base] = {}
            wide.append(entry)
            return
        grid = self.grids.setdefault(base, {})
        for r in range(r0, r1):
            for c in range(c0, c1):
                lst = grid.get((r, c))
                if lst is None:
                    grid[(r, c)] = [entry]
                    continue
                if write:
                    lst[:] = [e for e in lst if not _covers(box, e[0])]
                lst.append(entry)

    def geo_whole(self, box) -> bool:
        rows, cols, _ = self.geo.base_rc[box[0]]
        return box[1] == 0 and box[3] == 0 and box[2] >= rows and box[4] >= cols

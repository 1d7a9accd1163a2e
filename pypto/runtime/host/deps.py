"""Task dependencies from the GM boxes (regions.py) tasks read and write: a task follows every
earlier one whose accesses overlap its own with at least one write (RAW, WAR, WAW in program order).

A grid over each base buffer keeps the lookups short; a write that covers earlier accesses replaces
them (they are ordered before it, so later tasks that overlap them also overlap the write).
"""
from __future__ import annotations

WIDE_CELLS = 64      # a box over more grid cells than this is kept in the per-buffer "wide" list


def _overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]


def _covers(a, b) -> bool:
    return a[1] <= b[1] and b[2] <= a[2] and a[3] <= b[3] and b[4] <= a[4]


class DependencyTracker:
    """Earlier accesses per base buffer, in a sparse grid whose cells take the size of the first box
    seen (tiles of one buffer are usually alike); a box spanning more than ``WIDE_CELLS`` cells (or the
    whole buffer) goes to a short list every lookup scans instead."""

    def __init__(self, geometry):
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

    def writers(self, box) -> set:
        """Ids of the recorded tasks that write ``box`` (the latest writers: each follows those it covers)."""
        return {otid for other, otid, w in self._candidates(box) if w and _overlap(box, other)}

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

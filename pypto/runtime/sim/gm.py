"""Shared global memory: HBM bandwidth shared by every core, behind a write-back, write-allocate L2.

Bandwidth is a calendar of time bins (``hbm_bin_cycles`` wide). Each bin holds ``bytes/cycle x width``
of HBM capacity and of L2 capacity. A transfer starting at ``t`` moves its bytes bin by bin at up to
its core's port rate, limited by what the bins still hold; its end is when the last byte moved. Cores
reserve in the order the simulator meets their transfers (roughly time order: tasks start in time
order), so the first transfer in a crowded bin gets its full rate and later ones the rest — the total
never exceeds the machine's bandwidth, and an over-subscribed HBM stretches every late transfer.

L2 (every GM access goes through it, as on Ascend 910B): a set of resident 512-byte lines of the base
GM buffers' byte ranges, so a box re-read with another tiling hits whatever lines it shares with
earlier accesses. Reads: resident lines come at L2 bandwidth, the rest from HBM, and become resident.
Writes: write-allocate into L2 at L2 bandwidth, the lines become dirty (a partly written line counts
as written whole; likewise a line partly read is resident whole, while HBM is charged the bytes asked
for — a sector-fill approximation that keeps the spatial locality of narrow boxes). Capacity: LRU approximated by ``GENERATIONS`` sets of lines — a touched line moves
to the newest set; when the newest holds ``l2_bytes / GENERATIONS`` the oldest set is evicted whole, so
between (1 - 1/GENERATIONS) and all of l2_bytes stay resident. Dirty lines evicted are written to HBM
then (they take HBM bandwidth from that time on; nobody waits for them). At the end of a run, dirty
lines of the program's outputs are flushed to HBM from the time of the first write into each output
(``flush``), so outputs always count as HBM traffic and the run ends no earlier than their write-back.
"""
from __future__ import annotations

import numpy as np

LINE_SHIFT = 9                # 512-byte lines
LINE = 1 << LINE_SHIFT
BASE_SHIFT = 44               # line id = base buffer id << BASE_SHIFT | line index within the base
GENERATIONS = 4
_UNLIMITED = 1e30            # write-backs run at whatever HBM bandwidth is left


class GlobalMemory:
    def __init__(self, spec, bin_cycles: int):
        clock = spec.clock_ghz * 1e9
        mem = spec.memory
        self.W = float(bin_cycles)
        self.hbm_cap = mem["hbm_bytes_per_s"] / clock * self.W
        self.l2_cap = mem.get("l2_bytes_per_s", mem["hbm_bytes_per_s"]) / clock * self.W
        self.l2_bytes = int(mem.get("l2_bytes", 0))
        self.gen_lines = max(1, self.l2_bytes // LINE // GENERATIONS)
        self.hbm: list = []
        self.l2: list = []
        self.gens = [set() for _ in range(GENERATIONS)]    # oldest first
        self.dirty: dict = {}           # base id -> its dirty lines
        self.first_write: dict = {}     # base id -> time of the first write into it
        self.base_ids: dict = {}
        self.box_cache: dict = {}
        # boxes (line sets) touched since the newest set began -> written since: all their lines are in
        # the newest set (and dirty, when written), so repeating such an access needs no set work
        self.fresh: dict = {}
        self.hbm_bytes = 0
        self.l2_hit_bytes = 0
        self.writeback_bytes = 0        # dirty lines evicted to HBM during the run
        self.flushed_bytes = 0          # dirty output lines written back at the end

    def _grow(self, b: int):
        n = max(b + 1 - len(self.hbm), len(self.hbm))
        self.hbm.extend([self.hbm_cap] * n)
        self.l2.extend([self.l2_cap] * n)

    # ------------------------------------------------------------------ lines
    def base_id(self, base: str) -> int:
        i = self.base_ids.get(base)
        if i is None:
            i = self.base_ids[base] = len(self.base_ids) + 1
        return i

    @staticmethod
    def _linear(vals, n_tiles: int, shape) -> int:
        """The element offset of the box's first element (its GM offsets follow the valid shapes in vals)."""
        base = 2 * n_tiles
        if len(shape) == 2:
            return vals[base] * shape[1] + vals[base + 1]
        lin, stride = 0, 1
        for o, d in zip(reversed(vals[base:base + len(shape)]), reversed(shape)):
            lin += o * stride
            stride *= d
        return lin

    def box_lines(self, loc, shape, itemsize: int, trans: bool, vals, n_tiles: int):
        """The L2 lines of the GM box an instruction moves (``loc`` = (base buffer, byte offset)): a range
        of line ids when the box is one contiguous byte range, else a frozenset."""
        rows, cols = (vals[1], vals[0]) if trans else (vals[0], vals[1])
        rank = len(shape)
        seg = cols * itemsize
        row = shape[-1] * itemsize
        if rank == 1 or rows <= 1 or seg == row:          # one contiguous byte range (not cached)
            tag = self.base_ids.get(loc[0]) or self.base_id(loc[0])
            start = loc[1] + self._linear(vals, n_tiles, shape) * itemsize
            n = seg if rank == 1 or rows <= 1 else rows * row
            tag <<= BASE_SHIFT
            return range(tag + (start >> LINE_SHIFT), tag + ((start + n - 1) >> LINE_SHIFT) + 1)
        key = (loc, trans, vals)
        hit = self.box_cache.get(key)
        if hit is not None:
            return hit
        start = loc[1] + self._linear(vals, n_tiles, shape) * itemsize
        tag = self.base_id(loc[0]) << BASE_SHIFT
        if row % LINE == 0:                              # every row covers the same lines, shifted
            step = row >> LINE_SHIFT
            f = tag + (start >> LINE_SHIFT)
            k = ((start + seg - 1) >> LINE_SHIFT) - (start >> LINE_SHIFT) + 1
            end = f + rows * step
            lines = frozenset(range(f, end, step)) if k == 1 else \
                frozenset().union(*[range(f + j, end + j, step) for j in range(k)])
        else:
            firsts = (start + np.arange(rows, dtype=np.int64) * row) >> LINE_SHIFT
            lasts = (start + np.arange(rows, dtype=np.int64) * row + seg - 1) >> LINE_SHIFT
            span = int((lasts - firsts).max()) + 1
            ids = firsts[:, None] + np.arange(span, dtype=np.int64)[None, :]
            ids = ids[ids <= lasts[:, None]] + tag
            lines = frozenset(ids.tolist())
        if len(self.box_cache) > 4096:
            self.box_cache.clear()
        self.box_cache[key] = lines
        return lines

    def _touch(self, lines, t: float, older=None):
        """Move ``lines`` into the newest set (``older``: the older sets holding some of them, if known)."""
        gens = self.gens
        newest = gens[-1]
        for g in (gens[:-1] if older is None else older):
            if g:
                g.difference_update(lines)
        newest.update(lines)
        self.fresh[lines] = False
        if len(newest) >= self.gen_lines:
            old = gens.pop(0)
            gens.append(set())
            self.fresh.clear()
            n = 0
            for d in self.dirty.values():
                if d and old:
                    out = d.intersection(old)
                    d.difference_update(out)
                    n += len(out)
            if n:
                self.writeback_bytes += n * LINE
                self.transfer(t, n * LINE, _UNLIMITED, False)

    def access(self, t: float, nbytes: int, port: float, lines, write: bool) -> float:
        """A core moves ``nbytes`` of the box covering ``lines`` from time ``t``; when the last byte moved."""
        seen = self.fresh.get(lines)          # None, or whether it was written, since the newest set began
        if seen is not None and (seen or not write):
            if not write:
                self.l2_hit_bytes += nbytes
            return self.transfer(t, nbytes, port, True)
        if write:
            base = next(iter(lines)) >> BASE_SHIFT
            d = self.dirty.get(base)
            if d is None:
                d = self.dirty[base] = set()
                self.first_write[base] = t
            d.update(lines)
            self._touch(lines, t)
            if lines in self.fresh:
                self.fresh[lines] = True
            return self.transfer(t, nbytes, port, True)
        hits, older = 0, []
        gens = self.gens
        for g in gens:                         # disjoint sets; intersection() walks the (small) box
            if g:
                h = len(g.intersection(lines))
                if h:
                    hits += h
                    if g is not gens[-1]:
                        older.append(g)
        miss = len(lines) - hits
        self._touch(lines, t, older)
        if miss == 0:
            self.l2_hit_bytes += nbytes
            return self.transfer(t, nbytes, port, True)
        if miss == len(lines):
            return self.transfer(t, nbytes, port, False)
        from_hbm = nbytes * miss // len(lines)
        self.l2_hit_bytes += nbytes - from_hbm
        return self.transfer(self.transfer(t, nbytes - from_hbm, port, True), from_hbm, port, False)

    def flush(self, bases) -> float:
        """Write the dirty lines of the named base buffers back to HBM; the time the last one lands."""
        end = 0.0
        for name in bases:
            i = self.base_ids.get(name)
            if i is None or i not in self.first_write:
                continue
            n = len(self.dirty[i])
            if n:
                self.flushed_bytes += n * LINE
                end = max(end, self.transfer(self.first_write[i], n * LINE, _UNLIMITED, False))
        return end

    # ------------------------------------------------------------------ bandwidth
    def transfer(self, t: float, nbytes: int, port: float, from_l2: bool) -> float:
        """Move ``nbytes`` from time ``t`` at up to ``port`` bytes/cycle; the time the last byte moved."""
        if nbytes <= 0:
            return t
        cal = self.l2 if from_l2 else self.hbm
        if not from_l2:
            self.hbm_bytes += nbytes
        W = self.W
        b = int(t // W)
        if b >= len(cal):
            self._grow(b)
            cal = self.l2 if from_l2 else self.hbm
        remaining = float(nbytes)
        while True:
            bin_end = (b + 1) * W
            dt = bin_end - t
            room = cal[b]
            can = port * dt
            if room < can:
                can = room
            if can >= remaining:
                # finishes inside this bin at the rate it gets here
                cal[b] = room - remaining
                return t + dt * (remaining / can)
            if can > 0:
                cal[b] = room - can
                remaining -= can
            t = bin_end
            b += 1
            if b >= len(cal):
                self._grow(b)
                cal = self.l2 if from_l2 else self.hbm

"""Shared global memory: HBM bandwidth shared by every core, behind a write-back, write-allocate L2.

Bandwidth is a calendar of time bins (``hbm_bin_cycles`` wide). Each bin holds ``bytes/cycle x width``
of HBM capacity and of L2 capacity. A transfer starting at ``t`` moves its bytes bin by bin at up to
its core's port rate, limited by what the bins still hold; its end is when the last byte moved. Cores
reserve in the order the simulator meets their transfers (roughly time order: tasks start in time
order), so the first transfer in a crowded bin gets its full rate and later ones the rest — the total
never exceeds the machine's bandwidth, and an over-subscribed HBM stretches every late transfer.

L2 (every GM access goes through it, as on Ascend 910B): a set of resident 512-byte lines of the base
GM buffers' byte ranges, so a box re-read with another tiling hits whatever lines it shares with
earlier accesses. Residency is kept per 32-byte sector (16 to a line): a line partly read or written
holds only the sectors moved (``partial``: line -> bitmask of its resident sectors; a resident line not
in it holds all 16). A read is charged to HBM for the sectors it asks for that are not resident (whole
sectors: the bytes HBM really delivers), and the rest come at L2 bandwidth; all its sectors become
resident. So the first read of any byte of an input always comes from HBM, and a box whose rows share
lines with a neighbour's hits only the sectors the neighbour really fetched. Writes: write-allocate into
L2 at L2 bandwidth; the sectors written become resident and their lines dirty (a partly written line is
written back whole). Capacity: LRU approximated by ``GENERATIONS`` sets of lines — a touched line moves
to the newest set; when the newest holds ``l2_bytes / GENERATIONS`` the oldest set is evicted whole, so
between (1 - 1/GENERATIONS) and all of l2_bytes stay resident. Dirty lines evicted are written to HBM
then (they take HBM bandwidth from that time on; nobody waits for them). At the end of a run, dirty
lines of the program's outputs are flushed to HBM from the time of the first write into each output
(``flush``), so outputs always count as HBM traffic and the run ends no earlier than their write-back.

A box (``box_lines``) is ``(lines, part_lines, parts, sectors, key)``: its line ids (a range or a
frozenset), the lines it covers only in part, the pairs (such a line, the bitmask of the sectors the box
covers in it), how many sectors it covers in all, and what ``fresh`` knows it by: its lines when it has
no part lines, else an int (one contiguous byte range: its lines and end masks packed) or a tuple of
frozensets (cached with the box). Keys that are not containers keep the garbage collector's work and
the hashing per access what they were before sectors. An instruction's access comes through ``move``: a box
inside one line (most of a Tensor-level program's: one row of a head) goes to ``access_line``, which builds
no box and keeps no ``fresh`` entry (for one line the state says it directly) and changes the L2 exactly as
``access`` of that box does (tests/runtime/sim/test_sim_l2.py compares the two).
"""
from __future__ import annotations

from itertools import chain, repeat

import numpy as np

LINE_SHIFT = 9                # 512-byte lines
LINE = 1 << LINE_SHIFT
BASE_SHIFT = 44               # line id = base buffer id << BASE_SHIFT | line index within the base
SECTOR_SHIFT = 5              # 32-byte sectors, 16 to a line
SECTORS = LINE >> SECTOR_SHIFT
FULL = (1 << SECTORS) - 1     # the bitmask of a whole line
_FROM = tuple(FULL ^ ((1 << i) - 1) for i in range(SECTORS))    # sectors i.. of a line
_UPTO = tuple((1 << (i + 1)) - 1 for i in range(SECTORS))       # sectors ..i of a line
GENERATIONS = 4
_EMPTY = frozenset()
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
        self.partial: dict = {}         # resident line -> bitmask of its resident sectors, if not all
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
        lin = vals[base]                      # Horner: ((o0 * d1 + o1) * d2 + o2) ...
        for i in range(1, len(shape)):
            lin = lin * shape[i] + vals[base + i]
        return lin

    @staticmethod
    def _sector_mask(lo: int, hi: int) -> int:
        """The sectors of a line that its bytes [lo, hi) (0 <= lo < hi <= LINE) touch."""
        return _FROM[lo >> SECTOR_SHIFT] & _UPTO[(hi - 1) >> SECTOR_SHIFT]

    def box_lines(self, loc, shape, itemsize: int, trans: bool, vals, n_tiles: int):
        """The box (see the module docstring) of the GM box an instruction moves (``loc`` = (base buffer,
        byte offset)); its lines are a range when the box is one contiguous byte range, else a frozenset."""
        rows, cols = (vals[1], vals[0]) if trans else (vals[0], vals[1])
        rank = len(shape)
        seg = cols * itemsize
        row = shape[-1] * itemsize
        if rank == 1 or rows <= 1 or seg == row:          # one contiguous byte range (not cached)
            tag = self.base_ids.get(loc[0]) or self.base_id(loc[0])
            start = loc[1] + self._linear(vals, n_tiles, shape) * itemsize
            end = start + (seg if rank == 1 or rows <= 1 else rows * row)
            tag <<= BASE_SHIFT
            first, last = tag + (start >> LINE_SHIFT), tag + ((end - 1) >> LINE_SHIFT)
            lines = range(first, last + 1)
            lo, hi = start & (LINE - 1), end & (LINE - 1)
            if not lo and not hi:
                return lines, (), (), len(lines) * SECTORS, lines
            sectors = ((end - 1) >> SECTOR_SHIFT) - (start >> SECTOR_SHIFT) + 1
            head = _FROM[lo >> SECTOR_SHIFT]
            tail = _UPTO[((hi or LINE) - 1) >> SECTOR_SHIFT]
            key = (first << 24 | (last - first)) << 32
            if first == last:
                return lines, (first,), ((first, head & tail),), sectors, key | (head & tail) << 16
            if not hi:
                return lines, (first,), ((first, head),), sectors, key | head << 16
            if not lo:
                return lines, (last,), ((last, tail),), sectors, key | tail
            return lines, (first, last), ((first, head), (last, tail)), sectors, key | head << 16 | tail
        key = (loc, trans, vals)
        hit = self.box_cache.get(key)
        if hit is not None:
            return hit
        start = loc[1] + self._linear(vals, n_tiles, shape) * itemsize
        tag = self.base_id(loc[0]) << BASE_SHIFT
        lo = start & (LINE - 1)
        if row % LINE == 0 and (lo + seg - 1) >> LINE_SHIFT < row >> LINE_SHIFT:
            # every row covers the same lines, shifted, and no line is shared by two rows
            step = row >> LINE_SHIFT
            f = tag + (start >> LINE_SHIFT)
            k = ((lo + seg - 1) >> LINE_SHIFT) + 1
            end = f + rows * step
            lines = frozenset(range(f, end, step)) if k == 1 else \
                frozenset().union(*[range(f + j, end + j, step) for j in range(k)])
            hi = (lo + seg) & (LINE - 1)
            heads = range(f, end, step)                      # each row's first line, and its last
            tails = range(f + k - 1, end + k - 1, step)
            if k == 1:
                part_lines, parts = (lines, frozenset(zip(heads, repeat(self._sector_mask(lo, hi or LINE))))) \
                    if lo or hi else (_EMPTY, _EMPTY)
            elif lo and hi:
                part_lines = frozenset(chain(heads, tails))
                parts = frozenset(chain(zip(heads, repeat(self._sector_mask(lo, LINE))),
                                        zip(tails, repeat(self._sector_mask(0, hi)))))
            elif lo:
                part_lines, parts = frozenset(heads), frozenset(zip(heads, repeat(self._sector_mask(lo, LINE))))
            elif hi:
                part_lines, parts = frozenset(tails), frozenset(zip(tails, repeat(self._sector_mask(0, hi))))
            else:
                part_lines, parts = _EMPTY, _EMPTY
            sectors = rows * (((start + seg - 1) >> SECTOR_SHIFT) - (start >> SECTOR_SHIFT) + 1)
        else:
            starts = start + np.arange(rows, dtype=np.int64) * row
            firsts, lasts = starts >> LINE_SHIFT, (starts + seg - 1) >> LINE_SHIFT
            span = int((lasts - firsts).max()) + 1
            ids = firsts[:, None] + np.arange(span, dtype=np.int64)[None, :]
            keep = ids <= lasts[:, None]
            lo = np.maximum(starts[:, None] - (ids << LINE_SHIFT), 0)[keep]
            hi = np.minimum(starts[:, None] + seg - (ids << LINE_SHIFT), LINE)[keep]
            ids = ids[keep]
            bits = ((1 << (((hi - 1) >> SECTOR_SHIFT) + 1)) - 1) ^ ((1 << (lo >> SECTOR_SHIFT)) - 1)
            # ids ascend (rows are in address order), so the rows sharing a line (row % LINE != 0) are adjacent
            groups = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
            uniq, merged = ids[groups], np.bitwise_or.reduceat(bits, groups)
            lines = frozenset((uniq + tag).tolist())
            part = merged != FULL
            part_ids, part_masks = (uniq[part] + tag).tolist(), merged[part].tolist()
            sectors = (len(lines) - len(part_ids)) * SECTORS + sum(m.bit_count() for m in part_masks)
            part_lines, parts = frozenset(part_ids), frozenset(zip(part_ids, part_masks))
        box = (lines, part_lines, parts, sectors, (lines, parts) if part_lines else lines)
        if len(self.box_cache) > 4096:
            self.box_cache.clear()
        self.box_cache[key] = box
        return box

    def _touch(self, lines, key, t: float, older=None):
        """Move a box's lines into the newest set and mark it (``key``) fresh (``older``: the older sets
        holding some of its lines, if known)."""
        gens = self.gens
        newest = gens[-1]
        for g in (gens[:-1] if older is None else older):
            if g:
                g.difference_update(lines)
        newest.update(lines)
        self.fresh[key] = False
        if len(newest) >= self.gen_lines:
            self._evict(t)

    def _evict(self, t: float):
        """The newest set is full: evict the oldest set whole (its dirty lines written back from ``t``)."""
        gens = self.gens
        old = gens.pop(0)
        gens.append(set())
        self.fresh.clear()
        partial = self.partial
        if partial and old:
            for line in ([ln for ln in partial if ln in old] if len(partial) < len(old) else
                         [ln for ln in old if ln in partial]):
                del partial[line]
        n = 0
        for d in self.dirty.values():
            if d and old:
                out = d.intersection(old)
                d.difference_update(out)
                n += len(out)
        if n:
            self.writeback_bytes += n * LINE
            self.transfer(t, n * LINE, _UNLIMITED, False)

    def _fill(self, box, found=None) -> int:
        """Make the box's sectors resident (call before ``_touch``); how many fewer of them hit than
        ``SECTORS`` per resident line of the box (``found``: its resident lines, as sets, if known)."""
        lines, part_lines, parts, sectors, _ = box
        partial = self.partial
        lost = 0
        if part_lines:
            resident = set()
            if found is None:
                found = [g.intersection(part_lines) for g in self.gens if g]
            for x in found:
                if x:
                    resident.update(x.intersection(part_lines))
            if not resident:                    # the common first touch: nothing to hit
                partial.update(parts)
            elif len(resident) == len(part_lines) and not partial.keys() & resident:
                # all resident whole: each hits the sectors asked, nothing changes
                lost = len(part_lines) * SECTORS - (sectors - (len(lines) - len(part_lines)) * SECTORS)
            else:
                for line, m in parts:
                    if line in resident:
                        had = partial.get(line, FULL)
                        lost += SECTORS - (m & had).bit_count()
                        now = had | m
                        if now != FULL:
                            partial[line] = now
                        elif had != FULL:
                            del partial[line]
                    else:
                        partial[line] = m
        if partial and len(lines) > len(part_lines):     # whole lines asked of lines partly resident
            both = partial.keys() & lines
            if both:
                both.difference_update(part_lines)
                for line in both:
                    lost += SECTORS - partial.pop(line).bit_count()
        return lost

    def move(self, t: float, nbytes: int, port: float, loc, shape, itemsize: int, trans: bool, vals,
             n_tiles: int, write: bool) -> float:
        """An instruction moves ``nbytes`` of its GM box (``box_lines``' arguments) from time ``t``; when the
        last byte moved. A box inside one line (most of a Tensor-level program's: a row of a head) goes
        through ``access_line`` without building a box; the rest through ``box_lines`` and ``access``."""
        rows, cols = (vals[1], vals[0]) if trans else (vals[0], vals[1])
        rank = len(shape)
        seg = cols * itemsize
        if rank == 1 or rows <= 1 or seg == shape[-1] * itemsize:       # one contiguous byte range
            b = 2 * n_tiles
            if rank == 1:
                lin = vals[b]
            elif rank == 2:
                lin = vals[b] * shape[1] + vals[b + 1]
            elif rank == 3:
                lin = (vals[b] * shape[1] + vals[b + 1]) * shape[2] + vals[b + 2]
            else:
                lin = self._linear(vals, n_tiles, shape)
            start = loc[1] + lin * itemsize
            last = start + (seg if rank == 1 or rows <= 1 else rows * shape[-1] * itemsize) - 1
            if start >> LINE_SHIFT == last >> LINE_SHIFT:
                tag = self.base_ids.get(loc[0]) or self.base_id(loc[0])
                return self.access_line(t, nbytes, port, (tag << BASE_SHIFT) + (start >> LINE_SHIFT),
                                        _FROM[(start & (LINE - 1)) >> SECTOR_SHIFT] &
                                        _UPTO[(last & (LINE - 1)) >> SECTOR_SHIFT], write)
        return self.access(t, nbytes, port, self.box_lines(loc, shape, itemsize, trans, vals, n_tiles), write)

    def access_line(self, t: float, nbytes: int, port: float, line: int, mask: int, write: bool) -> float:
        """``access`` of a box inside one line: the sectors ``mask`` of ``line``. The same state changes and
        times as ``access`` of that box, without its ``fresh`` entry: for one line, "fresh" is what the
        state says directly (the line in the newest set, the sectors asked resident, dirty for a write)."""
        gens = self.gens
        newest = gens[-1]
        partial = self.partial
        if line in newest:
            g = newest
        else:
            g = None
            for x in gens:
                if line in x:
                    g = x
                    break
        if write:
            base = line >> BASE_SHIFT
            d = self.dirty.get(base)
            if d is None:
                d = self.dirty[base] = set()
                self.first_write[base] = t
            d.add(line)
            if mask != FULL:
                had = partial.get(line)
                if had is None:
                    had = FULL if g is not None else 0
                if had != FULL:
                    now = had | mask
                    if now == FULL:
                        partial.pop(line, None)
                    else:
                        partial[line] = now
            elif partial:
                partial.pop(line, None)
            if g is not newest:
                if g is not None:
                    g.discard(line)
                newest.add(line)
                if len(newest) >= self.gen_lines:
                    self._evict(t)
            return self.transfer(t, nbytes, port, True)
        asked = mask.bit_count()
        if g is not None:
            had = partial.get(line, FULL)
            if had == FULL:
                hit = asked
            else:
                hit = (mask & had).bit_count()
                now = had | mask
                if now == FULL:
                    del partial[line]
                else:
                    partial[line] = now
            if g is not newest:
                g.discard(line)
                newest.add(line)
                if len(newest) >= self.gen_lines:
                    self._evict(t)
        else:
            hit = 0
            if mask != FULL:
                partial[line] = mask
            newest.add(line)
            if len(newest) >= self.gen_lines:
                self._evict(t)
        return self._serve(t, nbytes, asked, hit, port)

    def _serve(self, t: float, nbytes: int, asked: int, hit: int, port: float) -> float:
        """The ``asked`` sectors of an access, ``hit`` of them resident: the resident bytes from L2, the rest
        from HBM in whole sectors; when the last byte moved."""
        if hit == asked:
            self.l2_hit_bytes += nbytes
            return self.transfer(t, nbytes, port, True)
        from_hbm = (asked - hit) << SECTOR_SHIFT         # whole sectors: what HBM delivers
        from_l2 = max(0, nbytes - from_hbm)
        self.l2_hit_bytes += from_l2
        return self.transfer(self.transfer(t, from_l2, port, True), from_hbm, port, False)

    def access(self, t: float, nbytes: int, port: float, box, write: bool) -> float:
        """A core moves ``nbytes`` of ``box`` from time ``t``; when the last byte moved."""
        lines, part_lines, parts, asked, key = box
        seen = self.fresh.get(key)            # None, or whether it was written, since the newest set began
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
            partial = self.partial
            if len(lines) == 1 and part_lines:           # one line written in part (the common case)
                (line, m), = parts
                had = partial.get(line)
                if had is None:
                    had = FULL if any(line in g for g in self.gens) else 0
                if had != FULL:
                    now = had | m
                    if now == FULL:
                        partial.pop(line, None)
                    else:
                        partial[line] = now
            elif part_lines or partial:
                self._fill(box)
            self._touch(lines, key, t)
            if key in self.fresh:
                self.fresh[key] = True
            return self.transfer(t, nbytes, port, True)
        hits, older, found = 0, [], []
        gens = self.gens
        for g in gens:                         # disjoint sets; intersection() walks the (small) box
            if g:
                x = g.intersection(lines)
                if x:
                    hits += len(x)
                    found.append(x)
                    if g is not gens[-1]:
                        older.append(g)
        hit = hits * SECTORS
        if found and len(lines) == 1 and part_lines:     # one resident line, asked in part (the common case)
            (line, m), = parts
            partial = self.partial
            had = partial.get(line, FULL)
            hit = (m & had).bit_count()
            if had != FULL:
                now = had | m
                if now == FULL:
                    del partial[line]
                else:
                    partial[line] = now
        elif found and (part_lines or self.partial):
            hit -= self._fill(box, found)
        elif part_lines:                       # nothing resident: the sectors asked become so
            self.partial.update(parts)
        self._touch(lines, key, t, older)
        return self._serve(t, nbytes, asked, hit, port)

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

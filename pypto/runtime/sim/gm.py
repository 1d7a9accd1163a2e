"""Shared global memory: HBM bandwidth shared by every core, and a small L2 model.

Bandwidth is a calendar of time bins (``hbm_bin_cycles`` wide). Each bin holds ``bytes/cycle x width``
of HBM capacity and of L2 capacity. A transfer starting at ``t`` moves its bytes bin by bin at up to
its core's port rate, limited by what the bins still hold; its end is when the last byte moved. Cores
reserve in the order the simulator meets their transfers (roughly time order: tasks start in time
order), so the first transfer in a crowded bin gets its full rate and later ones the rest — the total
never exceeds the machine's bandwidth, and an over-subscribed HBM stretches every late transfer.

L2: an LRU over GM boxes (buffer, offsets, extents) with the L2's capacity in bytes. A read of a box
that is resident (read or written before by any core, not evicted since) is served from L2 bandwidth;
everything else, and every write, goes to HBM (write-through).
"""
from __future__ import annotations

from collections import OrderedDict


class GlobalMemory:
    def __init__(self, spec, bin_cycles: int):
        clock = spec.clock_ghz * 1e9
        mem = spec.memory
        self.W = float(bin_cycles)
        self.hbm_cap = mem["hbm_bytes_per_s"] / clock * self.W
        self.l2_cap = mem.get("l2_bytes_per_s", mem["hbm_bytes_per_s"]) / clock * self.W
        self.l2_bytes = int(mem.get("l2_bytes", 0))
        self.hbm: list = []
        self.l2: list = []
        self.lru: OrderedDict = OrderedDict()
        self.lru_bytes = 0
        self.hbm_bytes = 0
        self.l2_hit_bytes = 0

    def _grow(self, b: int):
        n = max(b + 1 - len(self.hbm), len(self.hbm))
        self.hbm.extend([self.hbm_cap] * n)
        self.l2.extend([self.l2_cap] * n)

    def l2_lookup(self, key, nbytes: int, write: bool) -> bool:
        """True when a read hits L2; records the box as resident either way."""
        lru = self.lru
        if key in lru:
            lru.move_to_end(key)
            return not write
        lru[key] = nbytes
        self.lru_bytes += nbytes
        while self.lru_bytes > self.l2_bytes and lru:
            _, b = lru.popitem(last=False)
            self.lru_bytes -= b
        return False

    def transfer(self, t: float, nbytes: int, port: float, from_l2: bool) -> float:
        """Move ``nbytes`` from time ``t`` at up to ``port`` bytes/cycle; the time the last byte moved."""
        if nbytes <= 0:
            return t
        cal = self.l2 if from_l2 else self.hbm
        if from_l2:
            self.l2_hit_bytes += nbytes
        else:
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

"""The cost model: how long each instruction occupies its pipe, from the MachineSpec, as data.

An instruction's cost is ``issue + work / throughput``:
  V     vector: repeats of ``bytes_per_cycle`` per row of the working region (a row narrower than one
        repeat still costs one: the row is one masked repeat), times the kind's factor (transcendentals
        are slower). A region whose rows span the tile's full width is one contiguous byte range and
        is walked as such, ``ceil(bytes / bytes_per_cycle)`` repeats (what PTO-ISA's a2a3 TBinOp does
        for a tile whose valid columns are its columns: one 1-D instruction over rows x cols);
  M     cube: 16x16x16 fractals, ``cube FLOP/cycle`` by input dtype (fp16/bf16 8192, fp32 a quarter);
  MTE1  L1 -> L0A/L0B at ``mte1_bytes_per_cycle``;  FIX  L0C -> UB/L1 at ``fix_bytes_per_cycle``;
  TPUSH / TPOP (on-chip handoff, a5): a push moves its tile into the consumer's FIFO at the machine's
        ``[cross_core]`` c2v (L0C -> UB) or v2c (UB -> L1) rate, seen ``onchip_latency_cycles`` later; a pop
        is the consumer taking the slot as its tile (no transfer: its issue only). No GM / L2 traffic.
  MTE2 / MTE3 / FIX to GM: GM transfers. Each row of the GM box rounds up to the burst size; the
        transfer runs at the core's port rate and shares HBM (or L2) bandwidth with every other core
        (gm.py); its completion is seen by other pipes ``gm_latency_cycles`` later for a read,
        ``gm_write_latency_cycles`` for a write (the pipe itself streams the next transfer meanwhile).
Figures the MachineSpec does not carry yet live in ``DEFAULTS`` (a ``[sim]`` table in the machine's
toml overrides them).
"""
from __future__ import annotations

from ...ir.isa import Pipe
from . import indexed

PIPES = (Pipe.MTE2, Pipe.MTE1, Pipe.M, Pipe.V, Pipe.MTE3, Pipe.FIX, Pipe.S)
PIPE_INDEX = {p: i for i, p in enumerate(PIPES)}
NPIPES = len(PIPES)
S_PIPE = PIPE_INDEX[Pipe.S]

DEFAULTS = {
    "scalar_issue_cycles": 1,     # the scalar unit issues one statement per cycle into the pipe queues
    "dma_issue_cycles": 16,       # descriptor set-up of one MTE2/MTE3/FIX/MTE1 transfer
    "cube_issue_cycles": 16,      # one TMATMUL: operand fetch before the first fractal
    "burst_bytes": 32,            # GM access granule: each row of a box rounds up to it
    "hbm_bin_cycles": 256,        # time resolution of the shared-bandwidth calendar (gm.py)
    "cube_fractal": 16,           # M, N, K rounded up to it
}

# factor on the vector time by instruction kind (the transcendental factor comes from the MachineSpec)
VECTOR_KIND_FACTOR = {"elementwise": 1.0, "reduce": 1.0, "expand": 1.0, "cast": 1.0, "compare": 1.0,
                      "select": 1.0, "fill": 1.0, "move": 1.0, "scan": 2.0, "transcendental": None}


def sim_params(spec) -> dict:
    return {**DEFAULTS, **spec.raw.get("sim", {})}


def _ceil(a, b):
    return -(-a // b)


class CostModel:
    """Per-instruction measure functions built once per (block, machine)."""

    def __init__(self, spec):
        self.spec = spec
        self.p = sim_params(spec)
        v = spec.vector
        self.vec_bpc = v["bytes_per_cycle"]
        self.vec_issue = v.get("issue_cycles", 8)
        self.trans_factor = v.get("transcendental_factor", 4)
        m = spec.memory
        self.port = {Pipe.MTE2: m["mte2_bytes_per_cycle"], Pipe.MTE3: m["mte3_bytes_per_cycle"],
                     Pipe.MTE1: m["mte1_bytes_per_cycle"], Pipe.FIX: m["fix_bytes_per_cycle"]}
        self.gm_latency = m.get("gm_latency_cycles", 0)

    def vector_factor(self, kind: str) -> float:
        f = VECTOR_KIND_FACTOR.get(kind, 1.0)
        return self.trans_factor if f is None else f

    def measure_fn(self, cop):
        """A function vals -> (occupancy or issue cycles, gm_bytes, port B/cycle, cube_flops, ideal cycles,
        vector elements; for a GM load the exact bytes it reads: valid rows x cols x the GM dtype's size).
        ``gm_bytes`` > 0 means a GM transfer whose duration the shared-bandwidth model decides; ideal
        cycles are the unit's work at its peak rate (cube or vector), for the roofline."""
        region, pipe = cop.region, cop.pipe_enum
        isz = [t.itemsize for t in cop.tiles]
        if pipe == Pipe.M:
            return self._cube(cop)
        if cop.kind_name in ("push", "pop"):
            return self._on_chip(cop, isz)
        if region in ("load", "store"):
            return self._gm(cop, isz)
        if region in indexed.REGIONS:
            return indexed.measure(cop, self.p["dma_issue_cycles"], self.p["burst_bytes"], self.port[pipe])
        if pipe in (Pipe.MTE1, Pipe.FIX, Pipe.MTE3):
            return self._local_move(cop, isz)
        return self._vector(cop, isz)

    def _vector(self, cop, isz):
        bpc, issue = self.vec_bpc, self.vec_issue
        factor = self.vector_factor(cop.kind_name)
        width = max(isz)
        # which tile operand's valid region the work spans: the source's for reductions, else the dst's
        ri = 2 if cop.region in ("rowreduce", "colreduce") else 0
        full_cols = cop.tiles[ri // 2].shape[-1] if len(cop.tiles) > ri // 2 else None

        def measure(vals):
            rows, cols = vals[ri], vals[ri + 1]
            if cols == full_cols:           # contiguous rows: one 1-D span
                repeats = _ceil(rows * cols * width, bpc)
            else:
                repeats = rows * _ceil(cols * width, bpc)
            ideal = rows * cols * width / bpc * factor
            return (issue + repeats * factor, 0, 0, 0, ideal, rows * cols)
        return measure

    def _cube(self, cop):
        frac = self.p["cube_fractal"]
        a_dtype = cop.tiles[1].dtype.name
        per_cycle = self.spec.cube_flops_per_cycle(a_dtype)
        fractal_cycles = 2 * frac * frac * frac / per_cycle
        issue = self.p["cube_issue_cycles"]

        def measure(vals):
            m, n, k = vals[0], vals[1], vals[3]
            cycles = _ceil(m, frac) * _ceil(n, frac) * _ceil(k, frac) * fractal_cycles
            flops = 2.0 * m * n * k
            return (issue + cycles, 0, 0, flops, flops / per_cycle, 0)
        return measure

    def _gm(self, cop, isz):
        burst = self.p["burst_bytes"]
        issue = self.p["dma_issue_cycles"]
        port = self.port[cop.pipe_enum]
        gm_isz = cop.gm_itemsize
        trans = cop.trans

        load = cop.region == "load"

        def measure(vals):
            rows, cols = vals[0], vals[1]
            if trans:
                rows, cols = cols, rows
            nbytes = rows * _ceil(cols * gm_isz, burst) * burst
            return (issue, nbytes, port, 0, 0.0, rows * cols * gm_isz if load else 0)
        return measure

    def _on_chip(self, cop, isz):
        issue = self.p["dma_issue_cycles"]
        if cop.kind_name == "pop":
            return lambda vals: (self.p["scalar_issue_cycles"], 0, 0, 0, 0.0, 0)
        xc = self.spec.cross_core
        rate = xc["c2v_bytes_per_cycle"] if cop.pipe_enum == Pipe.FIX else xc["v2c_bytes_per_cycle"]
        cop.latency = xc.get("onchip_latency_cycles", 0)
        gm_isz = cop.gm_itemsize                # the slot holds the consumer's element type

        def measure(vals):
            return (issue + vals[0] * vals[1] * gm_isz / rate, 0, 0, 0, 0.0, 0)
        return measure

    def _local_move(self, cop, isz):
        issue = self.p["dma_issue_cycles"]
        port = self.port[cop.pipe_enum]
        width = max(isz)

        def measure(vals):
            return (issue + vals[0] * vals[1] * width / port, 0, 0, 0, 0.0, 0)
        return measure

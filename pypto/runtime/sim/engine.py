"""One simulation: the machine's cores, shared global memory and counters; and ``Unit`` — one launch
instance (a block on one core, or a cube + vector cluster linked by cross-core flags) that the
scheduler advances a quantum of statements at a time, always the unit furthest behind in simulated
time, so that concurrently running units reserve HBM bandwidth in (nearly) time order."""
from __future__ import annotations

from collections import deque

from ...errors import SimError
from ...ir.block import BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, CoreType
from .core import Core, CoreRun
from .functional import GMArrays
from .gm import GlobalMemory
from .timing import sim_params

QUANTUM = 64            # statements a core issues per turn
MAX_QUEUED = 4096       # statements a core may hold behind blocked pipes before it stops issuing


class SimState:
    def __init__(self, spec, *, functional: bool, check: bool, trace: bool):
        self.spec = spec
        self.functional, self.check = functional, check
        p = sim_params(spec)
        self.scalar_cycles = p["scalar_issue_cycles"]
        self.gm_latency = spec.memory.get("gm_latency_cycles", 0)
        self.gm_write_latency = spec.memory.get("gm_write_latency_cycles", self.gm_latency)
        self.gmem = GlobalMemory(spec, p["hbm_bin_cycles"])
        self.aic = [Core(CoreType.AIC, i, spec) for i in range(spec.num_aic)]
        self.aiv = [Core(CoreType.AIV, i, spec) for i in range(spec.num_aiv)]
        self.aiv_per_aic = spec.cores.get("aiv_per_aic", 2)
        self.trace_events = [] if trace else None
        self.gm_arrays = GMArrays() if functional else None
        self.task_slices = []          # (core name, start, end, label, block name, loc)
        self.n_instr = 0
        self.gm_bytes = 0
        self.cube_flops = 0.0
        self.cube_cycles = 0.0
        self.vec_cycles = 0.0
        self.vec_ops = 0.0
        self.blocks = 0
        self.kernel_stats = {}         # kernel name -> launch.KernelStats

    def deadlock(self, runs):
        lines = [line for r in runs for line in r.blocked_report()]
        first = next((r for r in runs if r.npending or r.stalled), runs[0])
        loc = None
        for p in first.pending:
            if p:
                loc = p[0][0].loc
                break
        raise SimError("deadlock: every pipe that still has work waits for a flag nobody will set\n  "
                       + "\n  ".join(lines), loc=loc or first.cb.block.loc)


def _launch_env(base: dict, block_idx: int, block_num: int, sub: int) -> dict:
    env = dict(base)
    env[BLOCK_IDX.name] = block_idx
    env[BLOCK_NUM.name] = block_num
    env[SUBBLOCK_IDX.name] = sub
    return env


class Unit:
    """One launch instance from ``t0``; ``parts`` = [(core, compiled block, sub-block index)], the cube
    part first for a cluster."""

    def __init__(self, state: SimState, parts: list, env: dict, gm: dict, gm_names: dict, t0: float,
                 block_idx: int, block_num: int):
        self.state, self.parts, self.t0 = state, parts, t0
        runs = []
        gm_records: dict = {}
        # GM locations some block of this launch writes: reads of anything else cannot race within it
        written = {gm_names[p] for _, cb, _ in parts for p in cb.stored_params}
        for slot, (core, cb, sub) in enumerate(parts):
            r = CoreRun(state, core, cb, _launch_env(env, block_idx, block_num, sub), gm, t0,
                        state.functional, state.check, slot, len(parts), gm_records)
            r.gm_names = gm_names
            r.gm_written = written
            r.sub = sub
            runs.append(r)
        if len(runs) > 1 and runs[0].cb.core == CoreType.AIC:
            cube, vecs = runs[0], runs[1:]
            cube.partners = vecs
            cube.xin = [[deque() for _ in vecs] for _ in range(state.spec.cross_core_flags)]
            for v in vecs:
                v.partners = [cube]
        self.runs = runs
        state.blocks += 1

    def time(self) -> float:
        return max(r.time() for r in self.runs) if len(self.runs) > 1 else self.runs[0].time()

    def step(self) -> bool:
        """Advance every member by a quantum; True when the instance has issued everything."""
        runs = self.runs
        if len(runs) == 1:
            r = runs[0]
            r.step(QUANTUM)
            if r.stalled is not None:
                self.state.deadlock(runs)
            return r.finished
        progress, live = False, False
        for r in runs:
            if r.finished:
                continue
            live = True
            if r.stalled is not None or r.npending > MAX_QUEUED:
                continue
            if r.step(QUANTUM) or r.finished:
                progress = True
        if not live:
            return True
        if not progress:
            self.state.deadlock(runs)
        return all(r.finished for r in runs)

    def finish(self) -> float:
        """Final checks; the time its last pipe finished."""
        runs = self.runs
        for r in runs:
            if r.npending or r.stalled is not None:
                self.state.deadlock(runs)
        if self.state.check:
            for r in runs:
                r.finish_checks()
        return max(r.end_time() for r in runs)

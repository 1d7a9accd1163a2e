"""Binding task instances (runtime/host/control.py: their kernel, sizes and scalars are the host's)
to their kernels' compiled blocks and GM tensors, and starting a block instance on the cores the
scheduler chose."""
from __future__ import annotations

import operator

from ...errors import SimError
from ...ir.block import CoreType
from .engine import Unit
from .program import compile_block
from .timing import NPIPES, PIPES


class KernelStats:
    """What one kernel's launches did on the simulated cores: per pipe busy cycles (summed over the
    cores), the cycles its blocks held cores, the cores it used, its span (first start, last end) and
    the GM bytes its loads read (valid rows x cols x the GM dtype's size: host/work.py's ``load_bytes``,
    counted as the blocks run instead of by walking the Block IR again)."""
    __slots__ = ("busy", "held", "cores", "blocks", "start", "end", "load_bytes")

    def __init__(self):
        self.busy = [0.0] * NPIPES
        self.held, self.blocks, self.cores = 0.0, 0, set()
        self.start, self.end = float("inf"), 0.0
        self.load_bytes = 0

    def add(self, unit, end: float) -> None:
        for (core, _, _), before in zip(unit.parts, unit.busy0):
            self.busy = list(map(operator.add, self.busy, map(operator.sub, core.busy, before)))
            self.cores.add(core.name)
        self.load_bytes += sum(r.loaded for r in unit.runs)
        self.held += (end - unit.t0) * len(unit.parts)
        self.blocks += 1
        self.start, self.end = min(self.start, unit.t0), max(self.end, end)

    def pipe_cycles(self) -> dict:
        return {str(p): c for p, c in zip(PIPES, self.busy)}


class _TaskInfo:
    __slots__ = ("kind", "aic", "aiv", "gm", "gm_names", "env", "dynamic")


class Launcher:
    def __init__(self, state, graph, bufs, env: dict, spec, geo=None):
        self.state, self.graph, self.bufs, self.env, self.spec = state, graph, bufs, env, spec
        self.geo = geo
        self._info: dict = {}

    def info(self, inst) -> _TaskInfo:
        """What the launches of ``inst``'s Task share: compiled blocks, GM tensors, the kernel's env."""
        task = inst.task
        hit = self._info.get(id(task))
        if hit is not None:
            return hit
        kernel = inst.plan.kernel
        info = _TaskInfo()
        aic, aiv = kernel.block(CoreType.AIC), kernel.block(CoreType.AIV)
        if aic is None and aiv is None:
            raise SimError(f"kernel {kernel.name} has no block", loc=kernel.loc)
        info.aic = compile_block(aic, self.spec) if aic is not None else None
        info.aiv = compile_block(aiv, self.spec) if aiv is not None else None
        info.kind = "cluster" if aic is not None and aiv is not None else ("AIC" if aic is not None else "AIV")
        bufs = self.bufs
        # GM tensors and (base, byte offset) L2 identities; views that move with a loop variable per instance
        info.dynamic = [p for p, b in task.gm_args.items() if bufs.is_dynamic(b)]
        info.gm = {p: (bufs.get(b, self.env) if p not in info.dynamic else bufs.shapes[b])
                   for p, b in task.gm_args.items()}
        info.gm_names = {p: bufs.location(b, self.env) for p, b in task.gm_args.items() if p not in info.dynamic}
        info.env = env = inst.plan.env
        for cb in (info.aic, info.aiv):
            if cb is not None:
                unbound = [n for n in cb.env_names if n not in env and n not in task.scalars
                           and n not in ("block_idx", "block_num", "subblock_idx")]
                if unbound:
                    raise SimError(f"block {cb.block.name} uses {', '.join(unbound)}, which nothing binds "
                                   f"(not a scalar param of the task, a program size or a GM dim)",
                                   loc=cb.block.loc)
        self._info[id(task)] = info
        return info

    def kind(self, inst) -> str:
        return self.info(inst).kind

    def start_block(self, inst, k: int, cores, start: float) -> Unit:
        """Block instance k of a task instance, on the chosen cores from ``start``."""
        info = self.info(inst)
        st = self.state
        kind, i = cores
        if kind == "AIV":
            parts = [(st.aiv[i], info.aiv, 0)]
        elif kind == "AIC":
            parts = [(st.aic[i], info.aic, 0)]
        else:
            per = st.aiv_per_aic
            parts = [(st.aic[i], info.aic, 0)] + [(st.aiv[i * per + s], info.aiv, s) for s in range(per)]
        env = {**info.env, **inst.scalars}
        gm, names = info.gm, info.gm_names
        if info.dynamic:
            gm, names = dict(gm), dict(names)
            for p in info.dynamic:
                b = inst.task.gm_args[p]
                gm[p] = self.bufs.get(b, inst.loop_env)
                names[p] = self.bufs.location(b, inst.loop_env)
        unit = Unit(st, parts, env, gm, names, start, k, inst.block_dim)
        unit.inst, unit.k, unit.cores = inst, k, cores
        unit.busy0 = [list(core.busy) for core, _, _ in parts]     # this launch's pipe time, for its kernel
        if st.check and self.geo is not None and (inst.read_boxes is not None or inst.write_boxes is not None):
            for r in unit.runs:
                r.declared = (inst, self.geo)
        return unit

    def end_block(self, unit, end: float):
        inst, st = unit.inst, self.state
        label = inst.label + (f" #{unit.k}" if inst.block_dim > 1 else "")
        ks = st.kernel_stats.get(inst.task.kernel)
        if ks is None:
            ks = st.kernel_stats[inst.task.kernel] = KernelStats()
        ks.add(unit, end)
        for core, cb, _ in unit.parts:
            core.last_task = inst.id
            core.task_busy += end - unit.t0
            st.task_slices.append((core.name, unit.t0, end, label, cb.block.name, inst.task.loc))

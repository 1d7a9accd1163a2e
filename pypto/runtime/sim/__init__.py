"""The ``sim`` backend: runs an ExecutionGraph on a simulated machine (MachineSpec) — functional
results on torch tensors, a per-pipe timing model with shared HBM, MPMD scheduling, checks that name
the instruction and the user's line, a Report and an optional Chrome trace.

    outputs, report = pypto.runtime.sim.run(graph, {"x": x}, {"M": 77})
    outputs, report = pypto.runtime.sim.run_kernel(kernel, {"x": x, "y": y}, {"r0": 0}, block_dim=4)

The host side of a run (sizes, GM buffers, the control program expanded into task instances and
their dependencies) is runtime/host, shared with the cpu and npu backends. Modules, in the order a
run uses them:
  control.py     the host's task instances with the scheduler's state, and the submissions (Batch)
  scheduler.py   MPMD dispatch of task instances to free cores; time-ordered advance of running blocks
  launch.py      a task instance bound to its kernel's compiled blocks, tensors and scalars
  engine.py      SimState (cores, shared memory, counters) and Unit (one block or cluster instance)
  core.py        one block instance on a core: pipes, flags, scalar issue, race/clobber/event checks
  program.py     a Block compiled once: checked statements and a generated scalar-unit walker
  timing.py      instruction costs from the MachineSpec (data)
  gm.py          shared HBM bandwidth calendar and the L2 model
  functional.py  one instruction on a core's buffers: the semantics of pypto/ir/isa.py over operand regions
  trace.py       Chrome-trace JSON (hand-built kernels for tests and benchmarks: pypto/testing/kernels.py)
"""
from __future__ import annotations

import os
import time

import torch

from ...errors import SimError
from ...ir.block import CoreType, Kernel
from ...ir.execution import ExecutionGraph
from ...machine import machine_spec
from ..report import Report, kernel_decisions, set_last_report
from ..host import GMBuffers, Geometry, bind_sizes, one_task_graph, written_bases
from ..host.work import Work, minimal_gm_bytes
from ..host.control import sync_notes
from .control import expand
from .engine import SimState
from .launch import Launcher
from .scheduler import POLICIES, Scheduler
from .timing import PIPES
from .trace import MAX_INSTR_EVENTS, run_path, write_trace

__all__ = ["run", "run_kernel", "POLICIES"]


def run(graph: ExecutionGraph, args: dict, env: dict, *, machine=None, timing_only: bool = False,
        trace=None, policy: str = "fifo", check: bool | None = None, stitch: int = 1):
    """Run ``graph`` on the simulated machine.

    args: buffer name -> CPU tensor (inputs; outputs to write in place, optionally); env: size symbol
    name -> int. timing_only (or env PYPTO_TIMING_ONLY=1): no arithmetic, no tensors — outputs come
    back as meta tensors. trace: path of the Chrome-trace JSON of this run; env PYPTO_TRACE=<file> traces
    every run, run k to <stem>-<k><suffix> (trace.run_path); report.trace_file says where. policy:
    "fifo" or "locality". check: the race / clobber / event checks; None (the default) turns them on
    for functional runs and off for timing-only runs (they cost about half the timing-only speed; pass
    check=True to have them there too). stitch: loop iterations per
    submission of the control program. Returns ({output name: tensor}, Report).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # tile-sized ops: torch's thread pool only adds overhead
    try:
        return _run(graph, args, env, machine, timing_only, trace, policy, check, stitch)
    finally:
        torch.set_num_threads(threads)


def _run(graph, args, env, machine, timing_only, trace, policy, check, stitch):
    wall0 = time.perf_counter()
    spec = machine_spec(machine)
    timing_only = bool(timing_only) or os.environ.get("PYPTO_TIMING_ONLY", "") not in ("", "0")
    check = (not timing_only) if check is None else bool(check)
    trace = trace or (run_path(os.environ["PYPTO_TRACE"]) if os.environ.get("PYPTO_TRACE") else None)
    args = dict(args or {})
    env = bind_sizes(graph, args, env)
    bufs = GMBuffers(graph, args, env, timing_only=timing_only)
    shapes = bufs.shapes
    geo = Geometry(bufs)
    state = SimState(spec, functional=not timing_only, check=check, trace=bool(trace))
    launcher = Launcher(state, graph, bufs, env, spec, geo)
    sched = Scheduler(state, spec, launcher, policy)
    with sched.staged():        # a read of a computed tensor simulates what was expanded before it
        instances, batches = expand(graph, env, geo, stitch, sched)
        sched.submit(batches)
        cycles = sched.finish(batches.trailing_reads)
    # the L2 is write-back: the outputs' dirty lines still have to reach HBM
    out_bases = {bufs.base_of(n) for n in graph.outputs}
    cycles = max(cycles, state.gmem.flush(sorted(out_bases)))

    written = written_bases(instances, bufs)
    for name, user, ours in bufs.copy_back:      # only what some task wrote goes back
        if name in written:
            user.copy_(ours)
    outputs = {}
    for name in graph.outputs:
        if timing_only:
            outputs[name] = torch.empty(shapes[name], dtype=graph.buffers[name].dtype.torch_dtype, device="meta")
        else:
            outputs[name] = args[name] if name in args else bufs.get(name, env)
    report = _report(graph, spec, state, shapes, cycles, len(instances), timing_only)
    # each kernel's GM load bytes, as its blocks ran (launch.KernelStats), for the hbm / l2 bound
    work = {name: Work(load_bytes=ks.load_bytes) for name, ks in state.kernel_stats.items()}
    report.decisions = kernel_decisions(graph, spec, state.kernel_stats, work)
    report.notes.extend(graph.notes)             # what the trace chose (frontend.context.note)
    report.notes.extend(sync_notes(batches.syncs))     # reads that waited for tasks (pypto.item)
    gmem = state.gmem
    report.notes.append(f"L2 write-back: HBM moved {gmem.hbm_bytes / 1e6:.1f} MB, of which "
                        f"{gmem.writeback_bytes / 1e6:.1f} MB dirty evictions and "
                        f"{gmem.flushed_bytes / 1e6:.1f} MB output lines flushed at the end")
    if timing_only:
        report.notes.append("timing-only: no arithmetic; outputs are meta tensors")
    if not check:
        report.notes.append("checks off: races, overlapping buffers and event misuse were not looked for")
    if trace:
        report.trace_file = write_trace(str(trace), state, spec, sched.dispatch_slices)
        if len(state.trace_events) > MAX_INSTR_EVENTS:
            report.notes.append(f"trace keeps the first {MAX_INSTR_EVENTS:,} instruction slices")
    report.wall_s = time.perf_counter() - wall0
    set_last_report(report)
    return outputs, report


def _report(graph, spec, state, shapes, cycles, n_tasks, timing_only) -> Report:
    min_bytes = minimal_gm_bytes(graph, shapes)
    hbm_cycles = min_bytes / spec.hbm_bytes_per_cycle
    cube_cycles = state.cube_cycles / max(1, spec.num_aic)
    vec_cycles = state.vec_cycles / max(1, spec.num_aiv)
    terms = {"cube": cube_cycles, "vector": vec_cycles, "hbm": hbm_cycles}
    bound_by = max(terms, key=terms.get)
    bound = terms[bound_by]
    util = {}
    for kind, cores in ((CoreType.AIC, state.aic), (CoreType.AIV, state.aiv)):
        if cycles <= 0 or not cores:
            continue
        denom = cycles * len(cores)
        entry = {"core": sum(c.task_busy for c in cores) / denom}
        for i, p in enumerate(PIPES):
            busy = sum(c.busy[i] for c in cores)
            if busy > 0:
                entry[str(p)] = busy / denom
        if entry["core"] > 0:
            util[str(kind)] = entry
    return Report(backend="sim", machine=spec.name, cycles=cycles, time_us=spec.cycles_to_us(cycles),
                  roofline_us=spec.cycles_to_us(bound), roofline_fraction=(bound / cycles if cycles > 0 else None),
                  bound_by=bound_by, flops=state.cube_flops + state.vec_ops, cube_flops=state.cube_flops,
                  vector_ops=state.vec_ops, gm_bytes=state.gm_bytes, min_gm_bytes=min_bytes,
                  l2_hit_bytes=state.gmem.l2_hit_bytes, tasks=n_tasks, blocks=state.blocks,
                  instructions=state.n_instr, utilization=util, timing_only=timing_only)


def run_kernel(kernel: Kernel, args: dict, scalars: dict | None = None, block_dim: int = 1, **options):
    """One launch of ``kernel`` over ``block_dim`` cores: a one-task ExecutionGraph whose buffers are the
    kernel's GM params (shapes from ``args``: tensors, or shapes for a timing-only run). Params the
    kernel stores to are the outputs; the rest are inputs. Same options as ``run``."""
    graph, tensors = one_task_graph(kernel, args, scalars, block_dim)
    return run(graph, tensors, {}, **options)

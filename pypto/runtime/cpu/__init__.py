"""The ``cpu`` backend: the generated PTO-ISA C++ of every kernel, compiled by g++ against pypto's
own header-only CPU implementation of the PTO tile API (include/), cached by content hash, and
run natively over torch tensors' memory.

    outputs, report = pypto.runtime.cpu.run(graph, {"x": x}, {"M": 77})
    outputs, report = pypto.runtime.cpu.run_kernel(kernel, {"x": x, "y": y}, {"r0": 0}, block_dim=4)

The report carries what the host measured and what the Block IR says: wall time (the ctypes calls:
the run, and per kernel summed over its launches), GM bytes, cube FLOPs, vector ops and PTO
instructions counted from the kernels' Block IR as each launch runs them (runtime/host/work.py, the
simulator's definitions), and the rates they make on this host. Cycles, roofline and pipe
utilisation stay None: only ``sim`` models the machine.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
import weakref

from ...codegen import generate_module
from ...errors import PyptoError
from ...ir.block import Kernel
from ...ir.execution import ExecutionGraph
from ...machine import machine_spec
from ..host import GMBuffers, Geometry, abi_scalars, bind_sizes, expand, one_task_graph, written_bases
from ..host.work import count_work, minimal_gm_bytes
from ..host.control import sync_notes
from ..report import Report, kernel_decisions, set_last_report
from . import compiler, units
from .compiler import STATS, INCLUDE_DIR
from .errors import BuildWarning, CpuKernelError, FlagWarning
from .core_count import cores_to_run
from .gm_check import build_flags, checked_mode
from .calls import WarmRun
from .executor import CpuTask, execute
from .library import KernelLibrary
from .units import build_units

__all__ = ["run", "run_kernel", "run_with", "build", "KernelSet", "one_task_graph", "CpuKernelError", "FlagWarning", "BuildWarning", "STATS", "INCLUDE_DIR"]

_LOADED: dict[str, KernelLibrary] = {}                  # build key -> loaded library
_BY_SOURCE: dict[str, tuple[KernelLibrary, str]] = {}    # kernel source digest -> (library, kernel name)
_BY_OBJECT: dict[int, tuple] = {}    # id(Kernel) -> (weakref to it, machine name, library, kernel name)


class KernelSet:
    """Where each kernel of a program was compiled: kernel name -> (library, its name there), and the
    program's own Kernel objects. A library found by source digest may have been built for another
    program's kernel with the same C++ but other source lines: errors name the lines of this one."""

    def __init__(self, entries: dict[str, tuple[KernelLibrary, str]], kernels: dict[str, Kernel] | None = None):
        self.entries = entries
        self.kernels = kernels or {}
        self.abis = {name: lib.abis[inner] for name, (lib, inner) in entries.items()}

    def ir(self, kernel: str) -> Kernel | None:
        """The program's Block IR of ``kernel`` (else the one its library was built from)."""
        lib, inner = self.entries[kernel]
        return self.kernels.get(kernel) or lib.kernels.get(inner)

    def prepare(self, kernel: str, ints, reals, block_dim: int, machine):
        lib, inner = self.entries[kernel]
        return lib.prepare(inner, ints, reals, block_dim, machine, ir=self.ir(kernel))

    def launch(self, kernel: str, gm, ints, reals, block_dim: int, threads: int, machine):
        self.prepare(kernel, ints, reals, block_dim, machine)(gm, threads)


def prepare(checked: bool | None = None) -> None:
    """A compilation for the cpu backend starts (backends.compile_graph): compile the launch runtime's
    unit of this build mode in the background meanwhile, if the kernel cache lacks it (units.prepare_runtime)."""
    try:
        flags = build_flags(checked)
    except PyptoError:          # a bad PYPTO_CPU_OPT: the build says so
        return
    units.prepare_runtime(flags)


def build(kernels, machine=None, checked: bool | None = None) -> tuple[KernelSet, compiler.BuildResult | None]:
    """Generate the kernels' sources and find each compiled in an already loaded library; compile
    the others into one (units.py: parallel translation units, cached on disk by content).
    ``kernels``: a list or a dict name -> Kernel.
    checked: build with the whole GM bounds rule compiled in (default: PYPTO_CPU_CHECK; gm_check.py).
    Returns the kernel set and the build result (None when everything was already loaded)."""
    spec = machine_spec(machine)
    checked = checked_mode(checked)
    tag = (spec.name, checked)
    by_name = kernels if isinstance(kernels, dict) else {k.name: k for k in kernels}
    known = {name: _BY_OBJECT.get(id(k)) for name, k in by_name.items()}
    if all(e is not None and e[0]() is by_name[n] and e[1] == tag for n, e in known.items()):
        # the very Kernel objects already ran (kernels are not edited once they have run)
        return KernelSet({n: (e[2], e[3]) for n, e in known.items()}, by_name), None
    module = generate_module(list(by_name.values()), spec)
    digests = {name: (hashlib.sha256(module.files[f"kernels/{abi.ident}.cpp"].encode()).hexdigest(), checked)
               for name, abi in module.abis.items()}
    entries = {n: _BY_SOURCE[d] for n, d in digests.items() if d in _BY_SOURCE}
    if len(entries) == len(digests):
        STATS.cache_hits += 1
        _remember(by_name, entries, tag)
        return KernelSet(entries, by_name), None
    missing = {n: by_name[n] for n in digests if n not in entries}
    if entries:           # only the kernels no loaded library has are compiled
        module = generate_module(list(missing.values()), spec)
    result, lib = compiler.build_and_load(module.units, lambda r: _LOADED.get(r.key) or KernelLibrary(
        r.library, module.abis, missing, build_key=r.key), builder=build_units, flags=build_flags(checked))
    result.kernels = len(missing)
    _LOADED[result.key] = lib
    for name in missing:
        _BY_SOURCE[digests[name]] = (lib, name)
        entries[name] = (lib, name)
    _remember(by_name, entries, tag)
    return KernelSet(entries, by_name), result


def _remember(by_name, entries, tag):
    for name, k in by_name.items():
        try:
            _BY_OBJECT[id(k)] = (weakref.ref(k), tag, *entries[name])
        except TypeError:
            pass


def _threads(threads) -> int:
    if threads is not None:
        return max(1, int(threads))
    env = os.environ.get("PYPTO_CPU_THREADS")
    return max(1, int(env)) if env else (os.cpu_count() or 1)


def run(graph: ExecutionGraph, args: dict, env: dict, *, machine=None, threads=None, checked=None, **ignored):
    """Run ``graph`` natively. args: buffer name -> CPU tensor (inputs; outputs to write in place,
    optionally); env: size symbol name -> int. threads: host threads (default: all CPUs, or
    PYPTO_CPU_THREADS). checked: the checked build, which checks the whole GM bounds rule of every
    TLOAD / TSTORE as the sim does (default: env PYPTO_CPU_CHECK=1; the test suite sets it). Options
    of other backends (timing_only, trace, policy...) are accepted and ignored. Returns ({output name:
    tensor}, Report)."""
    spec = machine_spec(machine)
    t0 = time.perf_counter()
    kernels, built = build(graph.kernels, spec, checked)
    return run_with(kernels, graph, args, env, machine=spec, threads=threads, built=built,
                    setup_s=time.perf_counter() - t0)


class _Plan:
    """What a run of a graph derives from its sizes alone: buffer shapes and the expanded task
    instances (with their marshalled launches). Kept per graph and sizes, so that a graph run
    again at the same sizes (a jit function called in a loop) skips the symbolic evaluation.
    Like kernels, graphs are not edited once they have run."""

    def __init__(self, shapes, instances, written, reusable):
        self.shapes = shapes
        self.instances = instances
        self.work: dict | None = None   # kernel name -> host.work.Work, counted at the first run
        self.work_error: str | None = None
        self.totals: tuple | None = None  # the report's figures every run shares (_report)
        self.written = written          # base buffers some task stores to
        self.reusable = reusable        # workspace bases no output is a view of
        self.spare: dict | None = None  # their tensors, kept from the last run (taken while one runs)
        self.lock = threading.Lock()
        self.warm: WarmRun | bool | None = None   # the runs after the first (calls.py), made by the
                                                  # first (False: this plan has none)

    def take_workspaces(self) -> dict | None:
        """The previous run's workspace tensors (their pages are warm), unless a run holds them."""
        with self.lock:
            spare, self.spare = self.spare, None
        return spare

    def keep_workspaces(self, tensors: dict) -> None:
        with self.lock:
            self.spare = {n: tensors[n] for n in self.reusable}

    def give_back(self, spare: dict) -> None:
        with self.lock:
            self.spare = spare


_PLANS: dict[int, tuple] = {}      # id(graph) -> (weakref to it, {(sizes, kernels, machine): _Plan})
_PLANS_PER_GRAPH = 16


def _plan_slot(graph, env, kernels, spec, nthreads):
    entry = _PLANS.get(id(graph))
    if entry is None or entry[0]() is not graph:
        try:   # the entry goes with the graph (pro kernels make a graph per call)
            forget = lambda _, k=id(graph), plans=_PLANS: plans.pop(k, None)   # noqa: E731 (no global at exit)
            entry = _PLANS[id(graph)] = (weakref.ref(graph, forget), {})
        except TypeError:
            return None, None
    key = (tuple(sorted(env.items())), tuple(sorted((n, id(lib), inner) for n, (lib, inner) in
                                                    kernels.entries.items())), spec.name, nthreads)
    return entry[1], key


def _reusable_workspaces(graph, args, buffers) -> frozenset:
    """Workspace buffers the runtime allocates (no argument given) that no output is a view of:
    the next run at the same sizes can use the same tensors (a workspace starts undefined)."""
    out_bases = {buffers.base_of(n) for n in graph.outputs}
    return frozenset(n for n, b in graph.buffers.items()
                     if b.view_of is None and b.role == "workspace" and n not in args and n not in out_bases)


def run_with(kernels: KernelSet, graph: ExecutionGraph, args: dict, env: dict, *, machine=None, threads=None,
             built=None, setup_s: float = 0.0):
    """``run`` over kernels already built (e.g. against other PTO headers; see tests/codegen)."""
    spec = machine_spec(machine)
    nthreads = _threads(threads)
    args = dict(args or {})
    env = bind_sizes(graph, args, env)
    plans, key = _plan_slot(graph, env, kernels, spec, nthreads)
    if graph.scalar_reads:          # the expansion depends on data (pypto.item), not on the sizes alone
        plans = key = None
    plan = plans.get(key) if plans is not None else None
    if plan is not None and plan.warm:
        done = _run_warm(plan, graph, args, spec, nthreads, built, setup_s)
        if done is not None:
            return done
    buffers = GMBuffers(graph, args, env, poison=False, shapes=plan.shapes if plan else None,
                        workspaces=plan.take_workspaces() if plan else None)
    launch_s: dict = {}             # instance id -> seconds of its ctypes call

    def launch(inst, n):
        if inst.launch is None:
            cores = cores_to_run(kernels.ir(inst.task.kernel), inst.block_dim, nthreads)
            ints, reals = abi_scalars(kernels.abis[inst.task.kernel], inst)
            inst.launch = kernels.prepare(inst.task.kernel, ints, reals, cores, spec)
        gm = {p: buffers.get(b, inst.loop_env) for p, b in inst.task.gm_args.items()}
        t = time.perf_counter()
        inst.launch(gm, n)
        launch_s[inst.id] = time.perf_counter() - t

    t0 = time.perf_counter()
    syncs = []
    if plan is None:
        ran = [0]

        def sync(pending, producers, expanded):    # a read of a computed tensor: run what comes before it
            execute(expanded[ran[0]:], launch, nthreads)
            ran[0] = len(expanded)

        instances, subs = expand(graph, env, Geometry(buffers), instance=CpuTask, sync=sync)
        execute(instances[ran[0]:], launch, nthreads)
        syncs = subs.syncs
        plan = _Plan(buffers.shapes, instances, written_bases(instances, buffers),
                     _reusable_workspaces(graph, args, buffers))
        if plans is not None:
            if len(plans) >= _PLANS_PER_GRAPH:
                plans.pop(next(iter(plans)))
            plans[key] = plan
    else:
        execute(plan.instances, launch, nthreads)
    instances = plan.instances
    run_s = time.perf_counter() - t0
    if plans is not None and plan.warm is None and not buffers.copy_back:
        plan.warm = WarmRun.prepare(instances, buffers, args, plan.reusable, nthreads) or False
    plan.keep_workspaces(buffers.tensors)
    for name, user, ours in buffers.copy_back:      # only what some task wrote goes back
        if name in plan.written:
            user.copy_(ours)
    outputs = {name: args[name] if name in args else buffers.tensors[name] for name in graph.outputs}
    if plan.work is None:
        try:
            plan.work = count_work(instances, spec.cores.get("aiv_per_aic", 2))
        except Exception as e:      # noqa: BLE001  the run is done and right: a counting gap is a note
            plan.work, plan.work_error = {}, f"{type(e).__name__}: {e}"
    report = _finish_report(graph, spec, plan, launch_s, run_s, nthreads, built, setup_s,
                            "kernel times are their ctypes calls, summed over launches")
    report.notes.extend(sync_notes(syncs))     # reads that waited for tasks (pypto.item)
    return outputs, report


def _run_warm(plan, graph, args, spec, nthreads, built, setup_s):
    """A run at the plan's sizes through its WarmRun (calls.py); None when the run does not fit it
    (the ordinary path runs instead)."""
    spare = plan.take_workspaces()
    if spare is None:               # a concurrent run holds them (and the WarmRun's arrays)
        return None
    t0 = time.perf_counter()
    done = plan.warm.run(args, spare)
    if done is None:
        plan.give_back(spare)
        return None
    run_s = time.perf_counter() - t0
    outputs, kept, seconds = done
    plan.give_back(kept)
    launch_s = {inst.id: s for inst, s in zip(plan.instances, seconds)}
    return outputs, _finish_report(graph, spec, plan, launch_s, run_s, nthreads, built, setup_s,
                                   "one call of the prepared launches; kernel times summed over launches")


def _finish_report(graph, spec, plan, launch_s, run_s, nthreads, built, setup_s, how) -> Report:
    report = _report(graph, spec, plan, plan.instances, launch_s, run_s)
    report.notes = [_build_note(built), f"setup {setup_s * 1e3:.1f} ms, run {run_s * 1e3:.2f} ms on "
                    f"{nthreads} thread(s); {how}"]
    if plan.work_error:
        report.notes.append(f"bytes, FLOPs and instructions not counted ({plan.work_error})")
    report.notes.extend(graph.notes)             # what the trace chose (frontend.context.note)
    set_last_report(report)
    return report


def _report(graph, spec, plan, instances, launch_s, run_s) -> Report:
    if plan.totals is None:         # what the plan's runs share: counted once
        work = {name: dict(launches=w.launches, gm_bytes=w.gm_bytes, cube_flops=w.cube_flops,
                           vector_ops=w.vector_ops, instructions=w.instructions) for name, w in plan.work.items()}
        total = list(plan.work.values())
        cube, vec = sum(w.cube_flops for w in total), sum(w.vector_ops for w in total)
        plan.totals = (work, dict(tasks=len(instances), blocks=sum(i.block_dim for i in instances),
                                  flops=cube + vec, cube_flops=cube, vector_ops=vec,
                                  gm_bytes=sum(w.gm_bytes for w in total),
                                  min_gm_bytes=minimal_gm_bytes(graph, plan.shapes),
                                  instructions=sum(w.instructions for w in total)))
    work, totals = plan.totals
    kernels = {}
    for inst in instances:
        k = kernels.get(inst.plan.kernel.name)
        if k is None:
            k = kernels[inst.plan.kernel.name] = {"wall_s": 0.0}
        k["wall_s"] += launch_s.get(inst.id, 0.0)
    for name, w in work.items():
        kernels[name].update(w)
    return Report(backend="cpu", machine=spec.name, wall_s=run_s, kernels=kernels,
                  decisions=kernel_decisions(graph, spec), **totals)


def _build_note(built) -> str:
    if built is None:
        return "build: already loaded"
    if built.cached:
        return f"build: disk cache hit ({built.library.parent.name})"
    per = built.build_s / max(1, built.kernels)
    return (f"build: g++ {built.build_s:.2f} s for {built.kernels} kernel(s), {per:.2f} s each "
            f"({built.library.parent.name})")


def run_kernel(kernel: Kernel, args: dict, scalars: dict | None = None, block_dim: int = 1, **options):
    """One launch of ``kernel`` over ``block_dim`` cores (a one-task ExecutionGraph whose buffers are
    the kernel's GM params, shapes from ``args``; params the kernel stores to are the outputs).
    Same options as ``run``."""
    graph, tensors = one_task_graph(kernel, args, scalars, block_dim)
    return run(graph, tensors, {}, **options)

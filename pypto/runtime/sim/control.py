"""The control program (the AICPU side): expand the ExecutionGraph's loops with their run-time trip
counts into task instances, evaluate each instance's scalars, block_dim and GM regions, compute its
dependencies, and group loop iterations into submissions (``stitch`` iterations per submission)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import SimError
from ...ir.execution import Loop, Task
from .deps import DependencyTracker, Geometry
from .exprs import compile_tuple


class TaskInstance:
    __slots__ = ("id", "task", "scalars", "loop_env", "block_dim", "deps", "dependents", "deps_left",
                 "batch", "submitted", "remaining", "fresh", "label", "ready", "read_boxes", "write_boxes")

    def __init__(self, id_, task, scalars, loop_env, block_dim, label):
        self.id, self.task, self.scalars, self.loop_env = id_, task, scalars, loop_env
        self.block_dim, self.label = block_dim, label
        self.deps: set = set()
        self.dependents: list = []
        self.deps_left = 0
        self.batch = None
        self.submitted = False
        self.remaining = block_dim
        self.fresh = 0.0          # when the latest of its producers finished
        self.ready = False
        self.read_boxes = self.write_boxes = None    # declared regions (base boxes), None when undeclared


@dataclass
class Batch:
    """One submission of the control program: a task, or ``stitch`` iterations of a loop."""
    instances: list = field(default_factory=list)
    dispatched: bool = False
    requested: bool = False


def kernel_accesses(kernel) -> tuple[set, set]:
    """GM params the kernel's blocks load from and store to."""
    reads, writes = set(), set()
    for b in kernel.blocks:
        for ins in b.instructions():
            for o in ins.operands:
                if hasattr(o, "param"):
                    (writes if ins.spec.kind == "store" else reads).add(o.param)
    return reads, writes


class _TaskPlan:
    """Per Task of the graph, compiled once: evaluators for its scalars, block_dim and regions."""

    def __init__(self, task: Task, graph, geo: Geometry):
        self.task = task
        kernel = graph.kernels.get(task.kernel)
        if kernel is None:
            raise SimError(f"task {task.name or task.kernel} launches kernel '{task.kernel}', which the graph "
                           f"does not have (kernels: {', '.join(graph.kernels)})", loc=task.loc)
        self.kernel = kernel
        params = {g.name for b in kernel.blocks for g in b.gm_params}
        missing = params - set(task.gm_args)
        if missing:
            raise SimError(f"task {task.name or task.kernel} binds no buffer to GM param(s) "
                           f"{', '.join(sorted(missing))} of kernel {kernel.name}", loc=task.loc)
        for p, buf in task.gm_args.items():
            if buf not in graph.buffers:
                raise SimError(f"task {task.name or task.kernel} binds GM param {p} to unknown buffer '{buf}'",
                               loc=task.loc)
        what = f"task {task.name or task.kernel}"
        self.scalar_names = list(task.scalars)
        self.scalars = compile_tuple([task.scalars[n] for n in self.scalar_names], f"{what} scalar")
        self.block_dim = compile_tuple([task.block_dim], f"{what} block_dim")
        loads, stores = kernel_accesses(kernel)
        self.reads = self._regions(task.reads, loads, what, geo)
        self.writes = self._regions(task.writes, stores, what, geo)

    def _regions(self, regions, params, what, geo):
        if regions is None:
            bufs = sorted({self.task.gm_args[p] for p in params})
            return lambda env: [b for b in (geo.whole(n, env) for n in bufs) if b is not None]
        plans = []
        for r in regions:
            if r.buffer not in geo.shapes:
                raise SimError(f"{what} names region of unknown buffer '{r.buffer}'", loc=self.task.loc)
            fn = compile_tuple(list(r.offsets) + list(r.extents), f"{what} region of {r.buffer}")
            plans.append((r.buffer, len(r.offsets), fn))

        def evaluate(env):
            out = []
            for name, n, fn in plans:
                v = fn(env)
                b = geo.box(name, v[:n], v[n:], env)
                if b is not None:
                    out.append(b)
            return out
        return evaluate


def expand(graph, env: dict, geo: Geometry, stitch: int = 1):
    """Task instances in program order (dependencies filled) and the submissions they form."""
    plans: dict = {}
    tracker = DependencyTracker(geo)
    instances: list = []
    batches: list = []
    stitch = max(1, int(stitch))

    def plan_of(task):
        p = plans.get(id(task))
        if p is None:
            p = plans[id(task)] = _TaskPlan(task, graph, geo)
        return p

    def add(task, cur_env, batch):
        p = plan_of(task)
        scalars = dict(zip(p.scalar_names, p.scalars(cur_env)))
        (block_dim,) = p.block_dim(cur_env)
        loop_vals = {k: v for k, v in cur_env.items() if k in loop_names}
        label = task.name or task.kernel
        if loop_vals:
            label += "[" + ", ".join(f"{k}={v}" for k, v in loop_vals.items()) + "]"
        inst = TaskInstance(len(instances), task, scalars, cur_env, int(block_dim), label)
        reads, writes = p.reads(cur_env), p.writes(cur_env)
        if task.reads is not None:
            inst.read_boxes = reads
        if task.writes is not None:
            inst.write_boxes = writes
        deps = tracker.add(inst.id, reads, writes)
        inst.deps = deps
        inst.deps_left = len(deps)
        for d in deps:
            instances[d].dependents.append(inst)
        instances.append(inst)
        if batch is None:
            batch = Batch()
            batches.append(batch)
        batch.instances.append(inst)
        inst.batch = batch

    loop_names: set = set()

    def rec(items, cur_env, batch):
        for it in items:
            if isinstance(it, Loop):
                loop_names.add(it.var.name)
                start, stop, step = compile_tuple([it.start, it.stop, it.step], f"loop {it.var}")(cur_env)
                if step == 0:
                    raise SimError(f"loop {it.var} has step 0", loc=it.loc)
                for k, v in enumerate(range(start, stop, step)):
                    inner = batch
                    if batch is None:
                        if k % stitch == 0:
                            group = Batch()
                            batches.append(group)
                        inner = group
                    rec(it.body, {**cur_env, it.var.name: v}, inner)
            elif isinstance(it, Task):
                add(it, cur_env, batch)
            else:
                raise SimError(f"unknown control-program item {it!r}")

    rec(graph.program, dict(env), None)
    batches = [b for b in batches if b.instances]
    return instances, batches, plans

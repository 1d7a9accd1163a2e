"""The control program (the AICPU side of a run): the ExecutionGraph's loops expanded with their
run-time trip counts into task instances in program order, each with its scalars, block_dim, GM
boxes and dependencies (deps.py), grouped into submissions (``stitch`` loop iterations each).

Each Task is checked and compiled once (``TaskPlan``): its kernel exists, every GM param is bound
to a buffer of the program, every scalar param has a value, the GM params' sizes agree with the
buffers (sizes.kernel_sizes); its scalars, block_dim and regions become Python evaluators.
Boxes and dependencies follow regions.py and deps.py: the one dependency model of every backend.

Data scalars (``pypto.item``: ``graph.scalar_reads``) are read from their arguments when an expression
first needs them (scalars.py): the expansion runs under a ``ScalarEnv``, each instance counts the reads
made just before it (``control_reads``: the sim charges them to the AICPU's control thread), and the
submissions count those made after the last instance (``Submissions.trailing_reads``: the run's end, e.g.
a final loop whose data-dependent trip count is 0). A data scalar of a tensor the program computes
stages the expansion: the backend's ``sync`` runs what was expanded so far until the element's writers
are done, then the read is made and the expansion goes on (``Submissions.syncs`` lists those reads). A run-time
branch is a Loop of 0 or 1 trips (ir/execution.py), expanded like any loop."""
from __future__ import annotations

from ...errors import PyptoError
from ...ir.execution import Loop, Task
from .deps import DependencyTracker
from .exprs import compile_tuple
from .scalars import bind
from .sizes import kernel_sizes


def kernel_accesses(kernel) -> tuple[set, set]:
    """GM params the kernel's blocks load from and store to."""
    reads, writes = set(), set()
    for b in kernel.blocks:
        for ins in b.instructions():
            for o in ins.operands:
                if hasattr(o, "param"):
                    (writes if ins.spec.region in ("store", "scatter") else reads).add(o.param)
    return reads, writes


class TaskInstance:
    """One launch of a Task: ``scalars`` its scalar values, ``loop_env`` the program's sizes and loop
    variables it was expanded under, ``deps`` the ids of earlier instances it must follow,
    ``read_boxes`` / ``write_boxes`` the boxes of the regions its Task declares (None when the Task
    declares none and its kernel's whole GM params count). Backends subclass it for their own
    per-instance state."""
    __slots__ = ("id", "task", "plan", "scalars", "loop_env", "block_dim", "label", "deps",
                 "read_boxes", "write_boxes", "control_reads")

    def __init__(self, id_, task, plan, scalars, loop_env, block_dim, label):
        self.id, self.task, self.plan, self.scalars, self.loop_env = id_, task, plan, scalars, loop_env
        self.block_dim, self.label = block_dim, label
        self.deps: set = set()
        self.read_boxes = self.write_boxes = None
        self.control_reads = 0          # data scalars the control program read just before this instance

    def kernel_env(self) -> dict:
        """What the kernel's symbols are bound to: program sizes, its GM params' sizes, its scalars."""
        return {**self.plan.env, **self.scalars}


class TaskPlan:
    """Per Task of the graph, checked and compiled once: its kernel, the sizes its GM params take
    (``env``: the program's sizes with those), evaluators of its scalars and block_dim. It keeps no
    reference to the run's buffers (a backend may keep instances across runs)."""

    def __init__(self, task: Task, graph, shapes: dict, env: dict):
        self.task = task
        what = f"task {task.name or task.kernel}"
        kernel = graph.kernels.get(task.kernel)
        if kernel is None:
            raise PyptoError(f"{what} launches kernel '{task.kernel}', which the graph does not have "
                             f"(kernels: {', '.join(graph.kernels)})", loc=task.loc)
        self.kernel = kernel
        if not kernel.blocks:
            raise PyptoError(f"kernel {kernel.name} has no block", loc=kernel.loc)
        params = {g.name for b in kernel.blocks for g in b.gm_params}
        missing = params - set(task.gm_args)
        if missing:
            raise PyptoError(f"{what} binds no buffer to GM param {', '.join(repr(p) for p in sorted(missing))} "
                             f"of kernel {kernel.name}", loc=task.loc)
        for p, buf in task.gm_args.items():
            if buf not in graph.buffers:
                raise PyptoError(f"{what} binds GM param {p} to unknown buffer '{buf}'", loc=task.loc)
        scalar_params = {p.name for blk in kernel.blocks for p in blk.scalar_params}
        missing = scalar_params - set(task.scalars)
        if missing:
            raise PyptoError(f"{what} gives no value for scalar param(s) {', '.join(sorted(missing))} of "
                             f"kernel {kernel.name}", loc=task.loc)
        self.env = {**env, **kernel_sizes(kernel, task, shapes, env)}
        self.scalar_names = list(task.scalars)
        self.scalars = compile_tuple([task.scalars[n] for n in self.scalar_names], f"{what} scalar",
                                     task.loc)
        self.block_dim = compile_tuple([task.block_dim], f"{what} block_dim", task.loc)
        self.loads, self.stores = kernel_accesses(kernel)


def _regions(task, regions, params, geo):
    """An evaluator env -> the boxes of ``regions`` (None: the whole of the buffers bound to ``params``)."""
    if regions is None:
        bufs = sorted({task.gm_args[p] for p in params})
        return lambda env: [b for b in (geo.whole(n, env) for n in bufs) if b is not None]
    what = f"task {task.name or task.kernel}"
    plans = []
    for r in regions:
        if r.buffer not in geo.shapes:
            raise PyptoError(f"{what} names a region of unknown buffer '{r.buffer}'", loc=task.loc)
        fn = compile_tuple(list(r.offsets) + list(r.extents), f"{what} region of {r.buffer}", task.loc)
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


class Submissions(list):
    """The submissions of a run (lists of task instances), and the data scalars the control program read
    after its last instance (``trailing_reads``: no instance follows to charge them to). ``staged``: how
    many of the first submissions the backend was handed while the program was expanded (``sync``);
    ``syncs``: the reads that waited for tasks (``SyncRead``), in program order."""
    trailing_reads = 0
    staged = 0
    syncs: list = []


class SyncRead:
    """A data scalar read from a tensor the program computes: where, which element, the task instances it
    waited for, and how long the control program waited for them (``waited``: sim cycles, None where the
    backend does not say)."""
    __slots__ = ("read", "index", "producers", "waited")

    def __init__(self, read, index, producers, waited=None):
        self.read, self.index, self.producers, self.waited = read, index, producers, waited


def sync_notes(syncs) -> list:
    """The report's lines for the synchronising reads: one per pypto.item line and tensor, in program order."""
    groups: dict = {}
    for s in syncs:
        r = s.read
        groups.setdefault((r.loc.file if r.loc else None, r.loc.line if r.loc else None, r.buffer), []).append(s)
    out = []
    for (file, line, buffer), group in groups.items():
        where = f" at {file}:{line}" if file is not None else ""
        first = ", ".join(map(str, group[0].index))
        times = f"{len(group)} elements (first {buffer}[{first}])" if len(group) > 1 else f"{buffer}[{first}]"
        waits = [s.waited for s in group if s.waited is not None]
        waited = f"; the AICPU waited {sum(waits):.0f} cycles for them (longest {max(waits):.0f})" if waits else ""
        out.append(f"pypto.item{where} read {times} of a tensor this program computes, each once the tasks "
                   f"writing it had finished{waited}")
    return out


class _Slot:
    """The submission a loop's iterations go to (``stitch`` of them), made on its first task; a staged
    sync closes it (what was handed to the backend is not added to)."""
    __slots__ = ("items", "epoch")

    def __init__(self):
        self.items, self.epoch = None, -1


def expand(graph, env: dict, geo, stitch: int = 1, instance=TaskInstance, sync=None):
    """(task instances in program order with their dependencies, submissions: lists of instances, a
    ``Submissions``).

    A Task outside any loop is a submission of its own; so are ``stitch`` consecutive iterations of
    an outermost loop. ``instance``: the TaskInstance (sub)class to make.

    ``sync(pending, producers, instances)``: how the backend runs a staged program. When a data scalar
    reads an element some expanded task writes (a tensor the program computes), the expansion stops there
    and calls it with the submissions not yet handed over (``pending``) and the ids of the instances
    writing the element (as the dependency model knows them); it returns once they are done (its value:
    the cycles the control program waited, or None), the element is read and the expansion goes on.
    Without ``sync`` (a backend that cannot stage) such a read is an error."""
    plans: dict = {}                # id(task) -> (TaskPlan, reads evaluator, writes evaluator)
    tracker = DependencyTracker(geo)
    instances: list = []
    submissions: list = []
    stitch = max(1, int(stitch))
    loop_names: set = set()
    reads = getattr(graph, "scalar_reads", None) or {}
    top = bind(env, reads, lambda name: _data_of(geo.bufs, name, env))
    reader = top.reader
    done_reads = [0]
    stage = {"handed": 0, "epoch": 0}
    syncs: list = []

    def before_read(r, idx, cur_env):
        box = geo.box(r.buffer, idx, (1,) * len(idx), cur_env) if r.buffer in geo.shapes else None
        producers = sorted(tracker.writers(box)) if box is not None else []
        if not producers:
            b = graph.buffers.get(geo.bufs.base_of(r.buffer)) if r.buffer in geo.shapes else None
            if r.source is not None and (b is None or b.role != "constant"):
                raise PyptoError(f"pypto.item reads {r.buffer}[{', '.join(map(str, idx))}], an element of a tensor "
                                 "this program computes, but no task has written it when the control program "
                                 "reads it", loc=r.loc,
                                 hint="read an element the program writes before the read (not one left "
                                      "unwritten by a loop of zero trips or a view's valid shape)")
            return
        if sync is None:
            raise PyptoError(f"pypto.item reads '{r.buffer}', which this program computes: this backend cannot "
                             "run the control program in stages yet (not supported on npu yet)", loc=r.loc,
                             hint="compute the value in a program of its own and pass it in as an argument")
        pending = submissions[stage["handed"]:]
        stage["handed"] = len(submissions)
        stage["epoch"] += 1
        waited = sync(pending, producers, instances)
        syncs.append(SyncRead(r, idx, producers, waited))

    if reader is not None:
        reader.before = before_read

    def plan_of(task):
        hit = plans.get(id(task))
        if hit is None:
            p = TaskPlan(task, graph, geo.shapes, env)
            hit = plans[id(task)] = (p, _regions(task, task.reads, p.loads, geo),
                                     _regions(task, task.writes, p.stores, geo))
        return hit

    def add(task, cur_env, slot):
        p, read_boxes, write_boxes = plan_of(task)
        scalars = dict(zip(p.scalar_names, p.scalars(cur_env)))
        (block_dim,) = p.block_dim(cur_env)
        loop_vals = {k: v for k, v in cur_env.items() if k in loop_names}
        label = task.name or task.kernel
        if loop_vals:
            label += "[" + ", ".join(f"{k}={v}" for k, v in loop_vals.items()) + "]"
        reads, writes = read_boxes(cur_env), write_boxes(cur_env)      # may read data scalars (and sync)
        inst = instance(len(instances), task, p, scalars, cur_env, int(block_dim), label)
        if reader is not None:
            inst.control_reads, done_reads[0] = reader.count - done_reads[0], reader.count
        if task.reads is not None:
            inst.read_boxes = reads
        if task.writes is not None:
            inst.write_boxes = writes
        inst.deps = tracker.add(inst.id, reads, writes)
        instances.append(inst)
        if slot is None:
            submissions.append([inst])
            return
        if slot.items is None or slot.epoch != stage["epoch"]:
            slot.items, slot.epoch = [], stage["epoch"]
            submissions.append(slot.items)
        slot.items.append(inst)

    def rec(items, cur_env, slot):
        group = None
        for it in items:
            if isinstance(it, Loop):
                loop_names.add(it.var.name)
                start, stop, step = compile_tuple([it.start, it.stop, it.step], f"loop {it.var}", it.loc)(cur_env)
                if step == 0:
                    raise PyptoError(f"loop {it.var} has step 0", loc=it.loc)
                for k, v in enumerate(range(start, stop, step)):
                    inner = slot
                    if slot is None:
                        if k % stitch == 0:
                            group = _Slot()
                        inner = group
                    rec(it.body, cur_env.child(it.var.name, v), inner)
            elif isinstance(it, Task):
                add(it, cur_env, slot)
            else:
                raise PyptoError(f"unknown control-program item {it!r}")

    rec(graph.program, top, None)
    if reads:
        _check_unwritten(reads, instances, geo.bufs)
    out = Submissions(submissions)
    out.staged, out.syncs = stage["handed"], syncs
    if reader is not None:
        out.trailing_reads = reader.count - done_reads[0]
    return instances, out


def _data_of(bufs, name, env):
    """The data of buffer ``name`` for a data-scalar read (an argument: the caller's tensor in a
    timing-only run; a computed tensor: its GM buffer, a view of its base included)."""
    t = bufs.tensors.get(name)
    if hasattr(t, "dtype"):
        return t
    arg = getattr(bufs, "args", {}).get(name)
    if arg is None and name in bufs.shapes and not bufs.timing_only:
        return bufs.get(name, env)
    if bufs.timing_only and any(r.buffer == name and r.source is not None for r in bufs.graph.scalar_reads.values()) \
            and bufs.graph.buffers[name].role == "input":
        return None             # an argument's new value: its old data would be a silent wrong read
    return arg


def _check_unwritten(reads, instances, bufs) -> None:
    """A data scalar of an argument is read from one no task writes (so the read waits for no task)."""
    written = written_bases(instances, bufs)
    for r in reads.values():
        if getattr(r, "source", None) is None and bufs.base_of(r.buffer) in written:
            raise PyptoError(f"pypto.item reads '{r.buffer}', which a task of this program writes: the control "
                             "program reads scalars only from arguments no task writes", loc=r.loc)


def written_bases(instances, bufs) -> set:
    """Base buffers some task stores to (by its kernel's stores, whatever its regions say)."""
    return {bufs.base_of(inst.task.gm_args[p]) for inst in instances for p in inst.plan.stores
            if p in inst.task.gm_args}

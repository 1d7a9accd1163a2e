"""Runs an ExecutionGraph's control program on the CPU: binds GM buffers to tensors, expands loops
with their run-time trip counts into task instances, orders them by the GM regions they read and
write (RAW / WAR / WAW in program order) and launches them, independent ones side by side."""
from __future__ import annotations

import math
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import torch

from ...errors import PyptoError, ShapeError, SymbolicError
from ...ir.execution import ExecutionGraph, Loop, Task
from ...symbolic import evaluate


@dataclass
class TaskInstance:
    index: int
    task: Task
    ints: dict
    reals: dict
    block_dim: int
    accesses: list                     # (base buffer, first element, last element + 1, is_write)
    deps: set = field(default_factory=set)
    launch: object = None              # the marshalled launch (library.PreparedLaunch), made on first use


def bind_env(graph: ExecutionGraph, args: dict, env: dict | None) -> dict:
    """Size symbols by name: the caller's, plus those a bare-symbol dim of an argument's shape gives."""
    out = {str(getattr(k, "name", k)): int(v) for k, v in (env or {}).items()}
    for name, t in args.items():
        b = graph.buffers.get(name)
        if b is None or b.view_of is not None or not isinstance(t, torch.Tensor):
            continue
        if len(t.shape) != len(b.shape):
            raise ShapeError(f"argument '{name}' has shape {list(t.shape)}, the program's buffer is "
                             f"{len(b.shape)}-d {list(b.shape)}")
        for d, a in zip(b.shape, t.shape):
            if getattr(d, "is_Symbol", False):
                if d.name in out and out[d.name] != a:
                    raise ShapeError(f"size {d.name} is {out[d.name]} but argument '{name}' has {a} there")
                out.setdefault(d.name, int(a))
    return out


class Buffers:
    """The tensor of every buffer (arguments, allocated outputs / workspaces, views of their bases)."""

    def __init__(self, graph: ExecutionGraph, args: dict, env: dict, shapes: dict | None = None,
                 workspaces: dict | None = None):
        self.graph = graph
        self.workspaces = workspaces or {}     # name -> tensor of that shape to use for a workspace
        self.shapes = shapes if shapes is not None else \
            {n: tuple(evaluate(d, env) for d in b.shape) for n, b in graph.buffers.items()}
        self.tensors: dict[str, torch.Tensor] = {}
        self.base: dict[str, tuple[str, int]] = {}      # name -> (base buffer, element offset in base)
        self.copy_back: list = []
        for name in args:
            if name not in graph.buffers:
                raise PyptoError(f"argument '{name}' is not a buffer of the program "
                                 f"(buffers: {', '.join(graph.buffers)})")
        for name, b in graph.buffers.items():
            if b.view_of is None:
                self.tensors[name] = self._own(name, b, args.get(name))
                self.base[name] = (name, 0)
        for name, b in graph.buffers.items():
            if b.view_of is not None:
                self._view(name, env)

    def _own(self, name, b, t):
        shape = self.shapes[name]
        if t is None and b.role == "constant" and getattr(b, "data", None) is not None:
            t = b.data                       # a constant captured at trace time
        if t is None:
            if b.role in ("input", "constant"):
                raise PyptoError(f"input '{name}' ({b.dtype}{list(b.shape)}) has no argument")
            kept = self.workspaces.get(name) if b.role == "workspace" else None
            if kept is not None and tuple(kept.shape) == shape and kept.dtype == b.dtype.torch_dtype:
                return kept
            return torch.empty(shape, dtype=b.dtype.torch_dtype)
        if not isinstance(t, torch.Tensor):
            raise PyptoError(f"argument '{name}' is a {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != b.dtype.torch_dtype:
            from ...errors import DTypeError
            raise DTypeError(f"argument '{name}' is {t.dtype}, the program expects {b.dtype.torch_dtype}")
        if tuple(t.shape) != shape:
            raise ShapeError(f"argument '{name}' has shape {list(t.shape)}, the program expects {list(shape)}")
        if t.device.type != "cpu":
            raise PyptoError(f"argument '{name}' is on {t.device}; the cpu backend takes CPU tensors")
        if not t.is_contiguous():
            c = t.contiguous()
            self.copy_back.append((name, t, c))
            return c
        return t

    def _view(self, name, env):
        chain, b, offset = [], self.graph.buffers[name], 0
        while b.view_of is not None:
            if b.name in chain:
                raise PyptoError(f"buffer '{name}' is a view of itself")
            chain.append(b.name)
            base = self.graph.buffers[b.view_of]
            offset = offset * b.dtype.itemsize // base.dtype.itemsize + evaluate(b.view_offset, env)
            b = base
        raw = self.tensors[b.name].reshape(-1)
        vb = self.graph.buffers[name]
        n = math.prod(self.shapes[name])
        start = offset * b.dtype.itemsize
        nbytes = n * vb.dtype.itemsize
        flat = raw.view(torch.uint8)
        if start < 0 or start + nbytes > flat.numel():
            raise ShapeError(f"view '{name}' ({vb.dtype}{list(self.shapes[name])}) runs past its base '{b.name}'")
        self.tensors[name] = flat[start:start + nbytes].view(vb.dtype.torch_dtype).view(self.shapes[name])
        self.base[name] = (b.name, start // b.dtype.itemsize)

    def span(self, name, offsets, extents):
        """(base, first element, last element + 1) of a box of buffer ``name`` (conservative)."""
        base, off = self.base[name]
        shape = self.shapes[name]
        if any(e <= 0 for e in extents):
            return None
        first = last = 0
        stride = 1
        for d in range(len(shape) - 1, -1, -1):
            first += offsets[d] * stride
            last += (offsets[d] + extents[d] - 1) * stride
            stride *= shape[d]
        scale = self.graph.buffers[name].dtype.itemsize / self.graph.buffers[base].dtype.itemsize
        return base, off + int(first * scale), off + int(math.ceil((last + 1) * scale))

    def whole(self, name):
        shape = self.shapes[name]
        return self.span(name, [0] * len(shape), list(shape))


def _kernel_gm_use(kernel):
    """GM params the kernel's blocks load from and store to."""
    loads, stores = set(), set()
    for b in kernel.blocks:
        for ins in b.instructions():
            for o in ins.operands:
                if hasattr(o, "param"):
                    (stores if ins.spec.kind == "store" else loads).add(o.param)
    return loads, stores


def written_bases(graph: ExecutionGraph, instances, buffers: Buffers) -> set:
    """Base buffers that some task stores to (by its kernel's TSTOREs, whatever its regions say)."""
    stores = {name: _kernel_gm_use(k)[1] for name, k in graph.kernels.items()}
    return {buffers.base[inst.task.gm_args[p]][0] for inst in instances
            for p in stores.get(inst.task.kernel, ()) if p in inst.task.gm_args}


def expand(graph: ExecutionGraph, env: dict, buffers: Buffers, abis: dict) -> list[TaskInstance]:
    """Task instances in control-program order, loops expanded with run-time trip counts."""
    out: list[TaskInstance] = []
    use = {name: _kernel_gm_use(k) for name, k in graph.kernels.items()}

    def ev(e, scope, what, task):
        try:
            return evaluate(e, scope)
        except SymbolicError as err:
            raise SymbolicError(f"{what} of task {task.name or task.kernel}: {err.message}", loc=task.loc) from None

    def visit(items, scope):
        for it in items:
            if isinstance(it, Loop):
                start, stop, step = (evaluate(x, scope) for x in (it.start, it.stop, it.step))
                for i in range(start, stop, step):
                    visit(it.body, {**scope, it.var.name: i})
                continue
            task = it
            if task.kernel not in graph.kernels:
                raise PyptoError(f"task {task.name or task.kernel} launches kernel '{task.kernel}', which the graph "
                                 f"does not have", loc=task.loc)
            abi = abis[task.kernel]
            for g in abi.gm:
                if g.name not in task.gm_args:
                    raise PyptoError(f"task {task.name or task.kernel} binds no buffer to GM param {g.name}",
                                     loc=task.loc)
            values = {n: ev(e, scope, f"scalar {n}", task) if not isinstance(e, float) else e
                      for n, e in task.scalars.items()}
            sizes = _sizes(abi, task, buffers, scope)
            ints, reals = {}, {}
            for a in abi.ints:
                v = values.get(a.name, sizes.get(a.name, scope.get(a.name)))
                if v is None:
                    raise PyptoError(f"task {task.name or task.kernel}: no value for {a.name} of kernel "
                                     f"{task.kernel}", loc=task.loc)
                ints[a.name] = int(v)
            for a in abi.reals:
                v = values.get(a.name, scope.get(a.name))
                if v is None:
                    raise PyptoError(f"task {task.name or task.kernel}: no value for {a.name}", loc=task.loc)
                reals[a.name] = float(v)
            block_dim = int(ev(task.block_dim, scope, "block_dim", task))
            loads, stores = use[task.kernel]
            acc = _accesses(task.reads, loads, False, task, buffers, scope) + \
                _accesses(task.writes, stores, True, task, buffers, scope)
            out.append(TaskInstance(len(out), task, ints, reals, block_dim, acc))

    visit(graph.program, dict(env))
    return out


def _sizes(abi, task, buffers, scope):
    """Values of a kernel's size symbols from the shapes of the buffers bound to its GM params."""
    sizes = {}
    for g in abi.gm:
        shape = buffers.shapes[task.gm_args[g.name]]
        if len(shape) != len(g.shape):
            raise ShapeError(f"task {task.name or task.kernel}: GM param {g.name} is {len(g.shape)}-d but buffer "
                             f"{task.gm_args[g.name]} is {list(shape)}", loc=task.loc)
        for d, v in zip(g.shape, shape):
            if getattr(d, "is_Symbol", False):
                if sizes.setdefault(d.name, v) != v:
                    raise ShapeError(f"task {task.name or task.kernel}: size {d.name} is both {sizes[d.name]} and {v}",
                                     loc=task.loc)
    for g in abi.gm:
        shape = buffers.shapes[task.gm_args[g.name]]
        for d, v in zip(g.shape, shape):
            if not isinstance(d, int) and not getattr(d, "is_Symbol", False) and hasattr(d, "free_symbols"):
                try:
                    want = evaluate(d, {**scope, **sizes})
                except SymbolicError:
                    continue
                if want != v:
                    raise ShapeError(f"task {task.name or task.kernel}: GM param {g.name} dim {d} = {want} but buffer "
                                     f"{task.gm_args[g.name]} has {v}", loc=task.loc)
            elif isinstance(d, int) and d != v:
                raise ShapeError(f"task {task.name or task.kernel}: GM param {g.name} has a dim of {d} but buffer "
                                 f"{task.gm_args[g.name]} is {list(shape)}", loc=task.loc)
    return sizes


def _accesses(regions, params, is_write, task, buffers, scope):
    out = []
    if regions is None:
        for p in sorted(params):
            s = buffers.whole(task.gm_args[p])
            if s:
                out.append((*s, is_write))
        return out
    for r in regions:
        offs = [evaluate(o, scope) for o in r.offsets]
        exts = [evaluate(e, scope) for e in r.extents]
        s = buffers.span(r.buffer, offs, exts)
        if s:
            out.append((*s, is_write))
    return out


def link(instances: list[TaskInstance]) -> None:
    """Each instance's dependencies on earlier ones whose accesses conflict with its own."""
    history: dict[str, list] = {}
    for inst in instances:
        for base, lo, hi, w in inst.accesses:
            for (plo, phi, pw, j) in history.get(base, ()):
                if (w or pw) and lo < phi and plo < hi and j != inst.index:
                    inst.deps.add(j)
        for base, lo, hi, w in inst.accesses:
            entries = history.setdefault(base, [])
            if w:     # everything this write covers is ordered before it
                entries[:] = [e for e in entries if not (lo <= e[0] and e[1] <= hi)]
            entries.append((lo, hi, w, inst.index))


def execute(instances: list[TaskInstance], launch, threads: int) -> None:
    """Launch every instance after its dependencies; ``launch(inst, n_threads)`` runs one."""
    if threads <= 1 or len(instances) <= 1 or all(i.block_dim >= threads for i in instances):
        for inst in instances:
            launch(inst, threads)
        return
    link(instances)
    done: set[int] = set()
    free = threads
    lock = threading.Lock()
    pending = list(instances)
    running = {}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while pending or running:
            started = True
            while started:
                started = False
                for inst in pending:
                    if free <= 0:
                        break
                    if inst.deps <= done:
                        n = max(1, min(free, inst.block_dim))
                        with lock:
                            free -= n
                        running[pool.submit(launch, inst, n)] = (inst, n)
                        pending.remove(inst)
                        started = True
                        break
            if not running:
                raise PyptoError("the cpu backend's task order has a cycle")
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in finished:
                inst, n = running.pop(fut)
                fut.result()
                done.add(inst.index)
                free += n

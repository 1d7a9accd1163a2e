"""``torch.compile(model, backend="pypto")``: the torch.compile backend, registered through the
``torch_dynamo_backends`` entry point (setup.py).

Dynamo hands over an FX graph of torch calls; AOT autograd turns it into ATen graphs (forward,
backward, or one inference graph) with core ATen decompositions. Each ATen graph is cut into
partitions of the ops pypto supports (pypto/fx/rules.py); the rest stays in eager
between them. Every partition is converted into a TensorGraph, compiled with
``pypto.backends.compile_graph`` and run with ``Compiled.run``. Anything that fails in pypto —
conversion, compilation, or a run — is logged on the ``pypto.dynamo`` logger and that partition runs
in eager instead: a slower answer, never a wrong one.

Options (``torch.compile(..., options={...})``):
  backend      reference | sim | cpu | npu   (default: pypto.get_backend())
  machine      machine name for the lowered backends (a2a3, a5)
  dump         directory (else PYPTO_DUMP): per partition, the ATen graph, the TensorGraph and the backend's
               stages (pypto/ir/dump.py)
  strict       raise instead of falling back to eager (for debugging a model's conversion)
  check        compare each partition with eager the first time it runs at each size (default: on for
               the lowered backends, off for reference); a mismatch logs and falls back to eager
  probe        on a lowered backend, compile each kind of ATen node alone first and keep those its
               lowering cannot compile in eager (default False: support is decided from the rules and
               each partition is compiled once; only a partition that fails to compile has its nodes
               probed, and is split around those that fail alone; see pypto/fx/probe.py)
  timing_only, trace   passed to the runtime, as in pypto.jit
"""
from __future__ import annotations

import collections
import functools
import itertools
import logging
import sys
import time
from dataclasses import dataclass

import torch

from .errors import PyptoError, SourceLoc, _is_internal


def _check_real_package() -> None:
    """A folder named pypto without __init__.py ahead of the installed package on sys.path (the
    parent folder of a checkout as the working directory) makes `import pypto` an empty namespace
    package: pypto/__init__.py never runs, no op is registered, and every ATen op would stay in
    eager as "unknown op". Say so instead."""
    package = sys.modules[__package__]
    if getattr(package, "__file__", None) is None:
        folders = ", ".join(list(getattr(package, "__path__", [])))
        frame = sys._getframe(1)        # the user's line, past importlib's frames (frozen ones too)
        while frame is not None and (frame.f_code.co_filename.startswith("<") or _is_internal(frame.f_code.co_filename)):
            frame = frame.f_back
        loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) if frame else None
        raise PyptoError(f"torch.compile(backend='pypto'): 'import pypto' found a folder without __init__.py "
                         f"({folders}), an empty namespace package, not the installed pypto, so no pypto op "
                         f"is registered. Run from another folder (not the parent of a pypto checkout), or "
                         f"take that folder off sys.path / PYTHONPATH.", loc=loc)


_check_real_package()

from . import backends  # noqa: E402  (after the check: pypto's modules need the real package)
from .ir.dump import TENSOR_STAGES, Dump, dump_root, open_tensor_dump  # noqa: E402

log = logging.getLogger("pypto.dynamo")

# what happened so far (tests and benchmarks read these): graphs (ATen graphs received), partitions
# (compiled through pypto), fallbacks (partitions left in eager after a pypto failure), run_fallbacks,
# eager_ops (ATen nodes left in eager because pypto has no rule for them), runs (pypto partition calls)
counters: collections.Counter = collections.Counter()
# the most recently compiled pypto partitions (PyptoPartition modules), and the most recent reasons
# for running something in eager after all ((name, why)), for inspection
partitions: collections.deque = collections.deque(maxlen=64)
failures: collections.deque = collections.deque(maxlen=64)
# seconds spent in pypto: "compile" (partitioning, probes, conversion, lowering), "run" (partition calls)
timings: collections.Counter = collections.Counter()
# per ATen graph received, what became of each of its ops (GraphRecord): what explain() reports
records: collections.deque = collections.deque(maxlen=256)
_graph_ids = itertools.count()

OPTIONS = ("backend", "machine", "dump", "strict", "check", "probe", "timing_only", "trace")
# check: tolerance (rtol, atol relative to the output's largest magnitude) per result dtype
CHECK_TOLERANCE = {torch.float32: (1e-3, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


@dataclass(frozen=True)
class Options:
    backend: str
    machine: str | None = None
    dump: str | None = None
    strict: bool = False
    check: bool | None = None       # None: on for lowered backends
    probe: bool = False
    timing_only: bool = False
    trace: str | None = None

    @property
    def checks(self) -> bool:
        return self.backend != "reference" if self.check is None else bool(self.check)

    @property
    def compile_options(self) -> dict:
        return {"machine": self.machine, "dump": self.dump, "timing_only": self.timing_only, "trace": self.trace}


def parse_options(options: dict | None) -> Options:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise PyptoError(f"torch.compile(backend='pypto'): unknown option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(OPTIONS)}")
    backend = backends.check_backend(options.pop("backend", None) or backends.get_backend())
    return Options(backend=backend, **options)


def reset() -> None:
    counters.clear()
    partitions.clear()
    failures.clear()
    timings.clear()
    records.clear()


@dataclass
class PartitionRecord:
    """One pypto partition: its ATen ops, whether they run in pypto, and what compiling it cost."""
    name: str
    ops: list                       # the ATen ops it holds (op names), counted as in GraphRecord
    status: str = "pypto"           # "pypto", or "eager" after a failure (compile or run time)
    reason: str | None = None       # why it runs in eager
    compile_s: float = 0.0          # CPU seconds converting and compiling it (process time)
    first_run_s: float | None = None   # CPU seconds of its first call (the cpu backend builds its C++ then)


@dataclass
class GraphRecord:
    """One ATen graph (forward, backward or inference) AOT autograd handed over."""
    name: str
    total_ops: int                  # ATen ops (call_function nodes; getitem and SymInt arithmetic not counted)
    eager_ops: collections.Counter  # (op, why) -> how many ops of the graph pypto left in eager from the start
    partitions: list

    @property
    def captured_ops(self) -> int:
        return sum(len(p.ops) for p in self.partitions if p.status == "pypto")


def counted(node) -> bool:
    """An ATen op of the captured-fraction count: a call, not a getitem, not SymInt arithmetic."""
    import operator
    return node.op == "call_function" and node.target is not operator.getitem and not _is_size_math(node)

# ============================================================================ the backend
def pypto_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, mode=None, **kwargs):
    """The ``torch_dynamo_backends`` entry point ``pypto``."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.exc import RestartAnalysis

    from .fx.locations import remember_locations
    from .fx.pre_autograd import rewrite_sdpa
    opts = parse_options(options)
    remember_locations(gm)
    rewrite_sdpa(gm)
    if mode not in (None, "default") or kwargs:
        log.info("pypto backend ignores mode=%r and %s", mode, sorted(kwargs))
    gid = next(_graph_ids)

    def compiler(kind):
        def compile_aten(aten_gm, aten_inputs):
            start = time.perf_counter()
            try:
                return make_boxed_func(partition_and_compile(aten_gm, f"dynamo{gid}_{kind}", opts))
            finally:
                timings["compile"] += time.perf_counter() - start
        return compile_aten

    aot = aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw"),
                       inference_compiler=compiler("inf"), decompositions=decompositions())
    try:
        return aot(gm, example_inputs)
    except RestartAnalysis:
        raise
    except Exception as e:
        if opts.strict:
            raise
        counters["fallbacks"] += 1
        failures.append((f"dynamo{gid}", _why(e)))
        log.warning("pypto: AOT autograd failed on dynamo graph %d, running it in eager: %s", gid, _why(e))
        return gm.forward


def decompositions() -> dict:
    """Core ATen decompositions (less those that are wrong under autograd: fx/pre_autograd.py), plus
    those of the composite ops pypto has no function for yet."""
    from .fx.rules import DECOMPOSABLE, RULES
    return _decompositions(tuple(op for op in DECOMPOSABLE if RULES[op].missing()))


@functools.lru_cache(maxsize=8)
def _decompositions(extra: tuple) -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions
    from .fx.fastpath import DECOMPOSITIONS as FASTPATH_DECOMPOSITIONS
    from .fx.pre_autograd import EXCLUDED_DECOMPOSITIONS
    table = dict(core_aten_decompositions())
    for op in EXCLUDED_DECOMPOSITIONS:
        table.pop(op, None)
    table.update(get_decompositions(list(extra)))
    table.update(FASTPATH_DECOMPOSITIONS)
    return table


# ============================================================================ partitioning
def partition_and_compile(gm: torch.fx.GraphModule, name: str, opts: Options, record: GraphRecord | None = None,
                          retry: bool = True) -> torch.fx.GraphModule:
    """Cut ``gm`` into pypto partitions and eager ops; compile each partition. Returns ``gm`` with every
    partition replaced by a submodule that runs it through pypto (or in eager after a failure).
    ``record``: the GraphRecord of the graph ``gm`` is a piece of (a partition being split again)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase
    from .fx.rules import is_compute, unsupported_reason
    from .fx.probe import probe

    left: collections.Counter = collections.Counter()
    if record is None:
        counters["graphs"] += 1
        record = GraphRecord(name, sum(1 for n in gm.graph.nodes if counted(n)), collections.Counter(), [])
        records.append(record)

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            why = unsupported_reason(node)
            if why is None and opts.probe:
                why = probe(node, opts.backend, opts.compile_options)
            if why is not None and node.op == "call_function" and not _is_size_math(node):
                left[why] += 1
                if counted(node):
                    record.eager_ops[(str(node.target), why)] += 1
            return why is None

    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions() if any(is_compute(n) for n in p.nodes)]
    if left:
        counters["eager_ops"] += sum(left.values())
        log.info("pypto: %s keeps %d op(s) in eager: %s", name, sum(left.values()),
                 "; ".join(f"{why} (x{k})" for why, k in left.items()))
    if not partitions:
        log.info("pypto: %s has nothing pypto can run", name)
        return gm
    fused = partitioner.fuse_partitions(partitions, prefix="pypto_")
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("pypto_"):
            sub = getattr(fused, node.target)
            setattr(fused, node.target, compile_partition(sub, f"{name}_{node.target}", opts, record, retry))
    return fused


def _is_size_math(node) -> bool:
    """SymInt arithmetic (s0 * s1, sym_size) stays in Python; not worth a log line."""
    return isinstance(node.meta.get("val"), torch.SymInt)


def compile_partition(sub: torch.fx.GraphModule, name: str, opts: Options,
                      graph_record: GraphRecord | None = None, retry: bool = False) -> torch.nn.Module:
    from .fx.convert import convert
    dump = None
    record = PartitionRecord(name, [str(n.target) for n in sub.graph.nodes if counted(n)])
    if graph_record is not None:
        graph_record.partitions.append(record)
    start = time.process_time()
    try:
        conv = convert(sub, name)
        dump = open_tensor_dump(conv.graph, opts.dump, level=DUMP_LEVEL)
        if dump is not None:
            dump.write("aten", text=sub.code, ext="py")
        compiled = backends.compile_graph(conv.graph, opts.backend, {**opts.compile_options, "dump": dump})
    except Exception as e:
        if dump is None:
            _dump_unconverted(opts.dump, name, sub)
        record.status, record.reason = "eager", _why(e)
        record.compile_s = time.process_time() - start
        if retry and not opts.strict:
            split = _split_around_probes(sub, name, opts, graph_record, record)
            if split is not None:
                return split
        if opts.strict:
            raise
        counters["fallbacks"] += 1
        failures.append((name, _why(e)))
        log.warning("pypto: partition %s runs in eager: %s", name, _why(e))
        return sub
    record.compile_s = time.process_time() - start
    counters["partitions"] += 1
    log.debug("pypto: compiled %s on %s:\n%s", name, opts.backend, conv.graph)
    part = PyptoPartition(name, sub, conv, compiled, opts, record)
    partitions.append(part)
    return part


def _split_around_probes(sub, name, opts: Options, graph_record, record):
    """A partition that failed to compile: probe its nodes (each compiled alone, pypto/fx/probe.py) and,
    when some fail alone, partition it again without them (each piece compiled once). None when no
    node fails alone (the failure is the combination: the whole partition runs in eager)."""
    from dataclasses import replace
    from .fx.probe import probe
    if opts.backend == "reference":
        return None
    bad = [n for n in sub.graph.nodes if n.op == "call_function" and probe(n, opts.backend, opts.compile_options)]
    if not bad:
        return None
    log.info("pypto: partition %s did not compile (%s); split around %d op(s) that do not compile alone",
             name, record.reason, len(bad))
    if graph_record is not None:
        graph_record.partitions.remove(record)
    return partition_and_compile(sub, name, replace(opts, probe=True), graph_record, retry=False)


def _why(e: Exception) -> str:
    return e.message if isinstance(e, PyptoError) else f"{type(e).__name__}: {e}"


DUMP_LEVEL = "torch.compile partition"


def _dump_unconverted(root, name, sub) -> None:
    """A partition pypto could not convert still shows its ATen graph in the dump."""
    if dump_root(root) is not None:
        Dump.open(dump_root(root), TENSOR_STAGES, name, DUMP_LEVEL).write("aten", text=sub.code, ext="py")


# ============================================================================ running
class PyptoPartition(torch.nn.Module):
    """One partition compiled by pypto; runs its eager FX module instead once pypto has failed on it."""

    def __init__(self, name, eager: torch.fx.GraphModule, conv, compiled, opts: Options, record=None):
        super().__init__()
        self.name, self.eager, self.conv, self.compiled, self.opts = name, eager, conv, compiled, opts
        self.record = record or PartitionRecord(name, [str(n.target) for n in eager.graph.nodes if counted(n)])
        self.last_report = None
        self.checked_sizes: set = set()      # size bindings already compared with eager
        self.bound: dict = {}                # argument signature -> _bound_sizes

    def forward(self, *args):
        if self.compiled is None:
            return self.eager(*args)
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            result = self._run(args)
        except Exception as e:
            self.record.status, self.record.reason = "eager", "at run time: " + _why(e)
            if self.opts.strict:
                raise
            counters["run_fallbacks"] += 1
            failures.append((self.name, _why(e)))
            log.warning("pypto: partition %s failed at run time, running it in eager from now on: %s",
                        self.name, _why(e))
            self.compiled = None
            return self.eager(*args)
        finally:
            timings["run"] += time.perf_counter() - start
            if self.record.first_run_s is None:
                self.record.first_run_s = time.process_time() - cpu_start
        counters["runs"] += 1
        return result

    def _run(self, args):
        conv = self.conv
        bound = self._bound_sizes(args)
        env = bound[0]
        lowered = self.compiled.backend != "reference"
        inputs = [args[i].detach().to(dt) for i, dt in zip(conv.tensor_args, conv.in_dtypes)]
        if lowered:
            inputs = [t.contiguous() for t in inputs]
        outs, self.last_report = self.compiled.run(inputs, env)
        for k, (t, want, dt) in enumerate(zip(outs, bound[1], conv.out_dtypes)):
            if t.shape != want or t.dtype != dt.torch_dtype:
                raise PyptoError(f"output {k} is {t.dtype}{list(t.shape)}, expected {dt.torch_dtype}{list(want)}")
        taken = {args[i].untyped_storage().data_ptr() for i in conv.tensor_args if args[i].numel()}
        results = []
        for kind, k in conv.outputs:
            v = args[k] if kind == "arg" else outs[k]
            if v.numel() and v.untyped_storage().data_ptr() in taken:
                v = v.clone()     # never hand back an alias of an input or of another output
            if v.numel():
                taken.add(v.untyped_storage().data_ptr())
            results.append(v)
        results = [v.to(dt) for v, dt in zip(results, conv.result_dtypes)]
        if self.opts.checks and bound[2] not in self.checked_sizes:
            self._compare_with_eager(args, results)
            self.checked_sizes.add(bound[2])
        return tuple(results) if conv.returns_tuple else results[0]

    def _bound_sizes(self, args) -> tuple:
        """(sizes, output shapes, the sizes' key) of a call, bound once per signature of the arguments
        (tensor shapes, SymInt values)."""
        from . import symbolic as sym
        signature = tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args)
        bound = self.bound.get(signature)
        if bound is None:
            env = self.conv.bind(args)
            bound = (env, [torch.Size(sym.evaluate_all(shape, env)) for shape in self.conv.out_shapes],
                     tuple(sorted(env.items())))
            if len(self.bound) >= 64:
                self.bound.pop(next(iter(self.bound)))
            self.bound[signature] = bound
        return bound

    def _compare_with_eager(self, args, results):
        expected = self.eager(*args)
        expected = list(expected) if self.conv.returns_tuple else [expected]
        for k, (got, want) in enumerate(zip(results, expected)):
            if got.dtype in CHECK_TOLERANCE:
                rtol, atol = CHECK_TOLERANCE[got.dtype]
                scale = want.float().nan_to_num(posinf=0, neginf=0).abs().max().item() if want.numel() else 0
                ok = torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol * max(scale, 1e-6),
                                    equal_nan=True)
            else:
                ok = torch.equal(got, want.to(got.dtype))
            if not ok:
                err = (got.float() - want.float()).abs().nan_to_num(nan=float("inf")).max().item()
                raise PyptoError(f"output {k} differs from eager by {err:.3g} on {self.compiled.backend} "
                                 f"(shape {list(got.shape)}, {got.dtype})")


# ============================================================================ explain
@dataclass
class Explanation:
    """What ``explain`` found: every ATen graph pypto received, its partitions and its eager ops."""
    graphs: list                    # GraphRecord per ATen graph (forward, backward, inference)
    dynamo_graphs: int              # graphs dynamo captured (more than one: a graph break or a recompile)
    wall_s: float                   # the call(s), compilation included

    @property
    def total_ops(self) -> int:
        return sum(g.total_ops for g in self.graphs)

    @property
    def captured_ops(self) -> int:
        return sum(g.captured_ops for g in self.graphs)

    @property
    def captured(self) -> float:
        """The fraction of ATen ops that run in pypto."""
        return self.captured_ops / self.total_ops if self.total_ops else 0.0

    @property
    def partitions(self) -> list:
        return [p for g in self.graphs for p in g.partitions]

    @property
    def fallbacks(self) -> list:
        """(partition, why) for each partition that runs in eager after a pypto failure."""
        return [(p.name, p.reason) for p in self.partitions if p.status != "pypto"]

    @property
    def run_fallbacks(self) -> int:
        return sum(1 for p in self.partitions if p.status != "pypto" and (p.reason or "").startswith("at run time"))

    @property
    def eager_ops(self) -> collections.Counter:
        """(op, why) -> count: ops pypto left in eager from the start (no rule, or the lowering lacks it)."""
        out: collections.Counter = collections.Counter()
        for g in self.graphs:
            out.update(g.eager_ops)
        return out

    def __str__(self) -> str:
        lines = [f"pypto: {self.captured_ops}/{self.total_ops} ATen ops in pypto ({self.captured:.1%}), "
                 f"{len(self.graphs)} ATen graph(s) from {self.dynamo_graphs} dynamo graph(s), "
                 f"{sum(p.status == 'pypto' for p in self.partitions)} partition(s) in pypto, "
                 f"{len(self.fallbacks)} fallback(s) ({self.run_fallbacks} at run time)"]
        for g in self.graphs:
            lines.append(f"  {g.name}: {g.captured_ops}/{g.total_ops} ops in pypto")
            for p in g.partitions:
                first = "" if p.first_run_s is None else f", first run {p.first_run_s:.2f}s"
                state = "pypto" if p.status == "pypto" else f"EAGER: {p.reason}"
                lines.append(f"    {p.name}: {len(p.ops)} ops, compile {p.compile_s:.2f}s{first} -> {state}")
            for (op, why), k in sorted(g.eager_ops.items()):
                lines.append(f"    eager x{k} {op}: {why}")
        return "\n".join(lines)


def explain(model, *args, options: dict | None = None, dynamic: bool | None = None, backward: bool = False,
            **kwargs) -> Explanation:
    """Like ``torch._dynamo.explain``: compile ``model`` with ``backend="pypto"`` (fresh: dynamo and
    pypto's records are reset), call it once on ``args``/``kwargs`` (and, with ``backward=True``,
    backpropagate the sum of its floating outputs) and report the partitions, the captured vs total ATen
    ops, each fallback with its reason and each partition's compile time."""
    torch._dynamo.reset()
    reset()
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = torch.compile(model, backend="pypto", dynamic=dynamic, options=options)
    start = time.perf_counter()
    out = compiled(*args, **kwargs)
    if backward:
        leaves = [t for t in torch.utils._pytree.tree_leaves(out)
                  if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
        if not leaves:
            raise PyptoError("explain(backward=True): the model returned no floating tensor that requires grad")
        sum(t.float().sum() for t in leaves).backward()
    wall = time.perf_counter() - start
    dynamo_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
    return Explanation(list(records), dynamo_graphs, wall)

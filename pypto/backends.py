"""Backend table: how a traced TensorGraph is compiled and run on each backend.

``reference`` interprets the graph with torch; ``sim``, ``cpu`` and ``npu`` lower it through the
pass pipeline into an ExecutionGraph and hand that to their runtime. Backends are looked up by name
and imported lazily, so a missing toolchain never breaks ``import pypto``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import IndexOutOfRangeError, PyptoError

_state = {"backend": "sim"}
KNOWN = ("reference", "sim", "cpu", "npu")


def set_backend(name: str) -> None:
    check_backend(name)
    _state["backend"] = name


def get_backend() -> str:
    return _state["backend"]


def check_backend(name: str) -> str:
    if name not in KNOWN:
        raise PyptoError(f"unknown backend '{name}'; choose one of {', '.join(KNOWN)}")
    return name


@dataclass
class Compiled:
    """What a backend keeps per compiled signature."""
    backend: str
    graph: object            # the TensorGraph
    program: object = None   # the ExecutionGraph (lowered backends)
    options: dict = None
    index_checks: list = None  # runtime.index_bounds: index arguments checked before each run (computed
                               # indices are counted by the run itself: program.index_checks)
    constants: dict = None     # the program's captured constants by buffer name (found at the first run)

    def run(self, inputs, env):
        """-> (outputs in graph.outputs order, report or None)"""
        if self.index_checks:
            from .runtime.index_bounds import check_indices
            check_indices(self.index_checks, inputs, env)
        if self.backend == "reference":
            from .runtime.reference import run_graph
            from .runtime.report import set_last_report
            set_last_report(None)             # a reference run has no report: last_report() says so
            return run_graph(self.graph, inputs, env), None
        runtime = importlib.import_module(f"pypto.runtime.{self.backend}")
        args = dict(zip(self.program.inputs, inputs))
        # constants captured at trace time (pypto.constant / torch tensors in a traced function)
        if self.constants is None:
            self.constants = {name: b.data for name, b in self.program.buffers.items()
                              if b.role == "constant" and b.data is not None}
        args.update({name: t for name, t in self.constants.items() if name not in args})
        known = self._known_sources(inputs, env)
        args.update(known)
        try:
            outs, report = runtime.run(self.program, args, env, **_run_options(self.options))
        except IndexOutOfRangeError as e:
            if e.loc is not None:
                raise
            # a row move's index check (MGATHER / MSCATTER) raised off the caller's thread: at the call
            raise IndexOutOfRangeError(e.message, hint=e.hint) from None
        checked = self.program.index_checks
        if checked:
            from .runtime.index_bounds import check_counts
            check_counts(checked, outs, env)
        counts = {name for name, _ in checked}
        if known and report is not None:
            report.notes.append(f"timing-only: the computed tensors the control program reads "
                                f"({', '.join(sorted(known))}) were computed by the reference interpreter")
        return [outs[name] for name in self.program.outputs if name not in counts], report

    def _known_sources(self, inputs, env) -> dict:
        """A timing-only sim run computes no data: the computed tensors its control program reads
        (pypto.item, ScalarRead.source) by the reference interpreter, by output buffer name (an argument's
        new value stays unknown: that read is an error at its line)."""
        import os
        reads = getattr(self.program, "scalar_reads", None) or {}
        timing = self.options.get("timing_only") or os.environ.get("PYPTO_TIMING_ONLY", "") not in ("", "0")
        sources = {r.source for r in reads.values() if r.source is not None}
        if not (timing and sources and self.backend == "sim"):
            return {}
        from .runtime.reference import run_graph
        values = run_graph(self.graph, inputs, env)
        names = self.program.outputs
        return {names[k]: values[k].contiguous() for k in sorted(sources) if names[k] not in self.program.inputs}


def _run_options(options: dict) -> dict:
    keys = ("machine", "timing_only", "trace")
    return {k: options[k] for k in keys if options.get(k) is not None}


def compile_graph(graph, backend: str, options: dict) -> Compiled:
    """Lower ``graph`` for ``backend``. options: machine, dump (the compilation's dump folder, an
    ir.dump.Dump the front end opened — ir.dump.open_tensor_dump —, or None: no dump, PYPTO_DUMP was
    read by the front end) and the run options (timing_only, trace). A dump gets the traced graph,
    every stage of the lowering and the generated C++ (runtime/dump_cpp.py)."""
    check_backend(backend)
    from .runtime.index_bounds import index_checks
    checks = index_checks(graph)
    dump = options.get("dump")
    if dump is not None:
        dump.write("traced", graph)
    if backend == "reference":
        return Compiled(backend, graph, None, options, checks)
    try:
        pipeline = importlib.import_module("pypto.passes.pipeline")
    except ModuleNotFoundError as e:
        raise PyptoError(f"backend '{backend}' needs the lowering pipeline, which is not available: {e}") from None
    if backend == "cpu":      # g++ compiles the launch runtime (once per cache) while Python lowers the graph
        importlib.import_module("pypto.runtime.cpu").prepare()
    lowering = options.get("lowering") or {}
    unknown = sorted(set(lowering) - set(pipeline.LOWERING_OPTIONS))
    if unknown:
        raise PyptoError(f"lowering option {unknown[0]!r} is not one of {', '.join(pipeline.LOWERING_OPTIONS)}")
    program = pipeline.lower(graph, machine=options.get("machine"), dump=dump if dump is not None else False, **lowering)
    if dump is not None:
        from .runtime.dump_cpp import write_cpp
        write_cpp(dump, program.kernels, options.get("machine"))
    return Compiled(backend, graph, program, options, checks)

"""report.kernel_decisions without sim stats (the cpu backend's every run) is built once per graph and
machine: the same decisions each time, a fresh top-level dict per call (callers may add to it)."""

import pypto
from pypto.machine import machine_spec
from pypto.runtime import report


def test_static_decisions_are_built_once_per_graph():
    from pypto.frontend.api import exp, mul
    from pypto.frontend.jit import trace_callable
    from pypto.frontend.tensor import TensorSpec
    graph = trace_callable(lambda x: mul(exp(x), 2.0), [TensorSpec((64, 96), pypto.float32)], "decisions_cache")
    program = pypto.backends.compile_graph(graph, "cpu", {}).program
    spec = machine_spec(None)
    first = report.kernel_decisions(program, spec)
    calls = []
    real = report._kernel_decisions
    report._kernel_decisions = lambda *a: calls.append(a) or real(*a)
    try:
        second = report.kernel_decisions(program, spec)
    finally:
        report._kernel_decisions = real
    assert first == second and first and not calls          # nothing rebuilt, nothing reprinted
    first["extra"] = 1
    assert "extra" not in report.kernel_decisions(program, spec)
    assert report.kernel_decisions(program, spec, stats={}) == second    # with stats: built afresh

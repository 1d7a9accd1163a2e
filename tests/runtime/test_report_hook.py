"""pypto.runtime.report.on_report(callback): called with the Report of every run on any backend (None for a
run without one, on the reference backend), until unsubscribed; benchmarks/bench_examples.py counts runs
with it."""
import importlib.util
from pathlib import Path

import torch

import pypto
import pypto.tile as pt
from pypto.runtime import report

ROOT = Path(__file__).resolve().parents[2]


def _scale(X, Y):
    i = pt.program_id(0)
    pt.store(Y.tile((16, 64))[i, 0], pt.load(X.tile((16, 64))[i, 0]) * 2.0)


def test_every_run_is_passed_to_the_callback_until_unsubscribed():
    seen, also = [], []
    unsubscribe = report.on_report(seen.append)
    stop_also = report.on_report(also.append)
    X, Y = torch.randn(32, 64), torch.empty(32, 64)
    try:
        pt.kernel(_scale, backend="sim")[(2,)](X, Y)
        torch.testing.assert_close(Y, X * 2)
        assert len(seen) == 1 and seen[0] is pypto.last_report() and seen[0].cycles > 0
        pt.kernel(_scale, backend="reference")[(2,)](X, Y)
        assert seen[1:] == [None] and pypto.last_report() is None
    finally:
        unsubscribe()
    unsubscribe()                                       # a second call is no error
    pt.kernel(_scale, backend="sim")[(2,)](X, Y)
    stop_also()
    assert len(seen) == 2 and len(also) == 3 and also[2] is pypto.last_report()


def test_bench_examples_counts_the_runs_of_a_script(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_examples_under_test", ROOT / "benchmarks" / "bench_examples.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    script = tmp_path / "two_runs.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                      "import torch, pypto.tile as pt, test_report_hook as t\n"
                      "X, Y = torch.randn(32, 64), torch.empty(32, 64)\n"
                      "pt.kernel(t._scale, backend='sim')[(2,)](X, Y)\n"
                      "pt.kernel(t._scale, backend='reference')[(2,)](X, Y)\n")
    monkeypatch.setattr(bench, "ROOT", str(tmp_path))
    before = len(report._listeners)
    runs = bench.cycles_of("two_runs.py")
    assert len(runs) == 2 and runs[0] > 0 and runs[1] is None
    assert len(report._listeners) == before             # unsubscribed after the script

"""Pictures: the benchmarks' roofline chart (pypto/runtime/plots.py) and a report's timeline as a Gantt chart
(pypto/runtime/report_plot.py, ``Report.plot_timeline``). The drawn coordinates are read back from the
returned Figure and compared with figures computed here from the machine file, the problem sizes and the
simulator's Chrome trace; matplotlib itself is an optional extra (the tests that draw skip without it)."""
import ast
import io
import json
import sys
from pathlib import Path

import pytest
import torch

import pypto
from pypto.errors import PyptoError
from pypto.machine import load_machine
from pypto.runtime import sim
from pypto.runtime.plots import PlotUnavailableError, RooflinePoint, point_from_report, roofline_chart
from pypto.runtime.report import Report
from pypto.testing import kernels as S

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
needs_matplotlib = pytest.mark.skipif(
    __import__("importlib").util.find_spec("matplotlib") is None,
    reason="matplotlib (pypto[plot]) is not installed: the charts cannot be drawn")


def _is_png(path) -> bool:
    data = Path(path).read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 1000


def _by_gid(artists):
    return {a.get_gid(): a for a in artists if a.get_gid()}


def _mix_run(trace, m=128):
    """A cube kernel and a vector kernel on 2 clusters (they wait on each other's flags)."""
    k = S.matmul_relu_kernel(m, 64, 64, 64, 64, 32)
    args = {"a": torch.randn(m, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(m, 64),
            "out": torch.empty(m, 64, dtype=torch.float16)}
    return sim.run_kernel(k, args, {}, block_dim=2, trace=str(trace))[1]


# ---------------------------------------------------------------------------------------------- roofline
@needs_matplotlib
def test_roofline_chart_draws_the_machines_roofs_and_each_point(tmp_path):
    spec = load_machine("a2a3")
    raw = spec.raw
    points = [RooflinePoint("matmul", flops=2 * 4096 ** 3, bytes=3 * 4096 ** 2 * 2, seconds=1e-3),
              RooflinePoint("softmax", flops=5 * 8192 * 4096, bytes=2 * 8192 * 4096 * 2, seconds=2e-4), None]
    path = tmp_path / "charts" / "roofline.png"
    fig = roofline_chart(points, spec, path, title="test")
    assert _is_png(path)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    dots = _by_gid(ax.collections)
    assert sorted(dots) == ["point:0", "point:1"]                      # the None entry is left out
    for k, p in enumerate(points[:2]):
        (x, y), = dots[f"point:{k}"].get_offsets()
        assert x == pytest.approx(p.flops / p.bytes) and y == pytest.approx(p.flops / p.seconds)
    lines = _by_gid(ax.get_lines())
    clock = raw["clock_ghz"] * 1e9
    fp16 = lines["roof:cube float16, bfloat16"].get_ydata()
    assert fp16 == pytest.approx([raw["cube"]["float16"] * raw["cores"]["aic"] * clock] * 2)
    fp32_vector = lines["roof:vector fp32"].get_ydata()
    assert fp32_vector == pytest.approx([raw["vector"]["bytes_per_cycle"] / 4 * raw["cores"]["aiv"] * clock] * 2)
    hbm_x, hbm_y = lines["roof:hbm"].get_xdata(), lines["roof:hbm"].get_ydata()
    assert hbm_y / hbm_x == pytest.approx([raw["memory"]["hbm_bytes_per_s"]] * 2)
    # a flat roof starts where the HBM roof reaches it
    assert lines["roof:cube float32"].get_xdata()[0] * raw["memory"]["hbm_bytes_per_s"] == pytest.approx(
        lines["roof:cube float32"].get_ydata()[0])
    legend_texts = [t.get_text() for legend in (ax.get_legend(),) for t in legend.get_texts()]
    assert legend_texts == ["1. matmul", "2. softmax"]


def test_a_simulated_matmul_sits_where_its_flops_and_bytes_put_it():
    m = n = k = 128

    @pypto.jit(backend="sim", timing_only=True)
    def mm(a: pypto.Tensor[[m, k], pypto.float16], b: pypto.Tensor[[k, n], pypto.float16]):
        return pypto.matmul(a, b)

    mm(torch.empty(m, k, dtype=torch.float16), torch.empty(k, n, dtype=torch.float16))
    report = mm.last_report
    p = point_from_report("mm", report)
    flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * 2
    assert p.flops == flops and p.bytes == nbytes
    assert p.intensity == pytest.approx(flops / nbytes)
    assert p.flop_per_s == pytest.approx(flops / (report.cycles / 1.85e9))     # a2a3 runs at 1.85 GHz
    assert point_from_report("cpu", Report(backend="cpu")) is None             # no simulated time: no point


# ---------------------------------------------------------------------------------------------- timeline
def _slices(trace_file):
    """{row label: sorted [(start, end)] of the instructions (waits apart)}, {core: sorted task spans}."""
    data = json.loads(Path(trace_file).read_text())
    events = data["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows, tasks = {}, {}
    for e in events:
        if e["ph"] != "X" or procs[e["pid"]] == "AICPU":
            continue
        span = (e["ts"], e["ts"] + e["dur"])
        if e["tid"] == 0:
            tasks.setdefault(procs[e["pid"]], []).append(span)
        elif e.get("cname") != "grey":
            rows.setdefault(f"{procs[e['pid']]} {threads[(e['pid'], e['tid'])]}", []).append(span)
    return {k: sorted(v) for k, v in rows.items()}, {k: sorted(v) for k, v in tasks.items()}


def _bars(collection):
    """The (start, end) of every bar of a broken_barh collection, sorted."""
    return sorted((float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max())) for p in collection.get_paths())


@needs_matplotlib
def test_timeline_draws_every_instruction_of_every_core_and_pipe(tmp_path):
    report = _mix_run(tmp_path / "t.json")
    fig = report.plot_timeline(tmp_path / "t.png")
    assert _is_png(tmp_path / "t.png")
    ax = fig.axes[0]
    drawn = _by_gid(ax.collections)
    rows, tasks = _slices(report.trace_file)
    assert {"AIC0 M", "AIC0 MTE2", "AIC0 FIX", "AIV0 V", "AIV0 MTE3"} <= set(rows)
    for label, spans in rows.items():
        assert _bars(drawn[f"row:{label}"]) == pytest.approx(spans), label
    for core, spans in tasks.items():
        assert _bars(drawn[f"row:{core} tasks"]) == pytest.approx(spans), core
    assert "row:AICPU dispatch" in drawn
    assert any(g.endswith(":wait") for g in drawn)                     # the stalls on flags are drawn
    boundaries = drawn["task boundaries"]
    assert len(boundaries.get_segments()) == 2 * sum(len(s) for s in tasks.values())
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "AICPU dispatch" and labels.index("AIC0 tasks") < labels.index("AIC0 M")
    # microseconds below, cycles above
    assert "us" in ax.get_xlabel()
    top = ax.child_axes[0]
    assert "cycles" in top.get_xlabel()
    assert ax.get_xlim()[1] >= report.time_us * 0.99 - 1e-9


def _trace(slices, clock_ghz=1.0):
    """A Chrome trace as the simulator writes it, of one core AIV0 whose V pipe ran ``slices``:
    (start us, duration us, kernel); the core's one task spans them all."""
    meta = [("process_name", 0, 0, "AICPU"), ("process_name", 1, 0, "AIV0"), ("thread_name", 1, 0, "tasks"),
            ("thread_name", 1, 4, "V")]
    events = [{"name": n, "ph": "M", "pid": pid, "tid": tid, "args": {"name": v}} for n, pid, tid, v in meta]
    end = max(s + d for s, d, _ in slices)
    events.append({"name": "task", "ph": "X", "ts": 0.0, "dur": end, "pid": 1, "tid": 0, "args": {"block": "k1"}})
    events += [{"name": "TADD", "ph": "X", "ts": s, "dur": d, "pid": 1, "tid": 4, "args": {"block": k}}
               for s, d, k in slices]
    return {"traceEvents": events, "otherData": {"machine": "test", "clock_ghz": clock_ghz}}


@needs_matplotlib
def test_timeline_merges_instructions_across_gaps_under_a_pixel_when_there_are_too_many():
    from pypto.runtime.report_plot import timeline_figure
    # span 2000 us: a pixel is 1 us. Gaps 0.5 and 0.9 close, 1.2 and 5 stay, a change of kernel stays.
    slices = [(0, 10, "k1"), (10.5, 10, "k1"), (21.4, 10, "k1"), (32.6, 10, "k1"), (47.6, 10, "k1"),
              (57.6, 10, "k2"), (1990, 10, "k2")]
    ax = timeline_figure(_trace(slices), max_bars=len(slices)).axes[0]
    assert _bars(_by_gid(ax.collections)["row:AIV0 V"]) == pytest.approx([(s, s + d) for s, d, _ in slices])
    assert "merged" not in ax.get_title()
    ax = timeline_figure(_trace(slices), max_bars=len(slices) - 1).axes[0]
    assert _bars(_by_gid(ax.collections)["row:AIV0 V"]) == pytest.approx(
        [(0, 31.4), (32.6, 42.6), (47.6, 57.6), (57.6, 67.6), (1990, 2000)])
    assert "7 instructions merged" in ax.get_title()
    # the top axis counts cycles: 2000 us at 1.5 GHz
    fig = timeline_figure(_trace(slices, clock_ghz=1.5))
    fig.savefig(io.BytesIO(), format="png")                   # the top axis takes its limits when drawn
    ax = fig.axes[0]
    top = ax.child_axes[0]
    assert top.get_xlim() == pytest.approx([0, ax.get_xlim()[1] * 1.5e3])


@needs_matplotlib
def test_timeline_of_many_cores_shows_a_share_of_each_core_type(tmp_path):
    report = _mix_run(tmp_path / "t.json")
    ax = report.plot_timeline(max_cores=2).axes[0]
    shown = {t.get_text().split()[0] for t in ax.get_yticklabels()} - {"AICPU"}
    assert shown == {"AIC0", "AIV0"} and "2 of 6 cores shown" in ax.get_title()
    ax = report.plot_timeline(cores=["AIC1", "AIV3"]).axes[0]
    assert {t.get_text().split()[0] for t in ax.get_yticklabels()} - {"AICPU"} == {"AIC1", "AIV3"}


def test_timeline_without_a_trace_says_how_to_get_one():
    k = S.matmul_relu_kernel(128, 64, 64, 64, 64, 32)
    args = {"a": torch.randn(128, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(128, 64),
            "out": torch.empty(128, 64, dtype=torch.float16)}
    _, report = sim.run_kernel(k, args, {}, block_dim=2)
    pytest.importorskip("matplotlib")
    with pytest.raises(PyptoError, match="kept no timeline") as err:
        report.plot_timeline("t.png")
    assert "trace=" in str(err.value) and "PYPTO_TRACE" in str(err.value)
    assert err.value.loc is not None and err.value.loc.file == __file__          # the caller's line
    with pytest.raises(PyptoError, match="comes from the simulator"):
        Report(backend="cpu", wall_s=0.1).plot_timeline()


@needs_matplotlib
def test_timeline_refuses_a_trace_a_later_run_wrote_over(tmp_path):
    path = tmp_path / "shared.json"
    short = _mix_run(path, m=64)
    longer = _mix_run(path, m=256)
    assert longer.cycles > short.cycles
    longer.plot_timeline()                                   # the file is the longer run's own
    with pytest.raises(PyptoError, match="a later run wrote over it"):
        short.plot_timeline()


@needs_matplotlib
def test_timeline_options_are_checked(tmp_path):
    report = _mix_run(tmp_path / "t.json")
    with pytest.raises(PyptoError, match="color_by"):
        report.plot_timeline(color_by="rainbow")
    with pytest.raises(PyptoError, match="no core named AIC7"):
        report.plot_timeline(cores=["AIC7"])


# ---------------------------------------------------------------------------------------------- no matplotlib
def test_without_matplotlib_a_picture_is_a_clear_error(tmp_path, monkeypatch):
    report = _mix_run(tmp_path / "t.json")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # `import matplotlib` now raises ImportError
    with pytest.raises(PlotUnavailableError, match=r"pip install pypto\[plot\]") as err:
        roofline_chart([], load_machine("a2a3"), tmp_path / "r.png")
    assert isinstance(err.value, PyptoError) and err.value.loc.file == __file__
    with pytest.raises(PlotUnavailableError, match=r"pip install pypto\[plot\]"):
        report.plot_timeline(tmp_path / "t.png")
    assert not (tmp_path / "r.png").exists() and not (tmp_path / "t.png").exists()


def test_nothing_imports_matplotlib_when_loaded():
    """matplotlib is imported only inside functions that draw, so `import pypto` never loads it."""
    found = []
    for top in ("pypto", "pypto_pro"):
        for path in (ROOT / top).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in tree.body + [n for c in tree.body if isinstance(c, (ast.If, ast.Try)) for n in ast.walk(c)]:
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n.split(".")[0] == "matplotlib" for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found

"""The Chrome-trace JSON (what Perfetto opens) and the Report."""
import json
from pathlib import Path

import torch

from pypto import dtypes
from pypto.runtime import sim
from pypto.runtime.report import Report, last_report
from pypto.testing import kernels as S

F16 = dtypes.float16


def _mix_run(**kw):
    k = S.matmul_relu_kernel(128, 64, 64, 64, 64, 32)
    args = {"a": torch.randn(128, 64).half(), "b": torch.randn(64, 64).half(), "ws": torch.empty(128, 64),
            "out": torch.empty(128, 64, dtype=torch.float16)}
    return sim.run_kernel(k, args, {}, block_dim=2, **kw)


def test_trace_is_chrome_trace_json_with_a_track_per_core_and_pipe(tmp_path):
    path = tmp_path / "trace.json"
    _, rep = _mix_run(trace=str(path))
    assert rep.trace_file == str(path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert isinstance(events, list) and events
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    for e in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    # every slice sits on a named process and thread
    for e in slices:
        assert e["pid"] in procs and (e["pid"], e["tid"]) in threads
    assert {"AICPU", "AIC0", "AIC1", "AIV0", "AIV1", "AIV2", "AIV3"} <= set(procs.values())
    pipes = {threads[(e["pid"], e["tid"])] for e in slices if e["tid"] > 0 and e["pid"] != 0}
    assert {"MTE2", "MTE1", "M", "FIX", "V", "MTE3"} <= pipes
    instr = [e for e in slices if e["name"] == "TMATMUL_ACC"]
    assert instr and instr[0]["args"]["block"] == "mm_part" and instr[0]["args"]["loc"] == "model.py:40"
    tasks = [e for e in slices if e["tid"] == 0 and e["pid"] != 0]
    assert len(tasks) == 6 and all(t["args"]["block"] in ("mm_part", "relu_part") for t in tasks)
    assert any(e["name"].startswith("dispatch") and e["pid"] == 0 for e in slices)
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["pid"] in procs and "GB/s" in e["args"] for e in counters)
    assert max(e["args"]["GB/s"] for e in counters if e["name"] == "HBM GB/s") <= 1600.0 + 1e-6
    # pipes stalled on flags show the stall
    assert any(e["name"] in ("wait_flag", "cross_core_wait_flag") and e["dur"] > 0 for e in slices)


def test_trace_from_environment_keeps_every_run(tmp_path, monkeypatch):
    path = tmp_path / "env_trace.json"
    monkeypatch.setenv("PYPTO_TRACE", str(path))
    reports = [_mix_run()[1], _mix_run(timing_only=True)[1]]
    files = [r.trace_file for r in reports]
    assert len(set(files)) == 2, files                          # the second run did not overwrite the first
    for f in files:
        assert f.startswith(str(tmp_path / "env_trace-")) and f.endswith(".json")
        assert json.loads(Path(f).read_text())["traceEvents"]
    assert int(Path(files[1]).stem.rsplit("-", 1)[1]) == int(Path(files[0]).stem.rsplit("-", 1)[1]) + 1
    assert not path.exists()


def test_report_fields_table_and_last_report():
    _, rep = _mix_run()
    assert last_report() is rep
    d = rep.to_dict()
    for key in ("cycles", "time_us", "roofline_fraction", "utilization", "tasks", "gm_bytes", "flops", "wall_s"):
        assert key in d
    assert rep.cycles > 0 and abs(rep.time_us - rep.cycles / 1850) < 1e-6
    assert 0 < rep.roofline_fraction <= 1
    assert rep.flops == rep.cube_flops + rep.vector_ops and rep.cube_flops == 2 * 128 * 64 * 64
    # inputs a, b and the stored params out and ws (run_kernel counts every stored param as an output), once
    assert rep.min_gm_bytes == (128 * 64 + 64 * 64 + 128 * 64) * 2 + 128 * 64 * 4
    assert set(rep.utilization) == {"AIC", "AIV"} and "M" in rep.utilization["AIC"]
    assert all(0 <= v <= 1 for u in rep.utilization.values() for v in u.values())
    text = str(rep)
    assert "roofline fraction" in text and "utilisation AIC" in text


def test_cpu_style_report_prints_without_simulated_figures():
    r = Report(backend="cpu", wall_s=0.5)
    assert r.cycles is None and r.roofline_fraction is None
    assert "cpu" in str(r) and r.to_dict()["wall_s"] == 0.5


def test_timing_only_from_environment(monkeypatch):
    monkeypatch.setenv("PYPTO_TIMING_ONLY", "1")
    out, rep = _mix_run()
    assert rep.timing_only and out["out"].device.type == "meta" and out["out"].shape == (128, 64)
    assert any("timing-only" in n for n in rep.notes)


def _kernel_load_bytes_by_walking(graph, args):
    """host/work.count_work's load bytes per kernel: the Block IR walked again, as the sim did before."""
    from pypto.runtime.host import GMBuffers, Geometry, bind_sizes
    from pypto.runtime.host.work import count_work
    from pypto.runtime.sim.control import expand
    env = bind_sizes(graph, dict(args), {})
    geo = Geometry(GMBuffers(graph, dict(args), env, timing_only=True))
    instances, _ = expand(graph, env, geo, 1)
    return {name: w.load_bytes for name, w in count_work(instances, 2).items()}


def test_kernel_load_bytes_counted_as_blocks_run_equal_the_block_ir_walk():
    """The hbm / l2 bound of each kernel reads its GM load bytes from the sim's kernel stats (counted as
    its blocks run): the same bytes host/work.count_work finds walking the Block IR — tails (70 rows of
    16-row tiles, 300 of 128-column ones), several kernels and tasks, fp16 and fp32, both modes."""
    import pypto
    from pypto.passes.pipeline import lower

    def f(x, w, y):
        return pypto.softmax(x @ w, -1) + y.float()
    x, w, y = torch.randn(70, 96), torch.randn(96, 300) / 10, torch.randn(70, 300).half()
    graph = lower(pypto.jit(f, backend="reference").trace(x, w, y), machine="a2a3")
    args = dict(zip(graph.inputs, (x, w, y)))
    want = _kernel_load_bytes_by_walking(graph, {n: tuple(a.shape) for n, a in args.items()})
    assert len(want) >= 2 and all(v > 0 for v in want.values())
    for timing_only in (True, False):
        state = {}
        real = sim.SimState

        class Spy(real):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                state["s"] = self
        sim.SimState = Spy
        try:
            _, rep = sim.run(graph, {n: (tuple(a.shape) if timing_only else a) for n, a in args.items()}, {},
                             machine="a2a3", timing_only=timing_only)
        finally:
            sim.SimState = real
        got = {name: ks.load_bytes for name, ks in state["s"].kernel_stats.items()}
        assert got == want
        spec = pypto.load_machine("a2a3")
        for name, d in rep.decisions.items():      # and the bound the report shows is computed from them
            share = d.get("hbm_share", d.get("l2_share"))
            assert share is not None
            span = d["span_cycles"]
            if "hbm_share" in d:
                assert abs(share - want[name] / span / spec.hbm_bytes_per_cycle) < 1e-9 * max(1.0, share)

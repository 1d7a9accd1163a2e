"""MPMD scheduling: dependencies from GM regions (RAW/WAR/WAW), policies, stitching, block_dim waves,
cube+vector clusters beside vector-only tasks, dispatch costs."""
import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import PyptoError
from pypto.ir.execution import Buffer, ExecutionGraph, Loop, Region, Task
from pypto.machine import get_machine
from pypto.runtime import sim
from pypto.testing import kernels as S

F32, F16 = dtypes.float32, dtypes.float16
SPEC = get_machine()


def _buf(name, shape, role, dtype=F32):
    return Buffer(name, shape, dtype, role)


def _slices(report_trace):
    """task slices by label from a trace dict: label -> (pid, start, end)"""
    import json
    data = json.load(open(report_trace))
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    return {e["name"]: (names[e["pid"]], e["ts"], e["ts"] + e["dur"]) for e in data["traceEvents"]
            if e["ph"] == "X" and e["tid"] == 0 and e["pid"] != 0}


def test_write_after_read_waits_for_the_reader(tmp_path):
    k = S.vector_add_kernel(64, 64, 16, F32)
    bufs = {n: _buf(n, (64, 64), r) for n, r in [("x", "input"), ("y", "input"), ("z", "output")]}
    t1 = Task("vadd", {"x": "x", "y": "y", "z": "z"}, name="z=x+y")
    t2 = Task("vadd", {"x": "y", "y": "y", "z": "x"}, name="x=y+y")        # overwrites t1's input
    g = ExecutionGraph({"vadd": k}, bufs, ["x", "y"], ["z", "x"], [t1, t2])
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    x0 = x.clone()
    out, rep = sim.run(g, {"x": x, "y": y}, {}, trace=str(tmp_path / "t.json"))
    assert torch.equal(out["z"], x0 + y) and torch.equal(out["x"], y + y)
    s = _slices(tmp_path / "t.json")
    assert s["x=y+y"][1] >= s["z=x+y"][2]                 # WAR: the writer starts after the reader ended


def _chunked(n_chunks, chunk=16, stitch_loop=True):
    """Per chunk i: t = x + y (task a), z = t + y (task b, RAW on t)."""
    R = n_chunks * chunk
    k = S.vector_add_kernel(chunk, 64, chunk, F32)
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    bufs = {n: _buf(n, (R, 64), r) for n, r in [("x", "input"), ("y", "input"), ("t", "workspace"), ("z", "output")]}
    for n in list(bufs):
        bufs[n + "_c"] = Buffer(n + "_c", (chunk, 64), F32, "workspace", view_of=n, view_offset=i * chunk * 64)
    reg = lambda b: [Region(b, (i * chunk, 0), (chunk, 64))]
    a = Task("vadd", {"x": "x_c", "y": "y_c", "z": "t_c"}, reads=reg("x") + reg("y"), writes=reg("t"), name="a")
    b = Task("vadd", {"x": "t_c", "y": "y_c", "z": "z_c"}, reads=reg("t") + reg("y"), writes=reg("z"), name="b")
    return ExecutionGraph({"vadd": k}, bufs, ["x", "y"], ["z"], [Loop(i, 0, n_chunks, 1, [a, b])]), R


def test_stitching_submits_many_iterations_at_once():
    g, R = _chunked(96)
    shapes = {"x": (R, 64), "y": (R, 64)}
    one = sim.run(g, shapes, {}, timing_only=True, stitch=1)[1]
    eight = sim.run(g, shapes, {}, timing_only=True, stitch=8)[1]
    assert one.tasks == eight.tasks == 192
    assert eight.cycles < 0.8 * one.cycles


def test_policies_agree_on_results_and_locality_keeps_consumers_on_producers(tmp_path):
    g, R = _chunked(48)
    x, y = torch.randn(R, 64), torch.randn(R, 64)
    same_core = {}
    for policy in ("fifo", "locality"):
        out, rep = sim.run(g, {"x": x, "y": y}, {}, policy=policy, trace=str(tmp_path / f"{policy}.json"))
        torch.testing.assert_close(out["z"], x + y + y)
        s = _slices(tmp_path / f"{policy}.json")
        same_core[policy] = sum(s[f"a[i={c}]"][0] == s[f"b[i={c}]"][0] for c in range(48))
    assert same_core["locality"] == 48 and same_core["locality"] > same_core["fifo"]
    with pytest.raises(PyptoError, match="unknown scheduling policy"):
        sim.run(g, {"x": x, "y": y}, {}, policy="random")


def test_block_dim_beyond_the_core_count_runs_in_waves():
    k = S.vector_add_kernel(200 * 8, 64, 8, F32)
    x, y = torch.randn(1600, 64), torch.randn(1600, 64)
    cores = SPEC.without_launch()                       # the waves, not the launch's fixed start and drain
    out, rep = sim.run_kernel(k, {"x": x, "y": y, "z": torch.empty(1600, 64)}, {}, block_dim=100, machine=cores)
    assert torch.equal(out["z"], x + y) and rep.blocks == 100
    k48 = S.vector_add_kernel(48 * 16, 64, 8, F32)       # 48 blocks of the same 16 rows: one wave
    _, one_wave = sim.run_kernel(k48, {"x": (768, 64), "y": (768, 64), "z": (768, 64)}, {}, block_dim=48,
                                 timing_only=True, machine=cores)
    assert rep.cycles > one_wave.cycles * 1.2           # 100 blocks take three waves of 48 AIV cores


def test_cluster_kernel_beside_vector_tasks():
    mm = S.matmul_relu_kernel(128, 128, 64, 64, 64, 32)
    va = S.vector_add_kernel(64, 64, 16, F32)
    bufs = {"a": _buf("a", (128, 64), "input", F16), "b": _buf("b", (64, 128), "input", F16),
            "ws": _buf("ws", (128, 128), "workspace"), "out": _buf("out", (128, 128), "output", F16),
            "x": _buf("x", (64, 64), "input"), "y": _buf("y", (64, 64), "input"), "z": _buf("z", (64, 64), "output")}
    t1 = Task("matmul_relu", {p: p for p in ("a", "b", "ws", "out")}, block_dim=4, name="mm")
    t2 = Task("vadd", {"x": "x", "y": "y", "z": "z"}, block_dim=2, name="add")
    g = ExecutionGraph({"matmul_relu": mm, "vadd": va}, bufs, ["a", "b", "x", "y"], ["out", "z"], [t1, t2])
    a, b, x, y = torch.randn(128, 64).half(), torch.randn(64, 128).half(), torch.randn(64, 64), torch.randn(64, 64)
    out, rep = sim.run(g, {"a": a, "b": b, "x": x, "y": y}, {})
    torch.testing.assert_close(out["out"], torch.relu(a.float() @ b.float()).half(), rtol=1e-3, atol=1e-3)
    assert torch.equal(out["z"], x + y)
    assert rep.tasks == 2 and rep.blocks == 6


def test_dispatch_and_submit_costs_are_charged():
    k = S.single_op_kernel("TEXPANDS", [], F32, (8, 64), scalar=1.0)
    _, rep = sim.run_kernel(k, {"out": torch.empty(8, 64)}, {})
    d = SPEC.dispatch
    assert rep.cycles >= d["submit_cycles"] + d["task_dispatch_cycles"]


def test_access_outside_the_declared_regions_is_reported():
    g, R = _chunked(4)
    loop = g.program[0]
    b = loop.body[1]
    i = loop.var
    b.writes = [Region("z", ((i + 1) * 16 % R, 0), (16, 64))]        # declares the next chunk, writes its own
    with pytest.raises(PyptoError, match=r"task b\[i=0\] writes z\[0:16, 0:64\] \(via z_c\), outside the GM "
                                         r"regions it declares it writes \(z\[16:32, 0:64\]\)"):
        sim.run(g, {"x": torch.randn(R, 64), "y": torch.randn(R, 64)}, {})

"""The cpu backend around the kernels: ExecutionGraphs (loops, scalar parameters, dependencies,
threads, views), bad input, what a kernel gets wrong at run time, the build (warning-free,
cached), and the guarded npu backend."""
from __future__ import annotations

import warnings

import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import BackendUnavailableError, DTypeError, PyptoError, ShapeError, SimError
from pypto.ir.execution import Buffer, ExecutionGraph, Loop, Region, Task
from pypto.runtime import cpu
from pypto.runtime.cpu import compiler
from pypto.symbolic import ceildiv, index_symbol, smin
from pypto.testing import kernels as ck

F32 = dtypes.float32


def kernels():
    return [ck.scale_rows(), ck.softmax_rows(F32)] + [ck.faulty(k) for k in ck.FAULTS]


@pytest.fixture(scope="module", autouse=True)
def built():
    _, result = cpu.build(kernels())
    return result


def scale_then_softmax_graph():
    """y[8i : 8i+8] = 0.5 * x[8i : 8i+8] for every row tile i (a loop of tasks), then z = softmax(y)."""
    M = ck.M
    i = index_symbol("i")
    rows = smin(8, M - 8 * i)
    scale = ck.scale_rows()
    softmax = ck.softmax_rows(F32)
    loop = Loop(i, 0, ceildiv(M, 8), 1, [
        Task("scale_rows", {"x": "x", "y": "y"}, {"r0": 8 * i, "alpha": 0.5},
             reads=[Region("x", (8 * i, 0), (rows, 256))], writes=[Region("y", (8 * i, 0), (rows, 256))],
             name="scale")])
    tail = Task(softmax.name, {"x": "y", "y": "z"}, {}, block_dim=2, name="softmax")
    buffers = {"x": Buffer("x", (M, 256), F32, "input"), "y": Buffer("y", (M, 256), F32, "workspace"),
               "z": Buffer("z", (M, 256), F32, "output")}
    return ExecutionGraph({"scale_rows": scale, softmax.name: softmax}, buffers, ["x"], ["z"], [loop, tail],
                          symbols=[M])


@pytest.mark.parametrize("threads", [1, 2])
def test_graph_with_loop_scalars_and_dependencies(threads):
    x = torch.randn(77, 256)
    out, report = cpu.run(scale_then_softmax_graph(), {"x": x}, {}, threads=threads)
    torch.testing.assert_close(out["z"], torch.softmax(0.5 * x, -1), rtol=1e-5, atol=1e-6)
    assert report.tasks == 10 + 1 and report.cycles is None and report.backend == "cpu"


def test_a_graph_run_again_reuses_its_plan_and_workspaces():
    g = scale_then_softmax_graph()
    x1, x2 = torch.randn(77, 256), torch.randn(77, 256)
    out1, _ = cpu.run(g, {"x": x1}, {})
    (plan,) = cpu._PLANS[id(g)][1].values()
    y = plan.spare["y"]                        # the workspace, kept for the next run
    out2, _ = cpu.run(g, {"x": x2}, {})
    assert plan.spare["y"] is y and len(cpu._PLANS[id(g)][1]) == 1
    assert out1["z"].data_ptr() != out2["z"].data_ptr()        # outputs are fresh every run
    torch.testing.assert_close(out1["z"], torch.softmax(0.5 * x1, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out2["z"], torch.softmax(0.5 * x2, -1), rtol=1e-5, atol=1e-6)
    out3, _ = cpu.run(g, {"x": x1[:50]}, {})   # other sizes: a plan of their own
    assert len(cpu._PLANS[id(g)][1]) == 2
    torch.testing.assert_close(out3["z"], torch.softmax(0.5 * x1[:50], -1), rtol=1e-5, atol=1e-6)


def test_an_output_viewing_a_workspace_is_never_reused():
    g = scale_then_softmax_graph()
    g.buffers["y"] = Buffer("y", (ck.M, 256), F32, "workspace")
    g.buffers["yv"] = Buffer("yv", (ck.M, 256), F32, "output", view_of="y")
    g.outputs.append("yv")
    out1, _ = cpu.run(g, {"x": torch.randn(16, 256)}, {})
    out2, _ = cpu.run(g, {"x": torch.randn(16, 256)}, {})
    assert out1["yv"].data_ptr() != out2["yv"].data_ptr()


def test_outputs_written_in_place_and_noncontiguous_arguments():
    x = torch.randn(256, 40).t()              # non-contiguous [40, 256]
    z = torch.empty(256, 40).t()
    version = x._version
    out, _ = cpu.run(scale_then_softmax_graph(), {"x": x, "z": z}, {"M": 40})
    assert out["z"] is z
    assert x._version == version               # an input is not copied back
    torch.testing.assert_close(z, torch.softmax(0.5 * x, -1), rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    g = scale_then_softmax_graph()
    with pytest.raises(DTypeError, match="expects torch.float32"):
        cpu.run(g, {"x": torch.randn(8, 256, dtype=torch.float16)}, {})
    with pytest.raises(ShapeError, match="expects"):
        cpu.run(g, {"x": torch.randn(8, 128)}, {"M": 8})
    with pytest.raises(PyptoError, match="has no argument"):
        cpu.run(g, {}, {"M": 8})
    with pytest.raises(PyptoError, match="not a buffer"):
        cpu.run(g, {"x": torch.randn(8, 256), "nope": torch.zeros(1)}, {})
    with pytest.raises(PyptoError, match="no argument for GM param 'y'"):
        cpu.run_kernel(ck.softmax_rows(F32), {"x": torch.randn(8, 256)})


def _run_fault(kind, rows=16):
    x = torch.randn(rows, 64)
    y = torch.zeros(rows, 64)
    return cpu.run_kernel(ck.faulty(kind), {"x": x, "y": y}, block_dim=2)


@pytest.mark.parametrize("kind,message", [
    ("missing_set", r"wait_flag\(PIPE_MTE2, PIPE_V, EVENT_ID0\) has no earlier matching set_flag"),
    ("out_of_bounds", r"GM access outside its tensor: `TLOAD t, x\[M - 4, 0\]` \(block faulty\) reads "
                      r"x\[12:20, 0:64\] \(offsets \[12, 0\], extent \[8, 64\]\), but x has shape \[16, 64\]: "
                      r"dim 0: the box ends at 20"),
    ("over_capacity", r"TASSIGN: a 8x64 tile at UB\+195584 needs 197632 bytes; UB has 196608"),
    ("single_type_cross_flag", "cross-core set_flag in a kernel that has only one core type"),
    ("cross_core_deadlock", "waits for cross-core flag 5 that no core of the cluster will set"),
])
def test_kernel_faults_raise(kind, message):
    with pytest.raises(SimError, match=message) as info:
        _run_fault(kind)
    # the load's source line for a GM access outside its tensor, else the kernel's
    assert info.value.loc is not None and info.value.loc.line == (70 if kind == "out_of_bounds" else 69)


def test_flags_left_set_warn():
    with pytest.warns(cpu.FlagWarning, match=r"set_flag\(PIPE_MTE2, PIPE_V, EVENT_ID1\)"):
        _run_fault("leftover_set")


def test_build_is_warning_free_and_cached(built):
    from pypto.codegen import generate_module
    files = generate_module(kernels()).files
    # the whole module is on disk after one build (an earlier test may have loaded these kernels
    # from a library built for a subset of them, so `built` itself need not have compiled it)
    compiler.build(files)
    again = compiler.build(files)
    assert again.cached and again.key == compiler.build_key(files)
    assert "warning" not in again.log.lower(), again.log
    hits = cpu.STATS.cache_hits
    cpu.build(kernels())                       # every kernel already loaded: nothing to build
    assert cpu.STATS.cache_hits == hits + 1


def test_fresh_build_then_disk_cache_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path))
    from pypto.codegen import generate_module
    files = generate_module([ck.faulty("missing_set")]).files
    builds = compiler.STATS.builds
    first = compiler.build(files)
    assert not first.cached and first.build_s > 0 and compiler.STATS.builds == builds + 1
    assert first.library.is_relative_to(tmp_path) and (first.library.parent / "kernels").is_dir()
    assert "warning" not in first.log.lower(), first.log
    second = compiler.build(files)
    assert second.cached and second.library == first.library


def test_npu_backend_is_guarded():
    import pypto.runtime.npu as npu
    ok, reason = npu.availability()
    if ok:
        pytest.skip("CANN and torch_npu are installed here")
    assert "bisheng" in reason or "torch_npu" in reason
    with pytest.raises(BackendUnavailableError, match="npu backend is not available"):
        npu.run(scale_then_softmax_graph(), {"x": torch.randn(8, 256)}, {})
    with pytest.raises(BackendUnavailableError):
        npu.run_kernel(ck.softmax_rows(F32), {})


def test_launches_in_a_forked_child():
    """The worker threads do not survive fork(): a child starts its own instead of waiting on them.
    (The child runs no torch compute: torch's OpenMP pool is not fork-safe.)"""
    import os
    import time
    x = torch.randn(64, 256)
    cpu.run(scale_then_softmax_graph(), {"x": x}, {}, threads=2)     # the parent's pool is up
    z = torch.full((64, 256), float("nan")).share_memory_()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            cpu.run(scale_then_softmax_graph(), {"x": x, "z": z}, {}, threads=2)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            torch.testing.assert_close(z, torch.softmax(0.5 * x, -1), rtol=1e-5, atol=1e-6)
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's launch hung")


def test_only_kernels_not_yet_loaded_are_compiled():
    first = ck.scale_rows(F32, rows=8, cols=96)            # sizes no other test builds
    cpu.build([first])
    second = ck.softmax_rows(F32, rows=8, cols=96)
    kernels, result = cpu.build([ck.scale_rows(F32, rows=8, cols=96), second])
    assert result is not None and result.kernels == 1     # the softmax alone
    assert kernels.entries[first.name][0] is not kernels.entries[second.name][0]
    x = torch.randn(20, 96)
    y = torch.empty_like(x)
    cpu.run_kernel(second, {"x": x, "y": y}, block_dim=2)
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)

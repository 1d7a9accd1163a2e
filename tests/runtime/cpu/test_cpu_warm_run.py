"""The cpu backend's warm path (runtime/cpu/calls.py): a graph run again at sizes it already ran at
launches its prepared task instances in one C call. Same answers as the first run (views whose
offsets move with a loop variable, workspaces reused, outputs fresh), the same checks of bad
arguments, flag warnings still raised, and concurrent runs of one graph kept apart."""
from __future__ import annotations

import shutil
import threading

import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import DTypeError, PyptoError, ShapeError
from pypto.ir.execution import Buffer, ExecutionGraph, Loop, Region, Task
from pypto.runtime import cpu
from pypto.runtime.cpu.calls import WarmRun
from pypto.testing import kernels as ck

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

F32 = dtypes.float32


def chunked_add_graph(chunk=16):
    """z = (x + y) + y over [chunk, 32] row chunks of a run-time row count R: per chunk two dependent
    tasks whose GM params are views at an offset that moves with the loop variable, through a
    workspace t."""
    rows = sympy.Symbol("R", integer=True, positive=True)
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    bufs = {"x": Buffer("x", (rows, 32), F32, "input"), "y": Buffer("y", (rows, 32), F32, "input"),
            "t": Buffer("t", (rows, 32), F32, "workspace"), "z": Buffer("z", (rows, 32), F32, "output")}
    for name in list(bufs):
        bufs[f"{name}_c"] = Buffer(f"{name}_c", (chunk, 32), F32, "workspace", view_of=name,
                                   view_offset=i * chunk * 32)
    region = lambda b: [Region(b, (i * chunk, 0), (chunk, 32))]       # noqa: E731
    add1 = Task("vadd", {"x": "x_c", "y": "y_c", "z": "t_c"}, {}, 1, reads=region("x") + region("y"),
                writes=region("t"), name="add1")
    add2 = Task("vadd", {"x": "t_c", "y": "y_c", "z": "z_c"}, {}, 1, reads=region("t") + region("y"),
                writes=region("z"), name="add2")
    kernel = ck.vector_add_kernel(chunk, 32, 8, F32)
    return ExecutionGraph({"vadd": kernel}, bufs, ["x", "y"], ["z"],
                          [Loop(i, 0, sympy.ceiling(rows / chunk), 1, [add1, add2])], symbols=[rows])


def _plan(graph):
    (plan,) = cpu._PLANS[id(graph)][1].values()
    return plan


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_again_is_one_call_of_the_prepared_launches(threads):
    g = chunked_add_graph()
    outs = []
    for seed in range(3):
        x, y = _rand(64, 32, seed=seed), _rand(64, 32, seed=seed + 10)
        out, report = cpu.run(g, {"x": x, "y": y}, {}, threads=threads)
        torch.testing.assert_close(out["z"], x + 2 * y, rtol=1e-6, atol=1e-6)
        outs.append(out["z"])
        assert report.tasks == 8 and report.kernels["vadd"]["launches"] == 8
        assert report.kernels["vadd"]["wall_s"] > 0
        how = "one call of the prepared launches" if seed else "ctypes calls"
        assert how in report.notes[1], report.notes
    assert isinstance(_plan(g).warm, WarmRun)
    assert len({t.data_ptr() for t in outs}) == 3          # outputs are fresh every run
    assert set(_plan(g).spare) == {"t"}                     # the workspace is kept for the next run


def test_other_sizes_take_a_plan_of_their_own():
    g = chunked_add_graph()
    for rows in (64, 48, 64, 48, 16):
        x, y = _rand(rows, 32, seed=rows), _rand(rows, 32, seed=rows + 1)
        out, _ = cpu.run(g, {"x": x, "y": y}, {})
        torch.testing.assert_close(out["z"], x + 2 * y, rtol=1e-6, atol=1e-6)
    assert len(cpu._PLANS[id(g)][1]) == 3


def test_a_warm_run_checks_its_arguments_as_the_first_run_does():
    g = chunked_add_graph()
    x, y = _rand(64, 32, seed=0), _rand(64, 32, seed=1)
    cpu.run(g, {"x": x, "y": y}, {})
    cpu.run(g, {"x": x, "y": y}, {})
    assert isinstance(_plan(g).warm, WarmRun)
    with pytest.raises(DTypeError, match="expects torch.float32"):
        cpu.run(g, {"x": x.half(), "y": y}, {})
    with pytest.raises(ShapeError, match="expects"):
        cpu.run(g, {"x": x[:, :16], "y": y}, {"R": 64})
    with pytest.raises(PyptoError, match="has no argument"):
        cpu.run(g, {"x": x}, {"R": 64})
    with pytest.raises(PyptoError, match="not a buffer"):
        cpu.run(g, {"x": x, "y": y, "nope": torch.zeros(1)}, {})
    # a non-contiguous argument and an output written in place: the ordinary path, right answers
    xt = _rand(32, 64, seed=2).t()
    out, _ = cpu.run(g, {"x": xt, "y": y}, {})
    torch.testing.assert_close(out["z"], xt + 2 * y, rtol=1e-6, atol=1e-6)
    z = torch.empty(64, 32)
    out, _ = cpu.run(g, {"x": x, "y": y, "z": z}, {})
    assert out["z"] is z
    torch.testing.assert_close(z, x + 2 * y, rtol=1e-6, atol=1e-6)
    out, _ = cpu.run(g, {"x": x, "y": y}, {})
    torch.testing.assert_close(out["z"], x + 2 * y, rtol=1e-6, atol=1e-6)


def test_concurrent_runs_of_one_graph_keep_apart():
    g = chunked_add_graph()
    cpu.run(g, {"x": torch.zeros(64, 32), "y": torch.zeros(64, 32)}, {})
    errors = []

    def work(seed):
        try:
            for k in range(15):
                x, y = _rand(64, 32, seed=100 * seed + k), _rand(64, 32, seed=100 * seed + k + 50)
                out, _ = cpu.run(g, {"x": x, "y": y}, {}, threads=1)
                torch.testing.assert_close(out["z"], x + 2 * y, rtol=1e-6, atol=1e-6)
        except Exception as e:      # noqa: BLE001 - reported by the main thread
            errors.append(e)
    workers = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors


def test_flags_left_set_warn_on_every_run():
    graph, tensors = cpu.one_task_graph(ck.faulty("leftover_set"),
                                        {"x": torch.randn(16, 64), "y": torch.zeros(16, 64)}, None, 2)
    for _ in range(3):
        with pytest.warns(cpu.FlagWarning, match=r"set_flag\(PIPE_MTE2, PIPE_V, EVENT_ID1\)"):
            cpu.run(graph, tensors, {})
    assert isinstance(_plan(graph).warm, WarmRun)

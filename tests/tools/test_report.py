"""The report tells the truth on every backend: on cpu every row is a figure the run measured (wall
time of the run and of each kernel's ctypes calls) or counted from the Block IR (GM bytes, FLOPs,
vector ops, PTO instructions: runtime/host/work.py), never '-', and the counts are the simulator's
for the same program; rows with no meaning on cpu (simulated cycles, utilisation) are left out.
str(report) is as wide as the terminal (COLUMNS), 100 columns without one."""
from __future__ import annotations

import os

import torch

import pypto
from pypto.runtime import cpu, sim
from pypto.runtime.report import PIPED_WIDTH, Report
from pypto.testing import kernels as S


def _mm_softmax(a, b):
    return (a @ b).softmax(-1)


def _value_cells(text: str) -> list[str]:
    return [line.split("│")[2].strip() for line in text.splitlines() if line.count("│") == 3]


def test_cpu_report_counts_what_the_simulator_counts_and_shows_no_dash():
    M, K, N = 77, 128, 256              # a tail block of 77 rows: dynamic valid shapes
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    spec_a = pypto.Tensor[[pypto.DYNAMIC, K], pypto.float16]
    spec_b = pypto.Tensor[[K, N], pypto.float16]

    def fn(a: spec_a, b: spec_b):
        return _mm_softmax(a, b)

    want = torch.softmax(a.float() @ b.float(), -1)
    on_cpu = pypto.jit(fn, backend="cpu")
    torch.testing.assert_close(on_cpu(a, b).float(), want, rtol=2e-2, atol=2e-3)
    c = on_cpu.last_report
    torch.testing.assert_close(pypto.jit(fn, backend="sim")(a, b).float(), want, rtol=2e-2, atol=2e-3)
    s = pypto.last_report()
    assert s.backend == "sim" and c.backend == "cpu"
    assert c.cube_flops == 2 * M * K * N == s.cube_flops
    for field in ("vector_ops", "instructions", "min_gm_bytes", "tasks", "blocks"):
        assert getattr(c, field) == getattr(s, field) > 0, field
    # the simulator rounds each GM row up to the 32-byte burst: these rows are whole bursts
    assert c.gm_bytes == s.gm_bytes >= c.min_gm_bytes
    assert c.cycles is None and c.utilization == {} and c.wall_s > 0
    assert set(c.kernels) == set(on_cpu.last_report.kernels) and len(c.kernels) >= 1
    assert sum(k["gm_bytes"] for k in c.kernels.values()) == c.gm_bytes
    assert all(k["launches"] >= 1 and k["wall_s"] > 0 for k in c.kernels.values())
    assert abs(c.gb_per_s - c.gm_bytes / c.wall_s / 1e9) < 1e-9
    text = str(c)
    cells = _value_cells(text)
    assert cells and "-" not in cells, text
    for shown in ("achieved GB/s (host)", "achieved GFLOP/s (host)", "PTO instructions", "run wall time (ms)",
                  *(f"kernel {name}" for name in c.kernels)):
        assert shown in text, shown
    for left_out in ("simulated", "roofline", "utilisation", "L2 hit"):
        assert left_out not in text, left_out


def test_work_counter_counts_exact_bytes_of_a_tail():
    """A hand-built kernel over a GM row count the task does not divide: the bytes are exactly the
    elements loaded and stored (no burst rounding), whichever block does which tile."""
    k = S.vector_add_kernel(100, 64, 16, pypto.float32)
    x, y = torch.randn(100, 64), torch.randn(100, 64)
    z = torch.empty_like(x)
    _, rep = cpu.run_kernel(k, {"x": x, "y": y, "z": z}, {}, block_dim=3)
    torch.testing.assert_close(z, x + y)
    assert rep.gm_bytes == 3 * 100 * 64 * 4 and rep.vector_ops == 100 * 64
    _, srep = sim.run_kernel(k, {"x": x, "y": y, "z": torch.empty_like(x)}, {}, block_dim=3)
    assert (srep.gm_bytes, srep.vector_ops, srep.instructions) == (rep.gm_bytes, rep.vector_ops, rep.instructions)


def test_width_follows_columns_and_is_readable_when_piped(monkeypatch):
    r = Report(backend="sim", cycles=1000, time_us=0.5, instructions=10, gm_bytes=4096, wall_s=0.1,
               notes=["a long note " * 12])
    for columns in (60, 160):
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = str(r).splitlines()
        assert max(map(len, lines)) <= columns
        assert (max(map(len, lines)) > 110) == (columns > 110)     # no fixed 110 columns
    monkeypatch.delenv("COLUMNS")

    def no_terminal(*_):
        raise OSError("not a terminal")
    monkeypatch.setattr(os, "get_terminal_size", no_terminal)       # piped, even under pytest -s
    lines = str(r).splitlines()
    assert max(map(len, lines)) == PIPED_WIDTH


def test_a_counting_gap_is_a_note_not_a_failed_run(monkeypatch):
    import pypto.runtime.cpu as cpu_backend

    def broken(*_):
        raise KeyError("n0")
    monkeypatch.setattr(cpu_backend, "count_work", broken)
    k = S.vector_add_kernel(64, 64, 16, pypto.float32)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    z = torch.empty_like(x)
    _, rep = cpu.run_kernel(k, {"x": x, "y": y, "z": z}, {}, block_dim=2)
    torch.testing.assert_close(z, x + y)
    assert rep.instructions == 0 and any("not counted (KeyError" in n for n in rep.notes)
    assert "PTO instructions" not in str(rep) and "-" not in _value_cells(str(rep))

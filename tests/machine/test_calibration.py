"""The machine model stays calibrated: the five programs of issue 20 (benchmarks/calibrate.py) simulate
within 0.5-2x of CANN PyPTO 0.2.0's cost model (its cycles derived in benchmarks/calibration_data.toml);
and a launch costs the [launch] figures of the machine file: the first task starts start_cycles (+ submit
+ dispatch) after the launch, the host sees the end drain_cycles after the last block."""
import importlib.util
from pathlib import Path

import pytest

import pypto
from pypto import dtypes
from pypto.machine import get_machine
from pypto.runtime import sim
from pypto.testing import kernels as S

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate.py"
_spec = importlib.util.spec_from_file_location("calibrate", _path)
calibrate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibrate)

CANN = calibrate.cann_cycles(calibrate.load_data())
SMALL = calibrate.program_names(quick=True)
BIG = [n for n in calibrate.PROGRAMS if n not in SMALL]


def test_the_data_derives_cann_from_the_issue_ratios():
    data = calibrate.load_data()
    assert {p["name"] for p in data["program"]} == set(calibrate.PROGRAMS)
    for p in data["program"]:
        assert CANN[p["name"]] == pytest.approx(p["ours_8819b03"] / p["issue_ratio"])
    assert "not a measurement" in Path(calibrate.DATA).read_text()


def _check(name):
    ours = calibrate.run_program(pypto, name).cycles
    lo, hi = calibrate.BAND
    assert lo <= ours / CANN[name] <= hi, f"{name}: ours {ours:,.0f} cycles, CANN {CANN[name]:,.0f}"


@pytest.mark.parametrize("name", SMALL)
def test_small_programs_within_the_band_of_cann(name):
    _check(name)


@pytest.mark.parametrize("name", BIG)            # timing-only: under half a second each
def test_big_programs_within_the_band_of_cann(name):
    _check(name)


def test_a_launch_costs_its_start_and_drain(tmp_path):
    import json
    spec = get_machine()
    start, drain = spec.launch["start_cycles"], spec.launch["drain_cycles"]
    assert start > 0 and drain > 0
    k = S.vector_add_kernel(64, 64, 16, dtypes.float32)
    shapes = {"x": (64, 64), "y": (64, 64), "z": (64, 64)}
    trace = tmp_path / "t.json"
    _, full = sim.run_kernel(k, shapes, {}, block_dim=2, timing_only=True, trace=str(trace))
    _, bare = sim.run_kernel(k, shapes, {}, block_dim=2, timing_only=True, machine=spec.without_launch())
    assert full.cycles == pytest.approx(bare.cycles + start + drain)
    events = json.loads(trace.read_text())["traceEvents"]
    blocks = [e for e in events if e.get("ph") == "X" and e.get("tid") == 0 and e.get("pid") != 0]
    first = min(e["ts"] for e in blocks)
    last = max(e["ts"] + e["dur"] for e in blocks)
    d = spec.dispatch
    us = spec.cycles_to_us
    assert first == pytest.approx(us(start + d["submit_cycles"] + d["task_dispatch_cycles"]), rel=1e-6)
    assert full.time_us == pytest.approx(last + us(drain), rel=1e-6)
    # the AICPU's row of the trace shows both: the launch from 0, the drain after the last block
    aicpu = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e["pid"] == 0}
    assert aicpu["launch"] == pytest.approx((0.0, us(start)))
    assert aicpu["drain"] == pytest.approx((last, last + us(drain)), rel=1e-6)


@pytest.mark.parametrize("figure", ["gm_latency_cycles", "gm_write_latency_cycles"])
def test_a_gm_latency_delays_what_waits_on_the_transfer(figure):
    """One tile: two reads, an add, a write. The add waits for the reads' data (read latency), the end of
    the block for the write's (write latency): 100 more cycles of either is 100 more cycles of the run."""
    import dataclasses
    base = get_machine().without_launch()
    later = dataclasses.replace(base, memory={**base.memory, figure: base.memory[figure] + 100})
    k = S.vector_add_kernel(8, 64, 8, dtypes.float32, buffers=1)
    shapes = {"x": (8, 64), "y": (8, 64), "z": (8, 64)}
    cycles = [sim.run_kernel(k, shapes, {}, timing_only=True, machine=m)[1].cycles for m in (base, later)]
    assert cycles[1] - cycles[0] == pytest.approx(100)

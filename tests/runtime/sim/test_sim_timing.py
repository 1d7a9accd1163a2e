"""The timing model explains itself (issue 4 acceptance): work scales cycles linearly, double buffering
overlaps loads with compute, a GM-bound kernel runs near the HBM bandwidth, pipes run concurrently,
HBM is shared. Large cases run in timing-only mode."""
import pytest
import torch

from pypto import dtypes
from pypto.machine import get_machine
from pypto.runtime import sim
from pypto.testing import kernels as S

F16, F32 = dtypes.float16, dtypes.float32
SPEC = get_machine()


# the cores' own time: a launch's fixed start and drain (machine [launch], tests/machine) do not scale with work
CORES = SPEC.without_launch()


def _timed(kernel, shapes, block_dim, machine=None):
    return sim.run_kernel(kernel, shapes, {}, block_dim=block_dim, timing_only=True, machine=machine)[1]


def test_doubling_rows_doubles_cycles_vector():
    small = _timed(S.softmax_kernel(2048, 1024, 8, F16), {"x": (2048, 1024), "y": (2048, 1024)}, 48, CORES)
    big = _timed(S.softmax_kernel(4096, 1024, 8, F16), {"x": (4096, 1024), "y": (4096, 1024)}, 48, CORES)
    assert 1.8 <= big.cycles / small.cycles <= 2.2


def test_doubling_output_tiles_doubles_cycles_cube():
    def mm(m):
        return _timed(S.matmul_kernel(m, 1024, 1024, 128, 256, 64), {"a": (m, 1024), "b": (1024, 1024),
                                                                       "c_out": (m, 1024)}, 24, CORES)
    small, big = mm(3072), mm(6144)                    # 4 and 8 output tiles per cube core
    assert 1.8 <= big.cycles / small.cycles <= 2.2
    assert big.cube_flops == 2 * small.cube_flops


def test_double_buffering_cuts_cycles_of_a_load_bound_kernel():
    shapes = {"x": (512, 1024), "y": (512, 1024), "z": (512, 1024)}
    single = _timed(S.vector_add_kernel(512, 1024, 8, F32, buffers=1), shapes, 1)
    double = _timed(S.vector_add_kernel(512, 1024, 8, F32, buffers=2), shapes, 1)
    assert double.cycles < 0.75 * single.cycles
    u = double.utilization["AIV"]
    assert u["MTE2"] > u["V"]                                    # load-bound: MTE2 is the busiest pipe
    # pipes of the core really overlap: their busy time adds up to more than the core's time
    assert u["MTE2"] + u["MTE3"] + u["V"] > u["core"]


def test_gm_bound_kernel_runs_near_hbm_bandwidth():
    rep = _timed(S.copy_kernel(4096, 4096, 4, F16), {"x": (4096, 4096), "y": (4096, 4096)}, 48)
    achieved = rep.gm_bytes / (rep.time_us * 1e-6)
    assert rep.bound_by == "hbm"
    assert 0.85 * SPEC.memory["hbm_bytes_per_s"] <= achieved <= 1.0001 * SPEC.memory["hbm_bytes_per_s"]
    assert rep.roofline_fraction >= 0.85


def test_hbm_is_shared_between_cores():
    shapes = {"x": (2048, 2048), "y": (2048, 2048)}
    per_core = []
    for cores in (1, 8, 48):
        rep = _timed(S.copy_kernel(2048, 2048, 8, F16), shapes, cores)
        per_core.append(rep.gm_bytes / rep.cycles / cores)
    port = SPEC.memory["mte2_bytes_per_cycle"] + SPEC.memory["mte3_bytes_per_cycle"]
    assert per_core[0] <= port
    assert per_core[2] * 48 <= SPEC.hbm_bytes_per_cycle * 1.0001          # never more than HBM gives
    assert per_core[2] < per_core[1] < per_core[0]                       # more cores, smaller shares


def test_cube_bound_matmul_reports_the_cube_roofline():
    rep = _timed(S.matmul_kernel(2048, 2048, 2048, 128, 256, 64),
                 {"a": (2048, 2048), "b": (2048, 2048), "c_out": (2048, 2048)}, 24)
    assert rep.bound_by == "cube" and rep.cube_flops == 2 * 2048 ** 3
    assert 0.6 <= rep.roofline_fraction <= 1.0
    assert rep.l2_hit_bytes > 0                                          # A and B tiles are re-read


def test_timing_only_keeps_the_functional_schedule():
    k = S.softmax_kernel(37, 256, 4, F16)
    x = torch.randn(37, 256).half()
    _, full = sim.run_kernel(k, {"x": x, "y": torch.empty_like(x)}, {}, block_dim=4)
    _, timed = sim.run_kernel(k, {"x": (37, 256), "y": (37, 256)}, {}, block_dim=4, timing_only=True)
    assert full.cycles == timed.cycles and full.instructions == timed.instructions
    assert full.gm_bytes == timed.gm_bytes


@pytest.mark.parametrize("slow,fast", [("TEXP", "TADDS"), ("TDIV", "TADD")])
def test_transcendentals_cost_more_than_arithmetic(slow, fast):
    def cycles(op):
        scalar = 1.0 if op.endswith("S") else None
        n_src = 1 if scalar is not None or op == "TEXP" else 2
        k = S.single_op_kernel(op, [F32] * n_src, F32, (64, 256), scalar=scalar)
        shapes = {f"in{i}": (64, 256) for i in range(n_src)} | {"out": (64, 256)}
        rep = _timed(k, shapes, 1)
        return rep.utilization["AIV"]["V"] * rep.cycles          # V busy cycles (x 48 cores, same for both)
    assert cycles(slow) > 2 * cycles(fast)


def test_l2_serves_re_read_boxes_until_evicted():
    import dataclasses
    shapes = {"a": (1024, 1024), "b": (1024, 1024), "c_out": (1024, 1024)}
    k = S.matmul_kernel(1024, 1024, 1024, 128, 256, 64)
    big = _timed(k, shapes, 24)
    tiny = dataclasses.replace(SPEC, memory={**SPEC.memory, "l2_bytes": 64 * 1024})
    _, small = sim.run_kernel(k, shapes, {}, block_dim=24, timing_only=True, machine=tiny)
    assert big.l2_hit_bytes > 0.5 * big.gm_bytes            # A row panels and B column panels come back
    # a 64 KiB L2 keeps only the rest of the 512-byte lines a 128-byte row chunk of A brought in
    assert small.l2_hit_bytes < 0.3 * big.l2_hit_bytes
    assert small.cycles > big.cycles                         # and the kernel waits on HBM instead


def test_vector_op_over_full_rows_is_one_contiguous_span():
    """A [64, 8] fp32 tile whose rows are whole is 2 KiB of contiguous bytes: 8 repeats of 256 bytes (PTO-ISA
    a2a3 walks it 1-D); only a narrower valid region costs one masked repeat per row."""
    def v_busy(valid):
        k = S.single_op_kernel("TADD", [F32, F32], F32, (64, 8), valid=valid)
        rep = _timed(k, {"in0": (64, 8), "in1": (64, 8), "out": (64, 8)}, 1)
        return rep.utilization["AIV"]["V"] * rep.cycles * SPEC.num_aiv
    issue, bpc = SPEC.vector["issue_cycles"], SPEC.vector["bytes_per_cycle"]
    assert v_busy(None) == pytest.approx(issue + 64 * 8 * 4 / bpc)
    assert v_busy((64, 4)) == pytest.approx(issue + 64)

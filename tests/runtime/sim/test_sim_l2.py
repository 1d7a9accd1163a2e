"""The write-back, write-allocate L2 (gm.py): data written is re-read from L2 whatever the tiling, a
stream larger than L2 stays HBM-bound, dirty lines evicted or left in outputs are written to HBM."""
import dataclasses

from pypto import dtypes
from pypto.machine import get_machine
from pypto.runtime import sim
from pypto.testing import kernels as S
from pypto.runtime.sim.gm import LINE, GlobalMemory

F16 = dtypes.float16
SPEC = get_machine()
BIG_PORT = 1e9          # bytes/cycle: the memory, not the core's port, sets the rate


def _with_l2(nbytes):
    return dataclasses.replace(SPEC, memory={**SPEC.memory, "l2_bytes": nbytes})


def _vals(rows, cols, r0, c0):
    return (rows, cols, r0, c0)          # one tile operand: (valid rows, valid cols), then GM offsets


def _box(g, rows, cols, r0, c0, shape=(64, 1024)):
    return g.box_lines(("ws", 0), shape, 2, False, _vals(rows, cols, r0, c0), 1)


def test_a_small_workspace_written_then_re_read_with_another_tiling_is_l2_bound():
    g = GlobalMemory(SPEC, 256)
    t = 0.0
    for r in range(0, 64, 16):                                    # written as [16, 1024] row tiles
        t = g.access(t, 16 * 1024 * 2, BIG_PORT, _box(g, 16, 1024, r, 0), True)
    t_write = t
    for c in range(0, 1024, 256):                                 # re-read as [64, 256] column tiles
        t = g.access(t, 64 * 256 * 2, BIG_PORT, _box(g, 64, 256, 0, c), False)
    nbytes = 64 * 1024 * 2
    assert g.hbm_bytes == 0 and g.l2_hit_bytes == nbytes
    l2_rate = SPEC.memory["l2_bytes_per_s"] / (SPEC.clock_ghz * 1e9)
    assert abs(t_write - nbytes / l2_rate) < 1 and abs((t - t_write) - nbytes / l2_rate) < 1


def test_a_read_of_lines_never_touched_comes_from_hbm():
    g = GlobalMemory(SPEC, 256)
    t = g.access(0.0, 64 * 1024 * 2, BIG_PORT, _box(g, 64, 1024, 0, 0), False)
    assert g.hbm_bytes == 64 * 1024 * 2 and g.l2_hit_bytes == 0
    assert abs(t - 64 * 1024 * 2 / SPEC.hbm_bytes_per_cycle) < 1


def test_boxes_cover_the_lines_of_their_rows_only():
    g = GlobalMemory(SPEC, 256)
    left, right = set(_box(g, 8, 256, 0, 0)), set(_box(g, 8, 256, 0, 256))   # 512-byte chunks, 2 KiB rows
    assert len(left) == 8 and not left & right
    assert set(_box(g, 8, 1024, 0, 0)) == left | right | set(_box(g, 8, 512, 0, 512))
    assert set(_box(g, 3, 100, 1, 200)) == {1 << 44 | line for line in (4, 5, 8, 9, 12, 13)}   # straddling


def test_dirty_lines_evicted_cost_hbm_writes():
    g = GlobalMemory(_with_l2(64 * 1024), 256)
    t = 0.0
    for r in range(0, 1024, 16):                                  # 2 MiB written into a 64 KiB L2
        t = g.access(t, 16 * 1024 * 2, BIG_PORT, _box(g, 16, 1024, r, 0, (1024, 1024)), True)
    assert g.writeback_bytes >= 2 * 1024 * 1024 - 2 * 64 * 1024         # L2 plus one write may stay
    assert g.hbm_bytes == g.writeback_bytes
    left = sum(map(len, g.dirty.values())) * LINE
    assert g.writeback_bytes + left == 2 * 1024 * 1024


def test_a_stream_larger_than_l2_is_hbm_bound():
    tiny = _with_l2(1024 * 1024).without_launch()          # the stream's own time, not the launch's
    _, rep = sim.run_kernel(S.copy_kernel(2048, 2048, 8, F16), {"x": (2048, 2048), "y": (2048, 2048)}, {},
                            block_dim=48, timing_only=True, machine=tiny)
    achieved = rep.gm_bytes / (rep.time_us * 1e-6)
    assert rep.l2_hit_bytes == 0
    assert 0.85 * SPEC.memory["hbm_bytes_per_s"] <= achieved <= 1.0001 * SPEC.memory["hbm_bytes_per_s"]


def test_outputs_left_dirty_in_l2_are_flushed_to_hbm_at_the_end():
    shapes = {"x": (512, 1024), "y": (512, 1024)}
    _, rep = sim.run_kernel(S.copy_kernel(512, 1024, 8, F16), shapes, {}, block_dim=8, timing_only=True)
    note = next(n for n in rep.notes if n.startswith("L2 write-back"))
    assert "1.0 MB output lines flushed" in note                 # all of y (1 MiB) reaches HBM
    # the run lasts at least as long as HBM needs for x in and y out
    assert rep.cycles >= 2 * 512 * 1024 * 2 / SPEC.hbm_bytes_per_cycle

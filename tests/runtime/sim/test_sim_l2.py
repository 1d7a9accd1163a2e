"""The write-back, write-allocate L2 (gm.py): data written is re-read from L2 whatever the tiling, a
stream larger than L2 stays HBM-bound, dirty lines evicted or left in outputs are written to HBM, and
residency is per 32-byte sector, so no byte of an input is ever read for the first time from L2."""
import dataclasses

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pypto
import pypto.nn.functional as PF
from pypto import dtypes
from pypto.machine import get_machine
from pypto.runtime import sim
from pypto.testing import kernels as S
from pypto.passes.pipeline import lower
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
    left, right = set(_box(g, 8, 256, 0, 0)[0]), set(_box(g, 8, 256, 0, 256)[0])  # 512-byte chunks, 2 KiB rows
    assert len(left) == 8 and not left & right
    assert set(_box(g, 8, 1024, 0, 0)[0]) == left | right | set(_box(g, 8, 512, 0, 512)[0])
    lines, part_lines, parts, sectors, _ = _box(g, 3, 100, 1, 200)                        # straddling
    assert set(lines) == {1 << 44 | line for line in (4, 5, 8, 9, 12, 13)}
    # row 1 is bytes 2448..2648: line 4 from byte 400 (sectors 12..15), line 5 up to byte 88 (sectors 0..2)
    assert dict(parts)[1 << 44 | 4] == 0xF000
    assert dict(parts)[1 << 44 | 5] == 0x0007
    assert sectors == 3 * 7                    # bytes 400..599 of a 512-byte line: sectors 12..18


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


# ---------------------------------------------------------------- sector residency: first reads come from HBM
IN_SHAPE = (64, 256)                    # fp16: 512-byte rows, one L2 line each


def _read_all(boxes, shape=IN_SHAPE, itemsize=2):
    """Read the boxes ((rows, cols, r0, c0) of an input never touched) in order; (the GM model, the number
    of distinct bytes they cover, counted here with a byte map of the input)."""
    g = GlobalMemory(SPEC, 256)
    touched = np.zeros(shape[0] * shape[1] * itemsize, dtype=bool)
    t = 0.0
    for rows, cols, r0, c0 in boxes:
        box = g.box_lines(("x", 0), shape, itemsize, False, _vals(rows, cols, r0, c0), 1)
        t = g.access(t, rows * cols * itemsize, BIG_PORT, box, False)
        for r in range(r0, r0 + rows):
            a = (r * shape[1] + c0) * itemsize
            touched[a:a + cols * itemsize] = True
    return g, int(touched.sum())


def test_interleaved_half_line_reads_are_all_charged_to_hbm():
    # the left halves of every line, then the right halves: no byte of the right halves was ever read,
    # so none may hit (a model keeping a line resident whole after a partial read would hit all of them)
    g, distinct = _read_all([(64, 128, 0, 0), (64, 128, 0, 128)])
    assert distinct == 64 * 512
    assert g.hbm_bytes == distinct and g.l2_hit_bytes == 0


def test_decode_shaped_narrow_column_reads_are_all_charged_to_hbm():
    # K of decode attention read transposed: 64-byte pieces of 256-byte rows, two rows to a line
    shape = (512, 128)
    boxes = [(512, 32, 0, c) for c in range(0, 128, 32)]
    g, distinct = _read_all(boxes, shape)
    assert distinct == 512 * 128 * 2 and g.hbm_bytes == distinct and g.l2_hit_bytes == 0


def test_a_re_read_of_the_same_box_is_a_hit():
    for box in [(64, 128, 0, 0), (64, 256, 0, 0), (7, 100, 3, 33), (1, 37, 5, 11)]:
        g, distinct = _read_all([box])
        hbm, hit = g.hbm_bytes, g.l2_hit_bytes
        rows, cols, r0, c0 = box
        g.access(1e6, rows * cols * 2, BIG_PORT, g.box_lines(("x", 0), IN_SHAPE, 2, False, _vals(*box), 1), False)
        assert g.hbm_bytes == hbm and g.l2_hit_bytes == hit + rows * cols * 2, box


def test_sectors_written_are_re_read_from_l2_the_rest_from_hbm():
    g = GlobalMemory(SPEC, 256)
    g.access(0.0, 64 * 128 * 2, BIG_PORT, _box(g, 64, 128, 0, 0, IN_SHAPE), True)   # left halves written
    g.access(1e6, 64 * 256 * 2, BIG_PORT, _box(g, 64, 256, 0, 0, IN_SHAPE), False)  # whole lines read
    assert g.hbm_bytes == 64 * 128 * 2 and g.l2_hit_bytes == 64 * 128 * 2


@st.composite
def _input_reads(draw):
    """An input shape (rows of whole lines, or of 600 bytes, so rows share lines) and a few boxes of it
    at any offsets and widths."""
    shape = draw(st.sampled_from([IN_SHAPE, (40, 300)]))
    boxes = []
    for _ in range(draw(st.integers(1, 6))):
        r0 = draw(st.integers(0, shape[0] - 1))
        c0 = draw(st.integers(0, shape[1] - 1))
        boxes.append((draw(st.integers(1, shape[0] - r0)), draw(st.integers(1, shape[1] - c0)), r0, c0))
    return shape, boxes


@settings(max_examples=150, deadline=None)
@given(_input_reads())
def test_hbm_moves_at_least_every_distinct_byte_of_an_input_read(case):
    shape, boxes = case
    g, distinct = _read_all(boxes, shape)
    assert g.hbm_bytes >= distinct
    # and no more than whole sectors: at most 31 bytes more at each end of each row segment read
    assert g.hbm_bytes <= distinct + 2 * 31 * sum(rows for rows, _, _, _ in boxes)


def test_decode_attention_stays_within_its_roofline():
    """bench_tensor.py's decode row: 67 MB of K and V that nothing read before must all come from HBM."""
    z = torch.zeros
    q, k, v = z(32, 1, 128, dtype=torch.float16), z(32, 4096, 128, dtype=torch.float16), \
        z(32, 4096, 128, dtype=torch.float16)
    graph = lower(pypto.jit(PF.scaled_dot_product_attention, backend="reference").trace(q, k, v), machine="a2a3")
    _, rep = sim.run(graph, dict(zip(graph.inputs, (q, k, v))), {}, machine="a2a3", timing_only=True)
    nbytes = 2 * (q.numel() + k.numel() + v.numel() + q.numel())
    spec = pypto.load_machine("a2a3")
    roofline_us = max(2 * 2 * 32 * 4096 * 128 / spec.peak_cube_flops("float16"),
                      nbytes / spec.memory["hbm_bytes_per_s"]) * 1e6
    assert rep.time_us >= roofline_us
    kv = 2 * k.numel() * 2
    assert rep.gm_bytes - rep.l2_hit_bytes >= kv


def _state(g):
    return (g.hbm_bytes, g.l2_hit_bytes, g.writeback_bytes, [set(x) for x in g.gens],
            {ln: m for ln, m in g.partial.items() if m != (1 << 16) - 1},    # a full mask = not partial
            {b: set(d) for b, d in g.dirty.items()}, dict(g.first_write), g.hbm, g.l2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(0, 40), st.integers(0, 63),
                          st.integers(1, 64), st.booleans(), st.sampled_from([1, 2, 4])),
                min_size=1, max_size=120))
def test_the_one_line_path_changes_the_l2_as_the_box_path_does(accesses):
    """gm.move sends a box inside one line through access_line (no box, no fresh entry): the same times,
    hit and HBM bytes, residency, partial sectors, dirty lines and evictions as box_lines + access. A
    small L2 (8 lines) makes evictions and write-backs happen; rows of 64 elements of 1, 2 or 4 bytes."""
    spec = _with_l2(8 * LINE)
    fast, ref = GlobalMemory(spec, 256), GlobalMemory(spec, 256)
    t_fast = t_ref = 0.0
    for rows, r0, c0, cols, write, isz in accesses:
        cols = min(cols, 64 - c0)
        shape = (48, 64)
        rows = min(rows, shape[0] - r0)
        vals = (rows, cols, r0, c0)
        nbytes = rows * cols * isz
        loc = (f"b{isz}", 0)
        t_fast = fast.move(t_fast, nbytes, 64.0, loc, shape, isz, False, vals, 1, write)
        t_ref = ref.access(t_ref, nbytes, 64.0, ref.box_lines(loc, shape, isz, False, vals, 1), write)
        assert t_fast == t_ref
        assert _state(fast) == _state(ref)

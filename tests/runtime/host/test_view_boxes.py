"""Boxes of views whose rows are rows of their base (runtime/host/regions.py): a block of rows chosen
by a loop variable, or one copy of a multi-buffered workspace, is the exact box of the region, so two
tasks that touch different columns of the same moving rows do not wait for each other; a view whose
rows do not line up with its base's keeps the conservative box of the rows its bytes span."""
from __future__ import annotations

import sympy

from pypto import dtypes
from pypto.ir.execution import Buffer, ExecutionGraph
from pypto.runtime.host import GMBuffers, Geometry
from pypto.runtime.host.deps import DependencyTracker

F32, F16 = dtypes.float32, dtypes.float16
i = sympy.Symbol("i", integer=True, nonnegative=True)


def _geometry(buffers):
    g = ExecutionGraph({}, {b.name: b for b in buffers}, [], [], [])
    return Geometry(GMBuffers(g, {}, {}, timing_only=True))


def test_a_row_block_view_moving_with_the_loop_has_exact_boxes():
    geo = _geometry([Buffer("a", (64, 256), F32, "workspace"),
                     Buffer("blk", (16, 256), F32, "view", view_of="a", view_offset=16 * 256 * i)])
    # rows 2..5, columns 0..127 of block 3 = rows 50..53 of a, the same columns
    assert geo.box("blk", (2, 0), (4, 128), {"i": 3}) == ("a", 50, 54, 0, 128)
    assert geo.access_box("blk", (2, 128), (1, 64), {"i": 3}) == ("a", 50, 51, 128, 192)
    tracker = DependencyTracker(geo)
    left = [geo.box("blk", (0, 0), (16, 128), {"i": 1})]
    right = [geo.box("blk", (0, 128), (16, 128), {"i": 1})]
    assert tracker.add(0, [], left) == set()
    assert tracker.add(1, [], right) == set()              # other columns of the same rows: independent
    assert tracker.add(2, left, []) == {0}


def test_one_copy_of_a_multibuffered_workspace_is_its_own_box():
    """[K, 32, 64] copies; copy k = rows 32k .. 32k + 31: the copies of different iterations never
    overlap, the same copy K iterations later does."""
    copies = Buffer("ws_copies", (3, 32, 64), F16, "workspace")
    ws = Buffer("ws", (32, 64), F16, "view", view_of="ws_copies", view_offset=sympy.Mod(i, 3) * 32 * 64)
    geo = _geometry([copies, ws])
    boxes = [geo.box("ws", (0, 0), (32, 64), {"i": k}) for k in range(4)]
    assert boxes[:3] == [("ws_copies", 32 * k, 32 * k + 32, 0, 64) for k in range(3)]
    assert boxes[3] == boxes[0]
    tracker = DependencyTracker(geo)
    deps = [tracker.add(k, [], [b]) for k, b in enumerate(boxes)]
    assert deps == [set(), set(), set(), {0}]


def test_views_whose_rows_do_not_line_up_keep_the_conservative_box():
    # a [8, 128] view starting half-way through a row of a [16, 256] base: its rows straddle base rows
    geo = _geometry([Buffer("a", (16, 256), F32, "workspace"),
                     Buffer("v", (8, 128), F32, "view", view_of="a", view_offset=128)])
    assert geo.box("v", (0, 0), (2, 64), {}) == ("a", 0, 2, 0, 256)
    assert geo.access_box("v", (0, 0), (1, 64), {}) is None
    # the same row length but another item size: byte rows differ, conservative too
    geo = _geometry([Buffer("a", (16, 256), F32, "workspace"),
                     Buffer("h", (16, 256), F16, "view", view_of="a")])
    assert geo.box("h", (1, 0), (1, 256), {}) == ("a", 0, 1, 128, 256)

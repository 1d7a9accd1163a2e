"""memory.plan_memory / check_addresses, Block IR text in and out: tiles live at the same time get
disjoint bytes, a dead tile's bytes are reused, an elementwise result may take the bytes of a source
read for the last time (and not otherwise), tiles of different regions never share bytes, a scratch
tile is declared and placed past the others; the user's addresses are checked, not moved."""
import pytest

import pypto
from pypto.errors import MemoryPlanError, SourceLoc
from pypto.ir.isa import MemSpace
from pypto.passes.memory import check_addresses, plan_memory

from .ir_text import assert_text, block

ARGS = "block k  core=AIV  args(x: gm f32[8, 64], y: gm f32[8, 64])\n"
F32_8x64 = 8 * 64 * 4          # 0x800 bytes


def _planned(text, **kw):
    blk = block(ARGS + text)
    used = plan_memory(blk, pypto.get_machine(), **kw)
    return blk, used


def test_live_tiles_are_disjoint_and_a_dead_tile_is_reused():
    """a and b are live together; c takes a's bytes in place (TMAX reads a for the last time); d is loaded
    after c's store, when a, b and c are all dead: it reuses the lowest bytes."""
    blk, used = _planned("""
  tile a : ub f32[8, 64]
  tile b : ub f32[8, 64]
  tile c : ub f32[8, 64]
  tile d : ub f32[8, 64]
  TLOAD  a, x[0, 0]
  TLOAD  b, x[0, 0]
  TMAX   c, a, b
  TSTORE y[0, 0], c
  TLOAD  d, x[0, 0]
  TSTORE y[0, 0], d
""")
    assert used == {MemSpace.UB: 2 * F32_8x64}
    assert_text(blk, ARGS + """
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
  tile c : ub f32[8, 64] @0x00000
  tile d : ub f32[8, 64] @0x00000
  TLOAD  a, x[0, 0]   MTE2
  TLOAD  b, x[0, 0]   MTE2
  TMAX   c, a, b      V
  TSTORE y[0, 0], c   MTE3
  TLOAD  d, x[0, 0]   MTE2
  TSTORE y[0, 0], d   MTE3
""")


def test_no_in_place_result_over_a_source_still_to_be_read():
    blk, _ = _planned("""
  tile a : ub f32[8, 64]
  tile b : ub f32[8, 64]
  tile c : ub f32[8, 64]
  TLOAD  a, x[0, 0]
  TLOAD  b, x[0, 0]
  TMAX   c, a, b
  TSTORE y[0, 0], c
  TSTORE y[0, 0], a
  TSTORE y[0, 0], b
""")
    assert [t.addr for t in blk.tiles] == [0, F32_8x64, 2 * F32_8x64]


def test_a_tile_live_round_a_loop_keeps_its_bytes():
    """The accumulator a is read before it is written in the body: live across the back edge, so the
    tile loaded in the loop gets other bytes."""
    blk, _ = _planned("""
  tile a : ub f32[8, 64]
  tile b : ub f32[8, 64]
  for i in range(0, 4, 1):
    TLOAD  b, x[0, 0]
    TADD   a, a, b
  TSTORE y[0, 0], a
""")
    assert [t.addr for t in blk.tiles] == [0, F32_8x64]


def test_regions_never_share_bytes():
    """Without regions the second tile reuses the first one's dead bytes; in two regions (the ping-pong
    copies of a loop body) it does not."""
    text = """
  tile a : ub f32[8, 64]
  tile b : ub f32[8, 64]
  TLOAD  a, x[0, 0]
  TSTORE y[0, 0], a
  TLOAD  b, x[0, 0]
  TSTORE y[0, 0], b
"""
    assert [t.addr for t in _planned(text)[0].tiles] == [0, 0]
    assert [t.addr for t in _planned(text, regions={"a": 0, "b": 1})[0].tiles] == [0, F32_8x64]


def test_scratch_tile_is_declared_and_placed_past_the_others():
    blk, used = _planned("""
  tile a : ub f32[8, 64]
  tile s : ub f32[8, 8]
  TLOAD   a, x[0, 0]
  TROWSUM s, a
  TSTORE  y[0, 0], s
""")
    assert_text(blk, ARGS + """
  tile a    : ub f32[8, 64] @0x00000
  tile s    : ub f32[8, 8] @0x00800
  tile tmp0 : ub f32[8, 64] @0x00900
  TLOAD   a, x[0, 0]          MTE2
  TROWSUM s, a {tmp=tmp0}     V
  TSTORE  y[0, 0], s          MTE3
""")
    assert used[MemSpace.UB] == 0x900 + F32_8x64


def test_user_addresses_are_checked_not_moved():
    ok = block(ARGS + """
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x01000
  TLOAD  a, x[0, 0]
  TLOAD  b, x[0, 0]
  TADD   a, a, b
  TSTORE y[0, 0], a
""")
    check_addresses(ok, pypto.get_machine())
    assert [t.addr for t in ok.tiles] == [0, 0x1000]
    overlapping = block(ARGS + """
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00400
  TLOAD  a, x[0, 0]
  TLOAD  b, x[0, 0]                 # kernel.py:4
  TADD   a, a, b
  TSTORE y[0, 0], a
""")
    where = {"a": SourceLoc("kernel.py", 1), "b": SourceLoc("kernel.py", 2)}
    with pytest.raises(MemoryPlanError, match=r"tile 'b' \(ub 0x400..0xc00\) overlaps tile 'a'") as e:
        check_addresses(overlapping, pypto.get_machine(), tile_loc=where)
    assert e.value.loc == where["b"] and "TLOAD at line 4 writes 'b'" in e.value.message

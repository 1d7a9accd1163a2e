"""software_pipeline on Professional mode's marked loops (pypto_pro/language/pipeline_marks.py), Block IR
text in and out: slot placeholders renamed per copy to the user's slot tiles (a static non-default valid
shape and a tail valid shape each get the slot's versions), the front end's own tile whose valid shape
follows the loop variable versioned per copy, an if/else on the first iteration decided where the copy
decides it, a statically empty steady loop left out; GM workspace slots per copy (a slot-index symbol
and the handoff buffer swapped per copy, each copy's use homed in the list it lands in); bad marks."""
import pytest
import sympy

from pypto.errors import CompileError
from pypto.ir.block import For, If, walk_instrs
from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer
from pypto.passes.software_pipeline import software_pipeline

from .ir_text import assert_text, block

PRO = """
block k  core=AIV  args(x: gm f32[n, 64], y: gm f32[n, 64])  params(n)
  symbols n: int>0
  tile g_at1 : ub f32[8, 64]  valid [Min(8, n - 8*i), 64]
  tile h_at1 : ub f32[8, 64]  valid [4, 64]
  tile acc : ub f32[8, 64] @0x3000  valid [Min(8, n - 8*i), 64]
  tile g0 : ub f32[8, 64] @0x0000
  tile g1 : ub f32[8, 64] @0x0800
  tile h0 : ub f32[8, 64] @0x1000
  tile h1 : ub f32[8, 64] @0x1800
  for i in range(0, TRIP, 1) {unroll=2, skew=(0, 1), tail=TAIL, rename=False, slots={g_at1=(g0, g1), h_at1=(h0, h1)}}:
    TLOAD  g_at1, x[8*i, 0] {stage=0}
    TLOAD  h_at1, x[8*i, 0] {stage=0}
    if Eq(i, 0):
      TMULS  acc, g_at1, 1.0 {stage=1}
    else:
      TADD   acc, h_at1, g_at1 {stage=1}
    TSTORE y[8*i, 0], acc {stage=1}
"""


def test_a_pro_loop_with_a_run_time_trip_count():
    """tail=guard: iteration k uses slots g_(k mod 2), h_(k mod 2) in both stages; g's tail valid shape and h's
    static [4, 64] give the slots' versions (g0_s1 ...: the slot's address and buffer, the copy's iteration in
    the valid shape); acc's loop-variable valid shape gets a declaration per copy's valid shape (the
    numbers skip versions no copy kept); copy 1's stage 1 (iteration i + 1 > 0) takes the else branch of
    the first-iteration if, copy 0's keeps the if; the placeholders are gone."""
    blk = block(PRO.replace("TRIP", "n").replace("TAIL", "guard"))
    software_pipeline(blk)
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], y: gm f32[n, 64]) params(n)
  symbols n: int>0
  tile acc : ub f32[8, 64] @0x03000 valid [Min(8, -8*i + n), 64]
  tile acc_s2: ub f32[8, 64] @0x03000 valid [Min(8, -8*i + n - 8), 64] buffer acc
  tile g0 : ub f32[8, 64] @0x00000
  tile g0_s1 : ub f32[8, 64] @0x00000 valid [Min(8, n), 64] buffer g0
  tile g0_s2 : ub f32[8, 64] @0x00000 valid [Min(8, -8*i + n), 64] buffer g0
  tile g0_s3 : ub f32[8, 64] @0x00000 valid [Min(8, -8*i + n - 16), 64] buffer g0
  tile g1 : ub f32[8, 64] @0x00800
  tile g1_s1 : ub f32[8, 64] @0x00800 valid [Min(8, -8*i + n - 8), 64] buffer g1
  tile h0 : ub f32[8, 64] @0x01000
  tile h0_s1 : ub f32[8, 64] @0x01000 valid [4, 64] buffer h0
  tile h1 : ub f32[8, 64] @0x01800
  tile h1_s1 : ub f32[8, 64] @0x01800 valid [4, 64] buffer h1
  TLOAD g0_s1, x[0, 0] MTE2
  TLOAD h0_s1, x[0, 0] MTE2
  for i in range(0, n, 2) {pipeline=2, skewed=1}:
    if i + 1 < n:
      TLOAD g1_s1, x[8*i + 8, 0] MTE2
      TLOAD h1_s1, x[8*i + 8, 0] MTE2
    if Eq(i, 0):
      TMULS acc, g0_s2, 1.0 V
    else:
      TADD acc, h0_s1, g0_s2 V
    TSTORE y[8*i, 0], acc MTE3
    if i + 1 < n:
      if i + 2 < n:
        TLOAD g0_s3, x[8*i + 16, 0] MTE2
        TLOAD h0_s1, x[8*i + 16, 0] MTE2
      TADD acc_s2, h1_s1, g1_s1 V
      TSTORE y[8*i + 8, 0], acc_s2 MTE3
""")


def test_a_pro_loop_with_a_short_static_trip_count_has_no_loop_and_no_ifs():
    """Two iterations, depth 2, skew 1 (tail=peel): the steady loop would run no iteration, so it is left out;
    the prologue and the epilogue decide every guard and the first-iteration if (iteration 0: the then branch,
    iteration 1: the else branch); the tails' valid shapes are static (iteration 0's full: the slot itself,
    iteration 1's 4 rows); acc, no longer used with its loop-variable valid shape, is dropped."""
    blk = block(PRO.replace("TRIP", "2").replace("TAIL", "peel").replace("n - 8*i", "12 - 8*i"))
    software_pipeline(blk)
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], y: gm f32[n, 64]) params(n)
  symbols n: int>0
  tile acc_s1: ub f32[8, 64] @0x03000 buffer acc
  tile acc_s4: ub f32[8, 64] @0x03000 valid [4, 64] buffer acc
  tile g0 : ub f32[8, 64] @0x00000
  tile g1 : ub f32[8, 64] @0x00800
  tile g1_s2 : ub f32[8, 64] @0x00800 valid [4, 64] buffer g1
  tile h0 : ub f32[8, 64] @0x01000
  tile h0_s1 : ub f32[8, 64] @0x01000 valid [4, 64] buffer h0
  tile h1 : ub f32[8, 64] @0x01800
  tile h1_s1 : ub f32[8, 64] @0x01800 valid [4, 64] buffer h1
  TLOAD g0, x[0, 0] MTE2
  TLOAD h0_s1, x[0, 0] MTE2
  TLOAD g1_s2, x[8, 0] MTE2
  TLOAD h1_s1, x[8, 0] MTE2
  TMULS acc_s1, g0, 1.0 V
  TSTORE y[0, 0], acc_s1 MTE3
  TADD acc_s4, h1_s1, g1_s2 V
  TSTORE y[8, 0], acc_s4 MTE3
""")


WS = """
block k  core=AIV  args(x: gm f32[n, 64], ws: gm f32[16, 64])  params(n)
  symbols n: int>0, s: int>=0
  tile t0 : ub f32[8, 64] @0x0000
  for i in range(0, n, 1) {unroll=2, skew=(0, 1), tail=guard, rename=False}:
    TLOAD  t0, x[8*i, 0] {stage=0}
    TSTORE ws[8*s, 0], t0 {stage=1}
"""


def test_a_gm_workspace_slot_per_copy_with_its_handoff_buffer_and_home():
    """The workspace placeholder's row symbol s is iteration k's slot index ((1, 0): slot 1 first), its handoff
    buffer the slot's; each copy's use gets its own mark, homed in the statement list the copy lands in (the
    loop's body, a guard's body), the uses numbered in program order."""
    blk = block(WS)
    loop = blk.body[0]
    store = loop.body[1]
    s = next(f for f in store.operands[0].offsets[0].free_symbols if f.name == "s")
    loop.attrs["slots"] = {s: (1, 0)}
    place, b0, b1 = (HandoffBuffer(f"ws{k}", f"workspace slot ws{k}") for k in ("_at", 0, 1))
    loop.attrs["handoffs"] = {place: (b1, b0)}
    store.attrs[HANDOFF] = HandoffAccess(place, 7, loop.body)
    software_pipeline(blk)
    outer = blk.body[1]
    stores = [(ins, lst) for lst in (outer.body, outer.body[2].then_body) for ins in lst
              if getattr(ins, "op", None) == "TSTORE"]
    marks = [ins.attrs.pop(HANDOFF) for ins, _ in stores]
    assert [m.buffer for m in marks] == [b1, b0]
    assert [m.use for m in marks] == [0, 1]
    assert all(m.home is lst for m, (_, lst) in zip(marks, stores))
    assert_text(blk, """
block k core=AIV args(x: gm f32[n, 64], ws: gm f32[16, 64]) params(n)
  symbols n: int>0
  tile t0 : ub f32[8, 64] @0x00000
  TLOAD t0, x[0, 0] MTE2
  for i in range(0, n, 2) {pipeline=2, skewed=1}:
    if i + 1 < n:
      TLOAD t0, x[8*i + 8, 0] MTE2
    TSTORE ws[8, 0], t0 MTE3
    if i + 1 < n:
      if i + 2 < n:
        TLOAD t0, x[8*i + 16, 0] MTE2
      TSTORE ws[0, 0], t0 MTE3
""")


@pytest.mark.parametrize("mark", [{"slots": {"t0": (1, 0)}},                       # a tile's slots are tiles
                                  {"slots": {sympy.Symbol("s"): ("t0", "t0")}},    # a symbol's are ints
                                  {"slots": {sympy.Symbol("s"): (0, 1, 2)}},       # 3 does not divide 2
                                  {"handoffs": {"ws": ("a", "b")}}])               # buffers, not names
def test_bad_pro_marks_are_a_compile_error_at_the_loop(mark):
    blk = block(WS)
    blk.body[0].attrs.update(mark)
    with pytest.raises(CompileError, match=r"bad mark on the loop over i.*symbol: \(P ints\)"):
        software_pipeline(blk)

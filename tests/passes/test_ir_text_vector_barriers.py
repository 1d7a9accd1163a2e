"""vector_barriers.insert_barriers, Block IR text in and out: pipe_barrier(V) before a vector instruction
that reads or overwrites bytes a vector instruction wrote since the last barrier (RAW, WAW), or overwrites
bytes a vector instruction read since then (WAR), the previous loop iteration's accesses included; none
where two vector instructions only read the same bytes or touch other bytes, none for other pipes."""
from pypto.passes.vector_barriers import insert_barriers

from .ir_text import assert_text, block

HEAD = """
block k  core=AIV  args(x: gm f32[8, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
  tile c : ub f32[8, 64] @0x01000
"""


def test_barrier_before_reading_what_the_vector_pipe_just_wrote():
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   b, a
  TNEG   c, a
  TADD   c, b, c
  TSTORE x[0, 0], c
""")
    insert_barriers(blk)
    assert_text(blk, HEAD + """
  TLOAD        a, x[0, 0]   MTE2
  TABS         b, a         V
  TNEG         c, a         V
  pipe_barrier V
  TADD         c, b, c      V
  TSTORE       x[0, 0], c   MTE3
""")


def test_loop_body_sees_the_previous_iteration_s_accesses():
    """TADD reads a, which TEXP wrote at the end of the previous iteration (RAW); TABS overwrites b, which
    TADD just read (WAR); TEXP reads c, written by TADD before the last barrier (cleared), and overwrites a,
    which TADD and TABS read since it (WAR)."""
    blk = block(HEAD + """
  for i in range(0, 4, 1):
    TADD   c, a, b
    TABS   b, a
    TEXP   a, c
""")
    insert_barriers(blk)
    assert_text(blk, HEAD + """
  for i in range(0, 4, 1):
    pipe_barrier V
    TADD         c, a, b   V
    pipe_barrier V
    TABS         b, a      V
    pipe_barrier V
    TEXP         a, c      V
""")


def test_overwriting_what_an_earlier_vector_instruction_reads_needs_a_barrier():
    """WAR: TNEG overwrites a, which TABS read and nobody wrote on the vector pipe (the load is MTE2's);
    TEXP reads a after TNEG wrote it (RAW); TSQRT reads a as TEXP does and writes b, untouched since that
    barrier: read-read needs none."""
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   b, a
  TNEG   a, c
  TEXP   c, a
  TSQRT  b, a
""")
    insert_barriers(blk)
    assert_text(blk, HEAD + """
  TLOAD        a, x[0, 0]   MTE2
  TABS         b, a         V
  pipe_barrier V
  TNEG         a, c         V
  pipe_barrier V
  TEXP         c, a         V
  TSQRT        b, a         V
""")


def test_a_read_late_in_the_body_is_a_war_hazard_for_the_next_iteration_s_write():
    """TNEG reads a after the user's barrier; the next iteration's TABS overwrites a: a barrier at the top of
    the body, which the first iteration needs as well (a is read by TEXP before the loop)."""
    blk = block(HEAD + """
  TEXP   c, a
  for i in range(0, 4, 1):
    TABS   a, b
    pipe_barrier V
    TNEG   c, a
""")
    insert_barriers(blk)
    assert_text(blk, HEAD + """
  TEXP         c, a   V
  for i in range(0, 4, 1):
    pipe_barrier V
    TABS         a, b   V
    pipe_barrier V
    TNEG         c, a   V
""")


def test_a_write_over_an_earlier_instruction_s_source_or_scratch_needs_a_barrier():
    """TROWSUM reads a and its scratch b; TABS overwrites a (WAR on a source), TNEG overwrites the scratch's
    bytes after the barrier TABS got — no hazard left there, TNEG reads c which nobody wrote since."""
    head = HEAD + "  tile r : ub f32[8, 1] @0x01800\n"
    blk = block(head + """
  TROWSUM  r, a {tmp=b}
  TABS     a, c
  TNEG     b, c
""")
    insert_barriers(blk)
    assert_text(blk, head + """
  TROWSUM      r, a {tmp=b}   V
  pipe_barrier V
  TABS         a, c           V
  TNEG         b, c           V
""")

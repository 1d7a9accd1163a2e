"""vector_barriers.insert_barriers, Block IR text in and out: pipe_barrier(V) before a vector instruction
that reads or overwrites bytes a vector instruction wrote since the last barrier, the previous loop
iteration's writes included; none where the vector pipe touches other bytes, none for other pipes."""
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


def test_loop_body_sees_the_previous_iteration_s_writes():
    """TADD reads a, which TEXP wrote at the end of the previous iteration; TABS writes b, read (not
    written) since the barrier: no barrier; TEXP reads c, which TADD wrote."""
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
    TABS         b, a      V
    pipe_barrier V
    TEXP         a, c      V
""")

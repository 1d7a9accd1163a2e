"""pipe_sync.synchronize, Block IR text in and out: one set/wait pair per hand-over between two pipes
(RAW through a tile, RAW through GM), none between instructions of one pipe, ownership carried round a
loop's back edge by a pre-loop token and a drain, two tokens for a double buffer."""
import pypto
from pypto.passes.pipe_sync import synchronize

from .ir_text import assert_text, block

HEAD = """
block k  core=AIV  args(x: gm f32[32, 64], y: gm f32[32, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
"""


def test_mte2_to_v_hand_over_is_one_set_wait_pair():
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   b, a
  TNEG   b, b
  TSTORE y[0, 0], b
""")
    assert synchronize(blk, pypto.get_machine()) == {"MTE2->V": 1, "V->MTE3": 1}
    assert_text(blk, HEAD + """
  TLOAD      a, x[0, 0]      MTE2
  set_flag   MTE2 -> V  ev0
  wait_flag  MTE2 -> V  ev0
  TABS       b, a            V
  TNEG       b, b            V
  set_flag   V -> MTE3  ev0
  wait_flag  V -> MTE3  ev0
  TSTORE     y[0, 0], b      MTE3
""")


def test_no_flag_inside_one_pipe():
    text = HEAD + """
  TEXPANDS a, 1.0
  TABS     b, a
  TADD     a, a, b
"""
    blk = block(text)
    assert synchronize(blk, pypto.get_machine()) == {}
    assert_text(blk, text.replace("TEXPANDS a, 1.0", "TEXPANDS a, 1.0  V").replace("TABS     b, a", "TABS b, a  V")
                .replace("TADD     a, a, b", "TADD a, a, b  V"))


def test_hand_over_through_gm():
    """A load of what a store wrote: the GM tensor is the resource (MTE3 -> MTE2)."""
    blk = block(HEAD + """
  TSTORE y[0, 0], a
  TLOAD  b, y[0, 0]
""")
    synchronize(blk, pypto.get_machine())
    assert_text(blk, HEAD + """
  TSTORE     y[0, 0], a      MTE3
  set_flag   MTE3 -> MTE2  ev0
  wait_flag  MTE3 -> MTE2  ev0
  TLOAD      b, y[0, 0]      MTE2
""")


def test_loop_carries_ownership_round_the_back_edge():
    """One buffer reloaded every iteration: the store of iteration i hands it back to the load of i + 1
    (set at the end of the body, waited at its top), a pre-loop set lets the first load go, and the
    token left by the last iteration is drained after the loop."""
    blk = block(HEAD + """
  for i in range(0, 4, 1):
    TLOAD  a, x[8*i, 0]
    TABS   a, a
    TSTORE y[8*i, 0], a
""")
    synchronize(blk, pypto.get_machine())
    assert_text(blk, HEAD + """
  set_flag     MTE3 -> MTE2  ev0
  for i in range(0, 4, 1):
    wait_flag  MTE3 -> MTE2  ev0
    TLOAD      a, x[8*i, 0]  MTE2
    set_flag   MTE2 -> V  ev0
    wait_flag  MTE2 -> V  ev0
    TABS       a, a          V
    set_flag   V -> MTE3  ev0
    wait_flag  V -> MTE3  ev0
    TSTORE     y[8*i, 0], a  MTE3
    set_flag   MTE3 -> MTE2  ev0
  wait_flag    MTE3 -> MTE2  ev0
""")


def test_double_buffer_keeps_one_token_per_slot():
    """Two slots: the load into b waits only for b's own store of the previous iteration (ev1), not for
    the compute on a; every hand-over of the two slots has an event of its own, so both are in flight."""
    blk = block(HEAD + """
  for i in range(0, 4, 2):
    TLOAD  a, x[8*i, 0]
    TABS   a, a
    TSTORE y[8*i, 0], a
    TLOAD  b, x[8*i + 8, 0]
    TABS   b, b
    TSTORE y[8*i + 8, 0], b
""")
    assert synchronize(blk, pypto.get_machine()) == {"MTE3->MTE2": 2, "MTE2->V": 2, "V->MTE3": 2}
    assert_text(blk, HEAD + """
  set_flag     MTE3 -> MTE2  ev0
  set_flag     MTE3 -> MTE2  ev1
  for i in range(0, 4, 2):
    wait_flag  MTE3 -> MTE2  ev0
    TLOAD      a, x[8*i, 0]  MTE2
    set_flag   MTE2 -> V  ev0
    wait_flag  MTE2 -> V  ev0
    TABS       a, a          V
    set_flag   V -> MTE3  ev0
    wait_flag  V -> MTE3  ev0
    TSTORE     y[8*i, 0], a  MTE3
    set_flag   MTE3 -> MTE2  ev0
    wait_flag  MTE3 -> MTE2  ev1
    TLOAD      b, x[8*i + 8, 0]  MTE2
    set_flag   MTE2 -> V  ev1
    wait_flag  MTE2 -> V  ev1
    TABS       b, b          V
    set_flag   V -> MTE3  ev1
    wait_flag  V -> MTE3  ev1
    TSTORE     y[8*i + 8, 0], b  MTE3
    set_flag   MTE3 -> MTE2  ev1
  wait_flag    MTE3 -> MTE2  ev0
  wait_flag    MTE3 -> MTE2  ev1
""")

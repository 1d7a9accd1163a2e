"""event_alloc (run by pipe_sync.synchronize), Block IR text in and out: two hand-overs of one pipe pair
share an event id only when a happens-before chain proves the first was waited before the second is
set; otherwise each gets its own id, and ids never exceed the machine's."""
import dataclasses

import pypto
from pypto.passes.pipe_sync import synchronize

from .ir_text import assert_text, block

HEAD = """
block k  core=AIV  args(x: gm f32[16, 64], y: gm f32[16, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
"""


def _machine(event_ids: int):
    spec = pypto.get_machine()
    return dataclasses.replace(spec, memory=dict(spec.memory, event_ids=event_ids))


def test_one_id_when_a_chain_orders_the_two_hand_overs():
    """The second load into a waits for the vector op to release a (V -> MTE2), which came after the
    first MTE2 -> V wait: the second MTE2 -> V set cannot fire before the first was consumed."""
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   a, a
  TLOAD  a, x[8, 0]
  TABS   a, a
""")
    assert synchronize(blk, _machine(1)) == {"MTE2->V": 1, "V->MTE2": 1}
    assert_text(blk, HEAD + """
  TLOAD      a, x[0, 0]  MTE2
  set_flag   MTE2 -> V  ev0
  wait_flag  MTE2 -> V  ev0
  TABS       a, a        V
  set_flag   V -> MTE2  ev0
  wait_flag  V -> MTE2  ev0
  TLOAD      a, x[8, 0]  MTE2
  set_flag   MTE2 -> V  ev0
  wait_flag  MTE2 -> V  ev0
  TABS       a, a        V
""")


def test_two_ids_when_nothing_orders_them():
    """The load into b needs nothing from the vector pipe, so MTE2 may set b's flag before the vector
    pipe waited a's: one id would be set twice while live."""
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   a, a
  TLOAD  b, x[8, 0]
  TABS   b, b
""")
    assert synchronize(blk, _machine(8)) == {"MTE2->V": 2}
    assert_text(blk, HEAD + """
  TLOAD      a, x[0, 0]  MTE2
  set_flag   MTE2 -> V  ev0
  wait_flag  MTE2 -> V  ev0
  TABS       a, a        V
  TLOAD      b, x[8, 0]  MTE2
  set_flag   MTE2 -> V  ev1
  wait_flag  MTE2 -> V  ev1
  TABS       b, b        V
""")


def test_pipe_pairs_count_their_ids_apart():
    """ev0 of MTE2 -> V and ev0 of V -> MTE3 are different events: a machine with one id per pair runs it."""
    blk = block(HEAD + """
  TLOAD  a, x[0, 0]
  TABS   b, a
  TSTORE y[0, 0], b
""")
    assert synchronize(blk, _machine(1)) == {"MTE2->V": 1, "V->MTE3": 1}
    assert_text(blk, HEAD + """
  TLOAD      a, x[0, 0]  MTE2
  set_flag   MTE2 -> V  ev0
  wait_flag  MTE2 -> V  ev0
  TABS       b, a        V
  set_flag   V -> MTE3  ev0
  wait_flag  V -> MTE3  ev0
  TSTORE     y[0, 0], b  MTE3
""")

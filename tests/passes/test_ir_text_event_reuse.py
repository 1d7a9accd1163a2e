"""pipe_sync.synchronize when the first tries need more event ids than the machine has: a loop whose
stores each release their own tile round the back edge (one carried event per tile, as topk's k rounds
with k > 8) is synchronised again with one carried event per pipe pair (the end of the body's one set;
the next iteration's first write of any of the tiles waits for all the stores), never a SyncError."""
import dataclasses

import pypto
from pypto.passes.pipe_sync import synchronize

from .ir_text import assert_text, block

HEAD = """
block k  core=AIV  args(x: gm f32[32, 64], y: gm f32[96, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
  tile c : ub f32[8, 64] @0x01000
  tile d : ub f32[8, 64] @0x01800
"""

BODY = """
  for i in range(0, 4, 1):
    TLOAD  a, x[8*i, 0]
    TABS   b, a
    TNEG   c, a
    TEXP   d, a
    TSTORE y[24*i, 0], b
    TSTORE y[24*i + 8, 0], c
    TSTORE y[24*i + 16, 0], d
"""


def _machine(event_ids: int):
    spec = pypto.get_machine()
    return dataclasses.replace(spec, memory=dict(spec.memory, event_ids=event_ids))


def test_a_slot_per_store_when_the_ids_suffice():
    """Unchanged where it fits: each stored tile has a carried MTE3 -> V event of its own (3 ids)."""
    blk = block(HEAD + BODY)
    assert synchronize(blk, _machine(8)) == {"V->MTE2": 1, "MTE3->V": 3, "MTE2->V": 1, "V->MTE3": 3}


def test_one_carried_event_when_the_machine_has_fewer_ids():
    """Two ids per pipe pair (three carried releases needed one each): one carried MTE3 -> V event."""
    blk = block(HEAD + BODY)
    assert synchronize(blk, _machine(2)) == {"V->MTE2": 1, "MTE3->V": 1, "MTE2->V": 1, "V->MTE3": 1}
    assert_text(blk, HEAD + """
  set_flag       V -> MTE2  ev0
  set_flag       MTE3 -> V  ev0
  for i in range(0, 4, 1):
    wait_flag      V -> MTE2  ev0
    TLOAD          a, x[8*i, 0]                            MTE2
    set_flag       MTE2 -> V  ev0
    wait_flag      MTE3 -> V  ev0
    wait_flag      MTE2 -> V  ev0
    TABS           b, a                                    V
    TNEG           c, a                                    V
    TEXP           d, a                                    V
    set_flag       V -> MTE3  ev0
    set_flag       V -> MTE2  ev0
    wait_flag      V -> MTE3  ev0
    TSTORE         y[24*i, 0], b                           MTE3
    TSTORE         y[24*i + 8, 0], c                       MTE3
    TSTORE         y[24*i + 16, 0], d                      MTE3
    set_flag       MTE3 -> V  ev0
  wait_flag      V -> MTE2  ev0
  wait_flag      MTE3 -> V  ev0
""")


def test_one_id_per_pair_is_enough():
    blk = block(HEAD + BODY)
    assert synchronize(blk, _machine(1)) == {"V->MTE2": 1, "MTE3->V": 1, "MTE2->V": 1, "V->MTE3": 1}


def test_straight_line_reuses_an_id_behind_a_full_barrier():
    """Nothing orders the two loads' hand-overs (MTE2 may set b's flag before the vector pipe waited a's)
    and the machine has one id: the second set reuses ev0 behind a pipe_barrier(S) (PIPE_ALL), by which
    the first wait was consumed. Serialised, never a SyncError."""
    head = """
block k  core=AIV  args(x: gm f32[16, 64], y: gm f32[16, 64])
  tile a : ub f32[8, 64] @0x00000
  tile b : ub f32[8, 64] @0x00800
"""
    text = head + """
  TLOAD  a, x[0, 0]
  TABS   a, a
  TLOAD  b, x[8, 0]
  TABS   b, b
"""
    blk = block(text)
    assert synchronize(blk, _machine(2)) == {"MTE2->V": 2}          # fits: no barrier
    blk = block(text)
    assert synchronize(blk, _machine(1)) == {"MTE2->V": 1}
    assert_text(blk, head + """
  TLOAD          a, x[0, 0]                                MTE2
  set_flag       MTE2 -> V  ev0
  wait_flag      MTE2 -> V  ev0
  TABS           a, a                                      V
  TLOAD          b, x[8, 0]                                MTE2
  pipe_barrier   S
  set_flag       MTE2 -> V  ev0
  wait_flag      MTE2 -> V  ev0
  TABS           b, b                                      V
""")

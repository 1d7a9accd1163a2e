"""cross_core.insert_handoff_flags, Block IR text in and out: around a GM workspace that the cube writes
and the vector core reads, the writer waits ``empty`` before its store and sets ``full`` after it, the
reader waits ``full`` and sets ``empty``; the reader starts with one ``empty`` per slot and the writer
ends by taking them back; on the vector side the flags go round an ``if`` on the sub-block index; a
buffer only one side touches gets no flag. Flag pair 0 of the buffer: full = flag0, empty = flag1.

In the text a handoff mark is ``{_handoff=(BUFFER, DEPTH, USE)}``; ``_marked`` turns it into the
pass's HandoffAccess (the front ends build those objects; Block IR text has no syntax for them)."""
import pypto
from pypto.ir.block import Instr, walk
from pypto.passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer, insert_handoff_flags

from .ir_text import assert_text, kernel


def _marked(text):
    k = kernel(text)
    buffers = {}
    for blk in k.blocks:
        for s in walk(blk.body):
            if isinstance(s, Instr) and HANDOFF in s.attrs:
                name, depth, use = s.attrs[HANDOFF]
                buf = buffers.setdefault(name, HandoffBuffer(name, f"workspace {name}", depth))
                s.attrs[HANDOFF] = HandoffAccess(buf, use)
    return k


def _handed_over(text):
    k = _marked(text)
    insert_handoff_flags(k.blocks, pypto.get_machine())
    return k


def test_full_and_empty_flags_round_a_double_buffered_workspace():
    k = _handed_over("""
    kernel k

    block k_aic  core=AIC  args(ws: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x0
      for i in range(0, 2, 1):
        TSTORE ws[16*i, 0], c {_handoff=(ws, 2, 0)}

    block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x0
      for i in range(0, 2, 1):
        TLOAD  x, ws[16*i, 0] {_handoff=(ws, 2, 0)}
        TSTORE y[16*i, 0], x
    """)
    assert_text(k, """
    kernel k
    block k_aic  core=AIC  args(ws: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x00000
      for i in range(0, 2, 1):
        ffts_wait  FIX flag1
        TSTORE     ws[16*i, 0], c   FIX
        ffts_set   FIX flag0
      ffts_wait    FIX flag1
      ffts_wait    FIX flag1
    block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x00000
      ffts_set     MTE2 flag1
      ffts_set     MTE2 flag1
      for i in range(0, 2, 1):
        ffts_wait  MTE2 flag0
        TLOAD      x, ws[16*i, 0]   MTE2
        ffts_set   MTE2 flag1
        TSTORE     y[16*i, 0], x    MTE3
    """)


def test_vector_flags_go_round_the_sub_block_if():
    """a2a3 mode 2: a cube set reaches both vector sub-blocks and a cube wait needs both, so the flags
    are outside the `if` that lets one sub-block load."""
    k = _handed_over("""
    kernel k

    block k_aic  core=AIC  args(ws: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x0
      TSTORE ws[0, 0], c {_handoff=(ws, 1, 0)}

    block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x0
      if Eq(subblock_idx, 0):
        TLOAD  x, ws[0, 0] {_handoff=(ws, 1, 0)}
        TSTORE y[0, 0], x
    """)
    assert_text(k.blocks[1], """
    block k_aiv  core=AIV  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x00000
      ffts_set     MTE2 flag1
      ffts_wait    MTE2 flag0
      if Eq(subblock_idx, 0):
        TLOAD      x, ws[0, 0]   MTE2
        TSTORE     y[0, 0], x    MTE3
      ffts_set     MTE2 flag1
    """)


def test_a_buffer_one_side_touches_gets_no_flag_and_loses_its_mark():
    k = _handed_over("""
    kernel k

    block k_aic  core=AIC  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x0
      TSTORE y[0, 0], c {_handoff=(solo, 1, 0)}

    block k_aiv  core=AIV  args(ws: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x0
      TLOAD  x, ws[0, 0]
    """)
    assert_text(k, """
    kernel k
    block k_aic  core=AIC  args(ws: gm f32[32, 16], y: gm f32[32, 16])
      tile c : l0c f32[16, 16] @0x00000
      TSTORE     y[0, 0], c   FIX
    block k_aiv  core=AIV  args(ws: gm f32[32, 16])
      tile x : ub f32[16, 16] @0x00000
      TLOAD      x, ws[0, 0]  MTE2
    """)

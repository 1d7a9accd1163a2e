"""passes/to_blocks.lower_op, the tile op -> instruction step the Tensor level and the Tile level share:
tile ops in, Block IR text out. A Copy renames tiles and substitutes indices (in GM offsets and scalar
operands); the instruction keeps its own attributes and none of the lowering's (LOWERING_ATTRS); a
handoff access is marked by the copy, and a copy without handoffs says so."""

import pytest
import sympy

from pypto.dtypes import float32
from pypto.ir.block import Block, CoreType, GMParam, TileDecl
from pypto.ir.isa import MemSpace
from pypto.ir.tile_graph import LOWERING_ATTRS, GMTile, TileHandoff, TileOp
from pypto.passes.to_blocks import Copy, lower_op
from tests.passes.ir_text import assert_text

K = sympy.Symbol("k", integer=True, nonnegative=True)


def _block(instrs, tiles):
    return Block("b", CoreType.AIV, [GMParam("X", float32, (64, 64))], [], list(tiles.values()), instrs)


def test_a_copy_renames_tiles_and_substitutes_indices():
    tiles = {n: TileDecl(n, MemSpace.UB, float32, (8, 64)) for n in ("x_s1", "y_s1", "z")}
    copy = Copy({K: K + 1}, {"x": "x_s1", "y": "y_s1"})
    ops = [TileOp("TLOAD", ["x", GMTile("X", (8 * K, 0))], "step"),
           TileOp("TADDS", ["y", "x", K * 2.0], "step"),
           TileOp("TCMPS", ["z", "y", 0.5], "step", {"cmp": "gt", "stage": 1, "when": 3}),
           TileOp("TSTORE", [GMTile("X", (8 * K, 0)), "z"], "step", {"first_iteration": True})]
    instrs = [lower_op(op, copy, tiles) for op in ops]
    assert_text(_block(instrs, tiles), """
        block b core=AIV args(X: gm f32[64, 64])
          symbols k: int>=0
          tile x_s1 : ub f32[8, 64]
          tile y_s1 : ub f32[8, 64]
          tile z : ub f32[8, 64]
          TLOAD x_s1, X[8*k + 8, 0] MTE2
          TADDS y_s1, x_s1, 2.0*k + 2.0 V
          TCMPS z, y_s1, 0.5 {cmp=gt} V
          TSTORE X[8*k + 8, 0], z MTE3
        """)
    assert all(not (set(i.attrs) & LOWERING_ATTRS) for i in instrs)


def test_a_handoff_needs_a_copy_that_marks_it():
    tiles = {"x": TileDecl("x", MemSpace.UB, float32, (8, 64))}
    op = TileOp("TSTORE", [GMTile("X", (0, 0)), "x"], "pre", {"handoff": TileHandoff(0, "ws0", 2, 1)})
    with pytest.raises(NotImplementedError, match="no cube <-> vector handoffs"):
        lower_op(op, Copy({}, {}), tiles)

    class Marking(Copy):
        def handoff(self, op):
            return ("mark", op.attrs["handoff"].channel)
    ins = lower_op(op, Marking({}, {}), tiles)
    assert ins.attrs == {"_handoff": ("mark", 0)}

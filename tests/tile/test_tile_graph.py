"""The TileGraph is the Tile level's compiled form: the tile_graph.json that ``dump=`` writes, read back
and lowered (tile/expand.py over the shared passes/to_blocks.lower_op, then the shared Block IR passes),
is the kernel the Tile level runs. IR-text tests of that lowering: how it copies the kernel body and its
loops, software-pipelines a skewed loop, marks handoff uses and starts an accumulator."""

import json

import pytest
import sympy
import torch

import pypto.tile as pt
from pypto import symbolic as sym
from pypto.dtypes import float16, float32
from pypto.ir.block import BLOCK_IDX, For, If, Kernel, walk_instrs
from pypto.ir.isa import MemSpace
from pypto.ir.tile_graph import (GMTile, TileAxis, TileGraph, TileHandoff, TileOp, TileParam, TileProgram,
                                 TileRange, TileValue, tile_graph_from_json)
from pypto.machine import get_machine
from pypto.passes.cross_core import HANDOFF
from pypto.tile.compile import block_passes
from pypto.tile.expand import lower_tile_graph
from pypto.tile.tile_graph import SLOT
from tests.passes.ir_text import assert_text


def _cases(examples):
    q = torch.empty(2, 200, 64, dtype=torch.float16)
    x, w = torch.empty(40, 256, dtype=torch.float16), torch.empty(256, dtype=torch.float16)
    a, b, bias = (torch.empty(130, 96, dtype=torch.float16), torch.empty(96, 200, dtype=torch.float16),
                  torch.empty(200, dtype=torch.float16))
    return {
        "layer_norm (vector only)": (examples["layer_norm"].layer_norm, (x, w, w, torch.empty_like(x)), (5,), {}),
        "matmul_gelu (cluster, L0C accumulator)": (
            examples["matmul_gelu"].matmul_bias_gelu, (a, b, bias, torch.empty(130, 200, dtype=torch.float16)),
            (3, 2), {}),
        "flash_attention (cluster, skewed loop, row halves, causal mask)": (
            examples["flash_attention"].flash_attention, (q, q, q, torch.empty_like(q)), (2, 2), {"BM": 128, "BN": 64}),
    }


@pytest.mark.parametrize("case", ["layer_norm (vector only)", "matmul_gelu (cluster, L0C accumulator)",
                                  "flash_attention (cluster, skewed loop, row halves, causal mask)"])
def test_the_dumped_tile_graph_is_what_is_compiled(examples, tmp_path, case):
    kernel, args, grid, consts = _cases(examples)[case]
    compiled = pt.kernel(kernel.fn, backend="sim", dump=str(tmp_path))[grid].compile(*args, **consts)
    (dumped,) = tmp_path.rglob("*tile_graph.json")
    tg = tile_graph_from_json(json.loads(dumped.read_text()))
    assert str(tg) == str(compiled.tile_graph)
    blocks = lower_tile_graph(tg)
    block_passes(tg, blocks, get_machine())
    assert str(Kernel(compiled.kernel.name, blocks, compiled.kernel.loc)) == str(compiled.kernel)


# ---------------------------------------------------------------- hand-written TileGraphs
PID = sympy.Symbol("pid0", integer=True, nonnegative=True)
GRID, N = sym.symbol("grid0"), sym.symbol("n")
J = sympy.Symbol("j", integer=True, nonnegative=True)


def _ub(name, phase="pre"):
    return TileValue(name, MemSpace.UB, float32, (8, 64), (8, 64), phase)


def _lower(kind, tiles, params, ops):
    p = TileProgram("k_aiv" if kind == "vector" else "k_aic", kind, [TileAxis("grid0", GRID, 1, "parallel", PID)],
                    params, {t.name: t for t in tiles}, ops)
    (block,) = lower_tile_graph(TileGraph("k", {}, [], [], [p]))
    return block


def test_the_kernel_body_and_its_loop_are_copied_with_their_tiles():
    """setup once per core; the body twice per grid-loop step (copies a, b) and once more for an odd
    count (e); the loop twice per step (copies _a, _b of the body's copy) and its last iteration peeled;
    the loop's state tile (acc) one per copy of the body, written in place; an unused tile not declared."""
    params = [TileParam("W", "W", float32, (8, 64)), TileParam("X", "X", float32, (N, 64)),
              TileParam("O", "O", float32, (GRID * 8, 64), "out")]
    ops = [TileOp("TLOAD", ["w", GMTile("W", (0, 0))], "setup"),
           TileOp("TLOAD", ["acc", GMTile("X", (PID * 8, 0))], "pre"),
           TileRange(J, 0, N, 1, [TileOp("TLOAD", ["y", GMTile("X", (J * 8, 0))], "step"),
                                  TileOp("TADD", ["acc", "acc", "y"], "step")],
                     {"unroll": 2, "skew": 0, "states": ["acc"]}),
           TileOp("TMUL", ["o", "acc", "w"], "post"),
           TileOp("TSTORE", [GMTile("O", (PID * 8, 0)), "o"], "post")]
    block = _lower("vector", [_ub("w", "setup"), _ub("unused"), _ub("acc"), _ub("y", "step"), _ub("o", "post")],
                   params, ops)
    assert_text(block, """
        block k_aiv core=AIV args(W: gm f32[8, 64], X: gm f32[n, 64], O: gm f32[8*grid0, 64]) params(grid0)
          symbols grid0: int>0, n: int>0
          tile w : ub f32[8, 64]
          tile acc_a : ub f32[8, 64]
          tile y_aa : ub f32[8, 64]
          tile y_ab : ub f32[8, 64]
          tile y_aae : ub f32[8, 64]
          tile o_a : ub f32[8, 64]
          tile acc_b : ub f32[8, 64]
          tile y_ba : ub f32[8, 64]
          tile y_bb : ub f32[8, 64]
          tile y_bae : ub f32[8, 64]
          tile o_b : ub f32[8, 64]
          tile acc_e : ub f32[8, 64]
          tile y_ea : ub f32[8, 64]
          tile y_eb : ub f32[8, 64]
          tile y_eae : ub f32[8, 64]
          tile o_e : ub f32[8, 64]
          TLOAD w, W[0, 0] MTE2
          for t in range(block_idx, -block_num + grid0, 2*block_num) {pipeline=2}:
            TLOAD acc_a, X[8*t, 0] MTE2
            for j in range(0, n - 1, 2) {pipeline=2}:
              TLOAD y_aa, X[8*j, 0] MTE2
              TADD acc_a, acc_a, y_aa V
              TLOAD y_ab, X[8*j + 8, 0] MTE2
              TADD acc_a, acc_a, y_ab V
            if 2*Max(0, ceiling(n/2 - 1/2)) < n:
              TLOAD y_aae, X[16*Max(0, ceiling(n/2 - 1/2)), 0] MTE2
              TADD acc_a, acc_a, y_aae V
            TMUL o_a, acc_a, w V
            TSTORE O[8*t, 0], o_a MTE3
            TLOAD acc_b, X[8*block_num + 8*t, 0] MTE2
            for j in range(0, n - 1, 2) {pipeline=2}:
              TLOAD y_ba, X[8*j, 0] MTE2
              TADD acc_b, acc_b, y_ba V
              TLOAD y_bb, X[8*j + 8, 0] MTE2
              TADD acc_b, acc_b, y_bb V
            if 2*Max(0, ceiling(n/2 - 1/2)) < n:
              TLOAD y_bae, X[16*Max(0, ceiling(n/2 - 1/2)), 0] MTE2
              TADD acc_b, acc_b, y_bae V
            TMUL o_b, acc_b, w V
            TSTORE O[8*block_num + 8*t, 0], o_b MTE3
          if block_idx + 2*block_num*Max(0, ceiling((-block_idx - block_num + grid0)/(2*block_num))) < grid0:
            TLOAD acc_e, X[8*block_idx + 16*block_num*Max(0, ceiling((-block_idx - block_num + grid0)/(2*block_num))), 0] MTE2
            for j in range(0, n - 1, 2) {pipeline=2}:
              TLOAD y_ea, X[8*j, 0] MTE2
              TADD acc_e, acc_e, y_ea V
              TLOAD y_eb, X[8*j + 8, 0] MTE2
              TADD acc_e, acc_e, y_eb V
            if 2*Max(0, ceiling(n/2 - 1/2)) < n:
              TLOAD y_eae, X[16*Max(0, ceiling(n/2 - 1/2)), 0] MTE2
              TADD acc_e, acc_e, y_eae V
            TMUL o_e, acc_e, w V
            TSTORE O[8*block_idx + 16*block_num*Max(0, ceiling((-block_idx - block_num + grid0)/(2*block_num))), 0], o_e MTE3
        """)


def _seq(stmts):
    return [(i.op, next((o for o in i.operands if isinstance(o, str)), None)) for i in walk_instrs(stmts)]


def test_a_skewed_loop_runs_stage_0_ahead_and_each_copy_of_a_handoff_is_one_use():
    """skew 1, 2 copies: the prologue loads iteration 0 (into the tile copy _a reads: ``s`` crosses from
    stage 0 to stage 1), the loop body runs stage 0 of j + 1 before stage 1 of j; the two row-half stores
    of one handoff share a HandoffAccess, each copy of it is the next use, and the copy's slot is in the
    workspace offset."""
    params = [TileParam("X", "X", float32, (N, 64)), TileParam("O", "O", float32, (GRID * 8, 64), "out"),
              TileParam("ws0", "ws0", float32, (sym.symbol("ws0_rows"), 64), "workspace")]

    def handoff(part):
        return {"handoff": TileHandoff(0, "ws0", 2, 1, part), "stage": 1}
    slot = (2 * BLOCK_IDX + SLOT) * 8
    ops = [TileOp("TEXPANDS", ["acc", 0.0]),
           TileRange(J, 0, N, 1, [TileOp("TLOAD", ["s", GMTile("X", (J * 8, 0))], "step", {"stage": 0}),
                                  TileOp("TADD", ["acc", "acc", "s"], "step", {"stage": 1}),
                                  TileOp("TSTORE", [GMTile("ws0", (slot, 0)), "acc"], "step", handoff(0)),
                                  TileOp("TSTORE", [GMTile("ws0", (slot + 4, 0)), "acc"], "step", handoff(1))],
                     {"unroll": 2, "skew": 1, "states": ["acc"], "crossing": ["s"]}),
           TileOp("TSTORE", [GMTile("O", (PID * 8, 0)), "acc"], "post")]
    block = _lower("vector", [_ub("acc"), _ub("s", "step")], params, ops)
    grid_body = block.body[0].body
    assert _seq(grid_body[:2]) == [("TEXPANDS", "acc_a"), ("TLOAD", "s_aa")]        # prologue: iteration 0
    loop = grid_body[2]
    assert isinstance(loop, For) and loop.attrs == {"pipeline": 2, "skewed": 1} and loop.stop == N - 2
    assert _seq(loop.body) == [("TLOAD", "s_ab"), ("TADD", "acc_a"), ("TSTORE", "acc_a"), ("TSTORE", "acc_a"),
                               ("TLOAD", "s_aa"), ("TADD", "acc_a"), ("TSTORE", "acc_a"), ("TSTORE", "acc_a")]
    loads = [i for i in walk_instrs(loop.body) if i.op == "TLOAD"]
    assert [i.operands[1].offsets[0] for i in loads] == [8 * J + 8, 8 * J + 16]
    stores = [i for i in walk_instrs(loop.body) if i.op == "TSTORE"]
    assert [i.operands[0].offsets[0] for i in stores] == [16 * BLOCK_IDX, 16 * BLOCK_IDX + 4,
                                                         16 * BLOCK_IDX + 8, 16 * BLOCK_IDX + 12]
    marks = [i.attrs[HANDOFF] for i in walk_instrs(block.body) if HANDOFF in i.attrs]
    assert marks[0] is marks[1] and marks[2] is marks[3] and marks[1] is not marks[2]
    assert [m.use for m in marks[::2]] == list(range(len(marks) // 2))
    assert {(m.buffer.key, m.buffer.depth) for m in marks} == {(0, 2)}


def test_an_accumulators_first_product_is_guarded_only_where_it_may_be_the_first_iteration():
    """TMATMUL on the loop's first iteration, TMATMUL_ACC after: the copy of j + 1 never starts the
    accumulator, the copy of j and the peeled iteration test for it."""
    def tile(name, space, dtype=float16):
        return TileValue(name, space, dtype, (16, 16), (16, 16), "step")
    mm = TileOp("TMATMUL", ["c", "a", "b"], "step", {"first_iteration": "j"}, guard=sympy.Eq(J, 0),
                otherwise=[TileOp("TMATMUL_ACC", ["c", "a", "b"], "step")])
    body = [TileOp("TLOAD", ["a1", GMTile("A", (0, J * 16))], "step"), TileOp("TMOV", ["a", "a1"], "step"),
            TileOp("TLOAD", ["b1", GMTile("B", (J * 16, 0))], "step"), TileOp("TMOV", ["b", "b1"], "step"), mm]
    params = [TileParam("A", "A", float16, (16, N * 16)), TileParam("B", "B", float16, (N * 16, 16))]
    block = _lower("matmul", [tile("a1", MemSpace.L1), tile("a", MemSpace.L0A), tile("b1", MemSpace.L1),
                              tile("b", MemSpace.L0B), tile("c", MemSpace.L0C, float32)], params,
                   [TileRange(J, 0, N, 1, body, {"unroll": 2, "skew": 0, "states": ["c"]})])
    loop, peeled = block.body[0].body[:2]             # grid copy a: the loop and its peeled iteration
    first, second = [s for s in loop.body if isinstance(s, If) or s.op.startswith("TMATMUL")]
    assert isinstance(first, If) and first.cond == sympy.Eq(J, 0)
    assert [i.op for i in first.then_body] == ["TMATMUL"] and [i.op for i in first.else_body] == ["TMATMUL_ACC"]
    assert second.op == "TMATMUL_ACC"
    (guarded,) = [s for s in peeled.then_body if isinstance(s, If)]
    assert [i.op for i in guarded.then_body] == ["TMATMUL"]


@pt.kernel
def _attention_with_an_inner_loop(Q, K, V, O, BM: int = 64, BN: int = 64):
    d = Q.shape[2]
    i, bh = pt.program_id(0), pt.program_id(1)
    q = pt.load(Q[bh].tile((BM, d))[i, 0])
    m, l, acc = pt.full((BM, 1), float("-inf")), pt.zeros((BM, 1)), pt.zeros((BM, d))
    for j in pt.range(0, pt.cdiv(K.shape[1], BN)):
        s = pt.matmul(q, pt.load(K[bh].tile((BN, d))[j, 0]), trans_b=True) * (d ** -0.5)
        m_new = pt.maximum(m, pt.amax(s, dim=-1))
        alpha, p0 = pt.exp(m - m_new), pt.exp(s - m_new)
        p = p0 * 0.0
        for _ in pt.range(0, 4):                       # carried in a loop inside the pipelined one
            p = p + p0 * 0.25
        l = l * alpha + pt.sum(p, dim=-1)
        acc = acc * alpha + pt.matmul(p.to(V.dtype), pt.load(V[bh].tile((BN, d))[j, 0]))
        m = m_new
    pt.store(O[bh].tile((BM, d))[i, 0], (acc / l).to(O.dtype))


def test_a_loop_inside_a_software_pipelined_loop_has_its_state_per_copy_and_stage():
    """The inner loop's carried tile has the key tile's valid columns (the last key tile is a tail): every
    copy of the pipelined loop's body that runs the inner loop — the prologue, the loop, the peeled
    iterations — declares its own state at its own iteration (the copies outside the loop used to reuse
    the loop's state, whose valid shape is that of the loop variable: the simulator failed on it and
    codegen refused it)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 200, 64, dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    kernel = pt.kernel(_attention_with_an_inner_loop.fn, backend="sim")[(4, 2)]
    assert kernel.compile(q, k, v, o).skewed
    kernel(q, k, v, o)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)

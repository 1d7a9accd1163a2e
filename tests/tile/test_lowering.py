"""How tile kernels lower: core types, placement, handoffs, pipelining, memory and the Block IR rules."""

import pytest
import torch

import pypto.tile as pt
from pypto.ir.block import CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, walk
from pypto.ir.block_verify import verify_kernel
from pypto.ir.isa import MemSpace
from pypto.machine import get_machine


def _compile(kernel, *args, grid, **kw):
    return pt.kernel(kernel.fn, backend="sim")[grid].compile(*args, **kw)


@pytest.fixture(scope="module")
def attention(examples):
    q, k, v = (torch.empty(2, 256, 128, dtype=torch.float16) for _ in range(3))
    return _compile(examples["flash_attention"].flash_attention, q, k, v, torch.empty_like(q), grid=(2, 2),
                    BM=128, BN=128)


def test_vector_only_kernel_is_one_aiv_block(examples):
    x = torch.empty(64, 256, dtype=torch.float16)
    w = torch.empty(256, dtype=torch.float16)
    c = _compile(examples["layer_norm"].layer_norm, x, w, w, torch.empty_like(x), grid=(4,))
    assert c.kind == "vector" and [b.core for b in c.kernel.blocks] == [CoreType.AIV]
    verify_kernel(c.kernel, get_machine())
    # the weights are loaded once per core, before the grid loop
    first_loop = next(i for i, s in enumerate(c.kernel.blocks[0].body) if isinstance(s, For))
    loads = [s for s in c.kernel.blocks[0].body[:first_loop] if getattr(s, "op", None) == "TLOAD"]
    assert {s.operands[1].param for s in loads} == {"W", "B"}


def test_attention_is_a_cluster_with_split_vector_rows_and_a_pipelined_loop(attention):
    c = attention
    assert c.kind == "cluster" and {b.core for b in c.kernel.blocks} == {CoreType.AIC, CoreType.AIV}
    assert c.placement.split_rows == 128                 # each vector core takes 64 of the 128 query rows
    assert c.skewed                                      # the KV loop is software-pipelined
    handed = {ch.value.op.op if ch.value.op else "carried" for ch in c.placement.channel_list()}
    assert len(c.placement.channel_list()) == 3          # scores and P @ V to the vector cores, P to the cube
    assert "matmul" in handed and "cast" in handed
    verify_kernel(c.kernel, get_machine())
    aic = c.kernel.block(CoreType.AIC)
    spaces = {t.space for t in aic.tiles}
    assert {MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C} <= spaces
    assert any(t.name.startswith("Q") and "h1" in t.name for t in aic.tiles)   # the cube works in row halves


def test_cross_core_flags_balance(attention):
    """Every flag one core sets is waited by the other the same number of times (static count per
    loop body copy: sets == waits per flag id across the two blocks)."""
    count = {}
    for b in attention.kernel.blocks:
        for s in walk(b.body):
            if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)):
                key = (s.flag, "set" if isinstance(s, CrossCoreSetFlag) else "wait", b.core)
                count[key] = count.get(key, 0) + 1
    for (flag, kind, core), n in count.items():
        if kind == "set":
            other = CoreType.AIV if core == CoreType.AIC else CoreType.AIC
            assert count.get((flag, "wait", other)) == n


def test_loop_tiles_take_distinct_buffers(attention):
    """Double buffering: the score tiles of consecutive KV iterations sit on different bytes."""
    aiv = attention.kernel.block(CoreType.AIV)
    scores = attention.placement.channel_list()[0].value.name        # the first tile handed over: Q K^T
    score_addrs = {t.addr for t in aiv.tiles if t.name.startswith(scores + "_")}
    assert len(score_addrs) >= 2


def test_kernel_is_compiled_once_per_signature(examples):
    k = pt.kernel(examples["layer_norm"].layer_norm.fn, backend="sim")
    x = torch.randn(20, 128, dtype=torch.float16)
    w, b = torch.randn(128, dtype=torch.float16), torch.randn(128, dtype=torch.float16)
    for _ in range(2):
        k[(3,)](x, w, b, torch.empty_like(x), BR=8)
    assert k.trace_count == 1
    k[(3,)](x, w, b, torch.empty_like(x), BR=16)          # another constant: another compilation
    assert k.trace_count == 2


def test_dumps_tile_program_and_block_ir(examples, tmp_path):
    x = torch.randn(16, 64)
    w = torch.randn(64)
    k = pt.kernel(examples["layer_norm"].layer_norm.fn, backend="sim", dump=str(tmp_path))
    k[(2,)](x, w, w, torch.empty_like(x), BR=8)
    (d,) = (tmp_path / "layer_norm").iterdir()                  # <dump>/<kernel>/<signature>/
    assert "rowsum" in (d / "01_tile_program.txt").read_text()
    text = (d / "03_block_ir.txt").read_text()
    assert "block layer_norm_aiv" in text and "TROWSUM" in text
    assert "tile_program layer_norm_aiv (vector)" in (d / "02_tile_graph.txt").read_text()
    assert (d / "02_tile_graph.json").exists() and (d / "02_tile_graph.dot").exists()
    assert (d / "04_cpp" / "kernels" / "layer_norm.cpp").is_file()


def test_placed_program_is_a_tile_graph(attention):
    from pypto.ir.tile_graph import tile_graph_from_json, tile_graph_to_json, walk_tile_ops
    tg = attention.tile_graph
    assert [p.kind for p in tg.programs()] == ["matmul", "vector"]
    cube = tg.items[0]
    assert {"TMATMUL", "TLOAD", "TSTORE", "TMOV"} <= {op.op for op in walk_tile_ops(cube.ops)}
    assert any(op.phase == "step" for op in walk_tile_ops(cube.ops))
    again = tile_graph_from_json(tile_graph_to_json(tg))
    assert str(again) == str(tg)


def test_report_comes_back_from_the_launch(examples):
    x = torch.randn(16, 64)
    w = torch.randn(64)
    k = pt.kernel(examples["layer_norm"].layer_norm.fn, backend="sim")
    rep = k[(2,)](x, w, w, torch.empty_like(x), BR=8)
    assert rep.cycles > 0 and rep is k.report() is pt.last_report()


def test_verify_env_runs_the_block_verifier(examples, monkeypatch):
    monkeypatch.setenv("PYPTO_VERIFY", "1")
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    c = _compile(examples["matmul_gelu"].matmul_bias_gelu, a, b, torch.randn(64).half(),
                 torch.empty(64, 64).half(), grid=(1, 1), BM=64, BN=64, BK=32)
    assert c.kind == "cluster"


def _small_matmul_gelu(examples):
    """tile matmul_gelu on a (2, 2) grid of 64-square tiles over a K of 160 (a K loop, a peeled tail)."""
    a, b = torch.randn(100, 160, dtype=torch.float16), torch.randn(160, 80, dtype=torch.float16)
    bias, c = torch.randn(80, dtype=torch.float16), torch.empty(100, 80, dtype=torch.float16)
    return pt.kernel(examples["matmul_gelu"].matmul_bias_gelu.fn, backend="sim")[(2, 2)], (a, b, bias, c)

def test_an_inner_loop_carries_the_outer_loops_tokens_on_their_events(examples):
    """The K loop nested in the grid loop is entered with its slots' "free again" tokens pending on the
    grid loop's carried events: it carries them on those events, so the grid loop's body does not open
    with a wait on one event and a set on the same event of the same pipe pair (a re-issue that orders
    nothing). The result still matches torch under the simulator's race and event checks."""
    from pypto.ir.block import SetFlag, WaitFlag
    kernel, (a, b, bias, c) = _small_matmul_gelu(examples)
    compiled = kernel.compile(a, b, bias, c, BM=64, BN=64, BK=64)
    grid_loop = next(s for s in compiled.kernel.block(CoreType.AIC).body if isinstance(s, For))
    head = grid_loop.body[:next(i for i, s in enumerate(grid_loop.body) if isinstance(s, For))]
    reissued = [(w, s) for w, s in zip(head, head[1:]) if isinstance(w, WaitFlag) and isinstance(s, SetFlag)
                and (w.src, w.dst, w.event) == (s.src, s.dst, s.event)]
    assert not reissued, f"{len(reissued)} tokens re-issued on entry to the K loop"
    kernel(a, b, bias, c, BM=64, BN=64, BK=64)
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float()).half()
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)


def test_a_hand_over_before_an_if_is_covered_by_the_previous_one_of_its_pipe_pair(examples):
    """In the K loop each row half's matmul is an if (TMATMUL on the first step, TMATMUL_ACC after): the
    second half's A tile was moved to L0A before the B tile the first matmul waited for, so that wait
    covers it too: one MTE1 -> M wait per B tile moved, not one per matmul."""
    from pypto.ir.block import Instr, WaitFlag
    from pypto.ir.isa import Pipe
    kernel, (a, b, bias, c) = _small_matmul_gelu(examples)
    compiled = kernel.compile(a, b, bias, c, BM=64, BN=64, BK=64)
    grid_loop = next(s for s in compiled.kernel.block(CoreType.AIC).body if isinstance(s, For))
    k_loop = next(s for s in grid_loop.body if isinstance(s, For))
    waits = [s for s in k_loop.body if isinstance(s, WaitFlag) and (s.src, s.dst) == (Pipe.MTE1, Pipe.M)]
    b_moves = [s for s in k_loop.body if isinstance(s, Instr) and s.op == "TMOV" and s.operands[0].startswith("B")]
    assert len(b_moves) == 2 and len(waits) == len(b_moves)

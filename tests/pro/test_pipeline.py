"""Software pipelining through the shared pass: pipelined kernels match torch (dynamic and static trip
counts, fewer iterations than stages, tails, previous(), a preamble and a first-iteration if inside an
outer task loop), the build dir shows the marked loops, and the stage rules are checked."""
import re

import pytest
import torch

import flash_attention as fa
import pypto_pro.language as pl

VEC, F16, F32 = pl.MemorySpace.Vec, pl.DT_FP16, pl.DT_FP32


def test_pipelined_flash_attention_matches_and_is_faster():
    plain = fa.main(bh=2, seq=512, pipelined=False)
    piped = fa.main(bh=2, seq=512, pipelined=True)
    assert piped.cycles < 0.8 * plain.cycles


@pytest.mark.parametrize("preload,seq,key", [(1, 384, {"HANDOFF": "fp16"}),
                                             (2, 768, {"HANDOFF": "fp16", "MATH": "fp16", "BLOCK_K": 256})])
def test_the_build_dir_shows_the_marked_loops_and_the_kernel_matches(tmp_path, preload, seq, key):
    """Each pl.stage loop is dumped as the Block IR the shared pass pipelines: stage marks, the preload
    distances, the slots each placeholder stands for (tile groups and GM workspace groups)."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, seq, 128, dtype=torch.float16) for _ in range(3))
    o = torch.zeros_like(q)
    kernel = pl.jit(fa.attention_body, name="fa_marks_test", pipeline=pl.PipelineConfig(preload=preload),
                    dump=str(tmp_path), tiling_key=fa.KEY)
    kernel[None, 2, key](q, k, v, o)
    text = (kernel.last_build_dir / "01_pipeline" / "marked_loops.txt").read_text()
    loops = [line for line in text.splitlines() if line.startswith("  for j")]
    assert len(loops) == 2                                    # the cube's and the vector's key-block loop
    for line in loops:
        assert f"skew=(0, {preload})" in line and "rename=False" in line and "slots={" in line
        assert "handoffs={" in line and "_ws_s_ws_at" in line   # workspace slots chosen per copy
    assert "{stage=0}" in text and "{stage=1}" in text
    block_ir = next(kernel.last_build_dir.glob("*_block_ir.txt")).read_text()
    assert "stage=" not in block_ir and not re.search(r"_at\d", block_ir)   # marks and placeholders replaced
    torch.testing.assert_close(o, fa.reference(q, k, v), rtol=2e-2, atol=2e-3)


def staged_scale(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16]):
    """Three stages over row blocks: load -> compute -> store, each a block behind the previous."""
    t = pl.TileType([16, 128], F16, VEC)
    inp = pl.make_tile_group(t, addrs=0x0000, depth=3)
    out = pl.make_tile_group(t, addrs=0x4000, depth=3)
    with pl.section_vector():
        for i in pl.range(0, pl.ceil_div(x.shape[0], 16)):
            with pl.stage(0):
                pl.load_tile(inp.next(), x, [i, 0])
            with pl.stage(1):
                pl.mul(out.next(), inp.current(), 3.0)
            with pl.stage(2):
                pl.store_tile(y, out.current(), [i, 0])


@pytest.mark.parametrize("rows", [16, 32, 48, 100, 160])
def test_three_stage_pipeline_with_dynamic_trip_count(rows, tmp_path):
    """Run-time trip counts: guarded stages handle 1 and 2 blocks (fewer than the 3 stages) and tails."""
    k = pl.jit(staged_scale, name="staged_scale", pipeline=pl.PipelineConfig(preload=1), dump=str(tmp_path))
    x = torch.randn(rows, 128, dtype=torch.float16)
    y = torch.zeros_like(x)
    k[None, 1](x, y)
    torch.testing.assert_close(y, (x.float() * 3).half())
    assert k.compile_count == 1 or rows == 16


def test_stage_rules_are_checked():
    def leak(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16]):
        t = pl.TileType([16, 128], F16, VEC)
        g = pl.make_tile_group(t, addrs=0, depth=2)
        with pl.section_vector():
            for i in pl.range(0, 4):
                with pl.stage(0):
                    a = g.next()
                    pl.load_tile(a, x, [i, 0])
                with pl.stage(1):
                    pl.store_tile(y, a, [i, 0])
    x = torch.zeros(64, 128, dtype=torch.float16)
    with pytest.raises(pl.ParseError, match="'a' is assigned in stage 0 and read in a later stage"):
        pl.jit(leak, pipeline=pl.PipelineConfig()).compile(x, x)

    def order(x: pl.Tensor[[pl.DYNAMIC, 128], F16]):
        with pl.section_vector():
            for i in pl.range(0, 4):
                with pl.stage(1):
                    pass
                with pl.stage(0):
                    pass
    with pytest.raises(pl.ParseError, match="expected stage 0, found stage 1"):
        pl.jit(order, pipeline=pl.PipelineConfig()).compile(x)
    def run_time_step(x: pl.Tensor[[pl.DYNAMIC, 128], F16], step: pl.Scalar[pl.DT_INT32]):
        t = pl.TileType([16, 128], F16, VEC)
        g = pl.make_tile_group(t, addrs=0, depth=2)
        with pl.section_vector():
            for i in pl.range(0, 4, step):
                with pl.stage(0):
                    pl.load_tile(g.next(), x, [i, 0])
                with pl.stage(1):
                    pl.store_tile(x, g.current(), [i, 0])
    with pytest.raises(pl.ParseError, match="a pipelined loop needs a compile-time step"):
        pl.jit(run_time_step, pipeline=pl.PipelineConfig()).compile(x, 2)
    with pytest.raises(ValueError):
        pl.PipelineConfig(preload=0)


def test_without_pipeline_config_stages_run_in_order():
    k = pl.jit(staged_scale)
    x = torch.randn(40, 128, dtype=torch.float16)
    y = torch.zeros_like(x)
    k[None, 1](x, y)
    torch.testing.assert_close(y, (x.float() * 3).half())
    assert k.compile(x, y).marked_loops == []


def previous_sum(x: pl.Tensor[[pl.DYNAMIC, 64], pl.DT_FP32], y: pl.Tensor[[pl.DYNAMIC, 64], pl.DT_FP32]):
    """y block i = x block i + x block i-1 (block -1: zeros, the slot `previous()` names in iteration 0)."""
    t = pl.TileType([8, 64], pl.DT_FP32, VEC)
    g = pl.make_tile_group(t, addrs=0x0000, depth=4)
    o = pl.make_tile(t, addr=0x8000)
    with pl.section_vector():
        pl.full(g[3], 0.0)
        for i in pl.range(0, pl.ceil_div(x.shape[0], 8)):
            with pl.stage(0):
                pl.load_tile(g.next(), x, [i, 0])
            with pl.stage(1):
                pl.add(o, g.current(), g.previous())
                pl.store_tile(y, o, [i, 0])


@pytest.mark.parametrize("preload", [1, 2])
@pytest.mark.parametrize("rows", [8, 24, 61, 200])
def test_a_later_stage_reads_the_slot_an_earlier_iteration_filled(preload, rows):
    k = pl.jit(previous_sum, pipeline=pl.PipelineConfig(preload=preload))
    x = torch.randn(rows, 64)
    y = torch.zeros_like(x)
    k[None, 1](x, y)
    pad = torch.cat([x, torch.zeros(-rows % 8, 64)]).view(-1, 8, 64)
    ref = (pad + torch.cat([torch.zeros_like(pad[:1]), pad[:-1]])).view(-1, 64)[:rows]
    torch.testing.assert_close(y, ref)


def running_sums(x: pl.Tensor[[pl.DYNAMIC, 64], F16], y: pl.Tensor[[pl.DYNAMIC, 64], F16], nb: int):
    """Per task of nb row blocks (8 rows each): y block j = the sum of the task's x blocks 0..j. A preamble
    (the block index), a first-iteration `if` with an else branch, inside an outer run-time task loop."""
    t = pl.TileType([8, 64], F16, VEC)
    g = pl.make_tile_group(t, addrs=0x0000, depth=3)
    acc = pl.make_tile(pl.TileType([8, 64], F32, VEC), addr=0x8000)
    part = pl.make_tile(pl.TileType([8, 64], F32, VEC), addr=0x9000)
    out = pl.make_tile(t, addr=0xA000)
    with pl.section_vector():
        for task in pl.range(pl.get_block_idx(), pl.ceil_div(x.shape[0], 8 * nb), pl.get_block_num()):
            for j in pl.range(0, nb):
                b = task * nb + j
                with pl.stage(0):
                    pl.load_tile(g.next(), x, [b, 0])
                with pl.stage(1):
                    cur = g.current()
                    if j == 0:
                        pl.cast(acc, cur)
                    else:
                        pl.cast(part, cur)
                        pl.add(acc, acc, part)
                    pl.cast(out, acc)
                    pl.store_tile(y, out, [b, 0])


@pytest.mark.parametrize("preload", [1, 2])
@pytest.mark.parametrize("rows,nb,blocks", [(64, 4, 1), (192, 3, 2), (96, 1, 2), (40, 5, 2)])
def test_a_pipelined_inner_loop_with_a_preamble_and_a_first_iteration_if(preload, rows, nb, blocks):
    k = pl.jit(running_sums, pipeline=pl.PipelineConfig(preload=preload))
    x = torch.randn(rows, 64).half()
    y = torch.zeros_like(x)
    k[None, blocks](x, y, nb)
    ref = x.float().view(-1, nb, 8, 64).cumsum(1).view(-1, 64).half()
    torch.testing.assert_close(y, ref, rtol=2e-3, atol=2e-3)


def scale_by_3(depth: int, dtype, blocks=None):
    """Stage 0 loads row block i into a group of `depth` slots, stage 1 scales it by 3 and stores it: the
    slot is live from stage 0 to stage 1, preload iterations later. `blocks`: a compile-time trip count."""
    def kernel(x: pl.Tensor[[pl.DYNAMIC, 64], dtype], y: pl.Tensor[[pl.DYNAMIC, 64], dtype]):
        t = pl.TileType([8, 64], dtype, VEC)
        inp = pl.make_tile_group(t, addrs=0x0000, depth=depth)
        out = pl.make_tile(t, addr=0x8000)
        with pl.section_vector():
            for i in pl.range(0, blocks if blocks is not None else pl.ceil_div(x.shape[0], 8)):
                with pl.stage(0):
                    pl.load_tile(inp.next(), x, [i, 0])
                with pl.stage(1):
                    pl.mul(out, inp.current(), 3.0)
                    pl.store_tile(y, out, [i, 0])
    return kernel


def _line_of(text: str, fn) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(n for n, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("depth,preload,need", [(2, 2, 3), (3, 3, 4), (1, 1, 2)])
def test_a_group_too_shallow_for_the_preload_is_an_error_naming_the_read(depth, preload, need):
    """Without the check the pipelined kernel was silently wrong (depth 2, preload 2: blocks 0..3 read
    blocks 2..5, no error): the newer iterations' next() took the slot before stage 1 read it."""
    kernel = scale_by_3(depth, F16)
    x = torch.randn(48, 64, dtype=torch.float16)
    with pytest.raises(pl.ParseError) as err:
        pl.jit(kernel, pipeline=pl.PipelineConfig(preload=preload)).compile(x, x)
    e = err.value
    assert f"tile group inp (depth {depth}) is too shallow for this pipeline (preload={preload})" in e.message
    assert f"stage 1 reads here the slot stage 0 filled, {preload} pipeline steps earlier" in e.message
    assert f"depth >= {need} needed" in e.message and f"depth={need}" in e.hint
    assert e.span.file == __file__ and e.span.line == _line_of("inp.current()", kernel)


@pytest.mark.parametrize("dtype", [pl.DT_FP32, F16, pl.DT_BF16])
@pytest.mark.parametrize("preload,rows", [(2, 61), (2, 8), (3, 100)])
def test_the_same_kernel_with_the_depth_the_error_names_matches_torch(dtype, preload, rows):
    kernel = pl.jit(scale_by_3(preload + 1, dtype), pipeline=pl.PipelineConfig(preload=preload))
    tdt = {pl.DT_FP32: torch.float32, F16: torch.float16, pl.DT_BF16: torch.bfloat16}[dtype]
    x = torch.randn(rows, 64, dtype=tdt)
    y = torch.zeros_like(x)
    kernel[None, 1](x, y)
    torch.testing.assert_close(y, (x.float() * 3).to(tdt))


def test_a_compile_time_trip_count_too_short_to_reuse_the_slot_is_not_an_error():
    """Two blocks, depth 2, preload 2: no newer iteration takes block 0's slot before stage 1 reads it."""
    kernel = pl.jit(scale_by_3(2, pl.DT_FP32, blocks=2), pipeline=pl.PipelineConfig(preload=2))
    x = torch.randn(16, 64)
    y = torch.zeros_like(x)
    kernel[None, 1](x, y)
    torch.testing.assert_close(y, x * 3)
    with pytest.raises(pl.ParseError, match=r"depth >= 3 needed"):
        pl.jit(scale_by_3(2, pl.DT_FP32, blocks=3), pipeline=pl.PipelineConfig(preload=2)).compile(x, y)


def test_a_slot_live_across_two_stages_and_one_filled_before_the_loop_are_checked():
    def skip_a_stage(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16]):
        t = pl.TileType([16, 128], F16, VEC)
        inp = pl.make_tile_group(t, addrs=0x0000, depth=2)
        out = pl.make_tile_group(t, addrs=0x4000, depth=3)
        with pl.section_vector():
            for i in pl.range(0, pl.ceil_div(x.shape[0], 16)):
                with pl.stage(0):
                    pl.load_tile(inp.next(), x, [i, 0])
                with pl.stage(1):
                    pl.mul(out.next(), out.current(), 1.0)
                with pl.stage(2):
                    pl.store_tile(y, inp.current(), [i, 0])
    x = torch.zeros(64, 128, dtype=torch.float16)
    with pytest.raises(pl.ParseError, match=r"stage 2 reads here the slot stage 0 filled, 2 pipeline steps "
                                            r"earlier.*depth >= 3 needed") as err:
        pl.jit(skip_a_stage, pipeline=pl.PipelineConfig(preload=1)).compile(x, x)
    assert err.value.span.line == _line_of("inp.current()", skip_a_stage)
    # previous_sum's stage 1 reads iteration i-1's slot (iteration 0: the one filled before the loop)
    x = torch.zeros(64, 64)
    with pytest.raises(pl.ParseError, match=r"tile group g \(depth 4\).*reads here a slot filled before the "
                                            r"loop.*depth >= 5 needed"):
        pl.jit(previous_sum, pipeline=pl.PipelineConfig(preload=3)).compile(x, x)


def test_the_flash_attention_example_with_a_fifo_no_deeper_than_the_preload_is_an_error(monkeypatch):
    """The example's alpha_ub (exp(m_old - m_new), written by the softmax stage, read by the fold stage
    PRELOAD steps later) needs FIFO > PRELOAD slots."""
    monkeypatch.setattr(fa, "FIFO", fa.PRELOAD)
    q = torch.zeros(1, 512, 128, dtype=torch.float16)
    kernel = pl.jit(fa.attention_body, name="fa_shallow", pipeline=pl.PipelineConfig(preload=fa.PRELOAD),
                    tiling_key=fa.KEY)
    with pytest.raises(pl.ParseError, match=rf"tile group alpha_ub \(depth {fa.PRELOAD}\).*"
                                            rf"depth >= {fa.PRELOAD + 1} needed") as err:
        kernel[None, 2, {"HANDOFF": "fp16"}](q, q, q, q)
    assert err.value.span.file == fa.__file__ and "alpha_ub.current()" in err.value.span.source_line()

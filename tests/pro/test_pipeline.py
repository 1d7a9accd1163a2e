"""Software pipelining: the transformed loop gives the same results, pipeline_generated.py runs as a
kernel by itself and matches, dynamic trip counts (guards, fewer iterations than stages) work, and
the stage rules are checked."""
import importlib.util

import pytest
import torch

import flash_attention as fa
import pypto_pro.language as pl

VEC, F16, F32 = pl.MemorySpace.Vec, pl.DT_FP16, pl.DT_FP32


def _load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pipelined_flash_attention_matches_and_is_faster():
    plain = fa.main(bh=2, seq=512, pipelined=False)
    piped = fa.main(bh=2, seq=512, pipelined=True)
    assert piped.cycles < 0.8 * plain.cycles


@pytest.mark.parametrize("preload,seq,key", [(1, 384, {"HANDOFF": "fp16"}),
                                             (2, 768, {"HANDOFF": "fp16", "MATH": "fp16", "BLOCK_K": 256})])
def test_pipeline_generated_runs_as_a_kernel_and_matches(tmp_path, preload, seq, key):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, seq, 128, dtype=torch.float16) for _ in range(3))
    o1, o2 = torch.zeros_like(q), torch.zeros_like(q)
    kernel = pl.jit(fa.attention_body, name="fa_gen_test", pipeline=pl.PipelineConfig(preload=preload),
                    dump=str(tmp_path), tiling_key=fa.KEY)
    kernel[None, 2, key](q, k, v, o1)
    path = kernel.last_build_dir / "01_pipeline" / "pipeline_generated.py"
    assert path.exists() and "take(" in path.read_text()
    gen = _load_module(path, "pipeline_generated_fa")
    gen_kernel = gen.fa_gen_test
    assert gen_kernel.pipeline is None                 # plain kernel: the pipelining is in its source
    gen_kernel[None, 2](q, k, v, o2)                   # its key allows only the variant it came from
    assert torch.equal(o1, o2)
    torch.testing.assert_close(o1, fa.reference(q, k, v), rtol=2e-2, atol=2e-3)


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
    with pytest.raises(ValueError):
        pl.PipelineConfig(preload=0)


def test_without_pipeline_config_stages_run_in_order():
    k = pl.jit(staged_scale)
    x = torch.randn(40, 128, dtype=torch.float16)
    y = torch.zeros_like(x)
    k[None, 1](x, y)
    torch.testing.assert_close(y, (x.float() * 3).half())
    assert k.compile(x, y).pipeline_source is None

"""Qwen3NextSparseMoeBlock at decode sizes (models/qwen3_next/moe.py): one token per sequence, B = 1 .. 32
sequences, so the dispatch and experts programs run at N = B rows. The model's own chunking (ROWS_PER_CHUNK
rows, so every expert's rows are one tail chunk) and top-10 as Qwen3-Next-80B-A3B routes (k > 8: the top-k
takes more than one round), on sim against the plain-torch oracle (moe_reference.py). One trace of each program
serves every N (N is a dynamic dim)."""
import pytest
import torch

from models.qwen3_next import moe_reference as R
from models.qwen3_next.config import Qwen3NextConfig
from models.qwen3_next.moe import Qwen3NextSparseMoeBlock

DECODE_BATCHES = (1, 2, 7, 32)


def rel_rms(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def config_and_state():
    c = Qwen3NextConfig.tiny(num_experts=32, num_experts_per_tok=10)
    return c, R.random_state(c, generator=torch.Generator().manual_seed(21))


def block(c, st, dtype):
    m = Qwen3NextSparseMoeBlock(c, dtype=dtype)          # the model's default rows per chunk
    m.load_state_dict({k: v.to(dtype) for k, v in st.items()})
    return m.compile(backend="sim")


def test_decode_batches_match_the_reference_fp32(config_and_state):
    c, st = config_and_state
    m = block(c, st, torch.float32)
    gen = torch.Generator().manual_seed(22)
    for B in DECODE_BATCHES:
        x = torch.randn(B, 1, c.hidden_size, generator=gen)
        out, logits = m(x, return_router_logits=True)
        assert out.shape == (B, 1, c.hidden_size) and out.dtype == torch.float32
        assert rel_rms(out, R.sparse_moe_block(x, st, c.num_experts_per_tok, c.norm_topk_prob)) <= 1e-4, B
        assert rel_rms(logits, x.reshape(B, -1) @ st["gate.weight"].T) <= 1e-5, B
        if B == 32:             # 32 tokens x top-10 over 32 experts: (nearly) every expert has rows
            _, _, ids = R.route(x.reshape(B, -1), st["gate.weight"], c.num_experts_per_tok, c.norm_topk_prob)
            assert torch.unique(ids).numel() >= 24
    assert [p.trace_count for p in m._programs[next(iter(m._programs))]] == [1, 1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_batches_low_precision_no_worse_than_torch(config_and_state, dtype):
    """Against the fp32 oracle: no worse than the oracle run in the same dtype (plus 5%), at B = 1 and 32.
    A router near a tie may route one token differently in low precision; the seeds here do not."""
    c, st = config_and_state
    m = block(c, st, dtype)
    low = {k: v.to(dtype) for k, v in st.items()}
    gen = torch.Generator().manual_seed(23)
    for B in (1, 32):
        x = torch.randn(B, 1, c.hidden_size, generator=gen)
        exact = R.sparse_moe_block(x, st, c.num_experts_per_tok, c.norm_topk_prob)
        torch_err = rel_rms(R.sparse_moe_block(x.to(dtype), low, c.num_experts_per_tok, c.norm_topk_prob), exact)
        out = m(x.to(dtype))
        assert out.dtype == dtype
        assert rel_rms(out, exact) <= 1.05 * torch_err, (B, rel_rms(out, exact), torch_err)


def test_timing_only_block_runs_with_the_dispatch_computed(config_and_state):
    """A timing-only block (the decode benchmark's): the experts program's trip counts come from a dispatch
    that computed them (a meta tensor there was 'no data for counts'); the block's output is a meta tensor,
    and both programs report simulated time."""
    c, st = config_and_state
    m = Qwen3NextSparseMoeBlock(c, dtype=torch.bfloat16)
    m.load_state_dict({k: v.bfloat16() for k, v in st.items()})
    m.compile(backend="sim", timing_only=True)
    for B in (1, 32):
        out = m(torch.randn(B, 1, c.hidden_size).bfloat16())
        assert out.shape == (B, 1, c.hidden_size) and out.device.type == "meta"
        dispatch, experts = m.last_reports
        assert dispatch.time_us > 0 and experts.time_us > 0 and experts.timing_only

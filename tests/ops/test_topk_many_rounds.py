"""topk with more rounds than the machine has event ids per pipe pair (k > 8; Qwen3-Next routes top-10):
vs torch's stable sort on sim and cpu, at the sizes where each round's stores released their own carried
event (4096 rows: a pipelined row loop) and with tails. Was a SyncError ('needs 9 event ids for MTE3 -> V,
the machine has 8'); pipe_sync now retries with one carried event per loop and pipe pair."""
import pytest
import torch

import pypto


def _stable_topk(x, k):
    s = torch.sort(x, dim=-1, descending=True, stable=True)
    return s.values[..., :k], s.indices[..., :k]


def _check(out, x, k):
    v, i = out
    rv, ri = _stable_topk(x, k)
    assert v.dtype == x.dtype and i.dtype == torch.int64
    assert torch.equal(v, rv) and torch.equal(i, ri)
    assert torch.equal(v, torch.topk(x.float(), k).values.to(x.dtype))


@pytest.mark.parametrize("k", [10, 16])
@pytest.mark.parametrize("shape", [(64, 64), (37, 512), (4096, 64)])
def test_topk_k_over_8_on_sim(k, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k)).float()
    f = pypto.jit(lambda x: tuple(pypto.topk(x, k)), backend="sim")
    _check(f(x), x, k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_topk_k10_half_dtypes_on_sim(dtype):
    x = torch.randn(4096, 64, generator=torch.Generator().manual_seed(3)).to(dtype)
    f = pypto.jit(lambda x: tuple(pypto.topk(x, 10)), backend="sim")
    _check(f(x), x, 10)


def test_topk_k10_on_cpu():
    x = torch.randn(4096, 64, generator=torch.Generator().manual_seed(2))
    _check(pypto.jit(lambda x: tuple(pypto.topk(x, 10)), backend="cpu")(x), x, 10)


@pytest.mark.slow
def test_topk_k_over_8_on_cpu():
    """One compile (g++ is the cost, ~25-45 s CPU): k = 10 and k = 16 on [64, 64], [37, 512] and [4096, 64]."""
    gen = torch.Generator().manual_seed(1)
    a, b, c = torch.randn(64, 64, generator=gen), torch.randn(37, 512, generator=gen), torch.randn(4096, 64, generator=gen)
    f = pypto.jit(lambda a, b, c: (*pypto.topk(a, 10), *pypto.topk(a, 16), *pypto.topk(b, 10), *pypto.topk(b, 16),
                                   *pypto.topk(c, 10)), backend="cpu")
    out = f(a, b, c)
    for j, (x, k) in enumerate([(a, 10), (a, 16), (b, 10), (b, 16), (c, 10)]):
        _check(out[2 * j:2 * j + 2], x, k)

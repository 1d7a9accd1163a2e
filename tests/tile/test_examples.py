"""The Tile-level examples against torch (computed here, in fp32) on every available backend, with
tails, in fp16 and bf16."""
import pytest
import torch

import pypto.tile as pt

TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


def _with(kernel, backend):
    return pt.kernel(kernel.fn, backend=backend)


def attention_ref(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)


def run_attention(ex, backend, q, k, v, BM, BN, causal):
    o = torch.empty_like(q)
    fa = _with(ex.flash_attention, backend)
    fa[(pt.cdiv(q.shape[1], BM), q.shape[0])](q, k, v, o, BM=BM, BN=BN, causal=causal)
    return o


@pytest.mark.parametrize("backend", ["reference", "sim"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_causal_with_tails(examples, backend, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 200, 64, dtype=dtype) for _ in range(3))     # 200 = 3 tiles of 64 + a tail of 8
    o = run_attention(examples["flash_attention"], backend, q, k, v, 64, 64, True)
    torch.testing.assert_close(o.float(), attention_ref(q, k, v, True), **TOL[dtype])


def test_flash_attention_not_causal_rectangular_tiles_on_sim(examples):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 150, 64, dtype=torch.float16) for _ in range(3))
    o = run_attention(examples["flash_attention"], "sim", q, k, v, 64, 32, False)
    torch.testing.assert_close(o.float(), attention_ref(q, k, v, False), **TOL[torch.float16])


@pytest.mark.parametrize("backend", ["reference", "sim"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_with_row_tail(examples, backend, dtype):
    torch.manual_seed(2)
    x = torch.randn(45, 256, dtype=dtype) * 2 + 1
    w, b = torch.randn(256, dtype=dtype), torch.randn(256, dtype=dtype)
    y = torch.empty_like(x)
    _with(examples["layer_norm"].layer_norm, backend)[(pt.cdiv(45, 16),)](x, w, b, y, BR=16)
    ref = torch.nn.functional.layer_norm(x.float(), (256,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y.float(), ref, **TOL[dtype])


@pytest.mark.parametrize("backend", ["reference", "sim"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_bias_gelu_with_tails(examples, backend, dtype):
    torch.manual_seed(3)
    a, b = torch.randn(130, 100, dtype=dtype), torch.randn(100, 90, dtype=dtype)    # M, K, N tails
    bias = torch.randn(90, dtype=dtype)
    c = torch.empty(130, 90, dtype=dtype)
    _with(examples["matmul_gelu"].matmul_bias_gelu, backend)[(3, 2)](a, b, bias, c, BM=64, BN=64, BK=32)
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(c.float(), ref, **TOL[dtype])


def test_examples_on_cpu(examples):
    """The same kernels through generated PTO C++ and g++ (cached by content after the first build)."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 136, 64, dtype=torch.float16) for _ in range(3))
    o = run_attention(examples["flash_attention"], "cpu", q, k, v, 64, 64, True)
    torch.testing.assert_close(o.float(), attention_ref(q, k, v, True), **TOL[torch.float16])
    x = torch.randn(21, 128, dtype=torch.bfloat16)
    w, b = torch.randn(128, dtype=torch.bfloat16), torch.randn(128, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    _with(examples["layer_norm"].layer_norm, "cpu")[(3,)](x, w, b, y, BR=8)
    torch.testing.assert_close(y.float(), torch.nn.functional.layer_norm(x.float(), (128,), w.float(), b.float()),
                               **TOL[torch.bfloat16])
    a, bm, bias = torch.randn(70, 40, dtype=torch.float16), torch.randn(40, 72, dtype=torch.float16), \
        torch.randn(72, dtype=torch.float16)
    c = torch.empty(70, 72, dtype=torch.float16)
    _with(examples["matmul_gelu"].matmul_bias_gelu, "cpu")[(2, 2)](a, bm, bias, c, BM=64, BN=64, BK=32)
    torch.testing.assert_close(c.float(), torch.nn.functional.gelu(a.float() @ bm.float() + bias.float()),
                               **TOL[torch.float16])


def test_flash_attention_every_trip_count_of_the_pipelined_loop(examples):
    """Causal 448 = 7 tiles of 64: the KV loop runs 1..7 times (prologue, whole groups, peeled ends)."""
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 448, 64, dtype=torch.float16) for _ in range(3))
    o = run_attention(examples["flash_attention"], "sim", q, k, v, 64, 64, True)
    torch.testing.assert_close(o.float(), attention_ref(q, k, v, True), **TOL[torch.float16])

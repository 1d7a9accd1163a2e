"""Matmul operands that are strided views (expanded, transposed or permuted so that their rows and
columns are not the last two dims of a buffer): the compiler copies them contiguous itself, as torch
users expect (no 'copy it first'); ``Tensor.contiguous()`` exists and changes nothing. On sim and cpu
against torch in float32 from the same rounded inputs."""
from __future__ import annotations

import pytest
import torch

import pypto
import pypto.nn.functional as F

BACKENDS = ["sim", "cpu"]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
PT = {torch.float32: pypto.float32, torch.float16: pypto.float16, torch.bfloat16: pypto.bfloat16}


def _close(actual, expected, dtype):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanded_operand(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[7, 1], pypto.float32], w: pypto.Tensor[[64, 7], pypto.float32]):
        return pypto.matmul(x.expand(-1, 7), w, b_trans=True)

    x, w = torch.rand(7, 1) * 4 - 2, torch.rand(64, 7) * 4 - 2
    _close(f(x, w), x.expand(-1, 7) @ w.t(), torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_heads_split_by_a_transposed_view_into_attention(backend, dtype):
    """issue 14's example: q = x.reshape(t, h, d).transpose(0, 1) fed to SDPA, with a dynamic,
    tail-sized t."""
    @pypto.jit(backend=backend)
    def attn(x: pypto.Tensor[[pypto.DYNAMIC, 128], PT[dtype]]):
        t = x.shape[0]
        q = x.reshape(t, 2, 64).transpose(0, 1)
        return F.scaled_dot_product_attention(q, q, q.contiguous())

    for t in (1, 77):
        x = torch.randn(t, 128, dtype=dtype)
        q = x.float().reshape(t, 2, 64).transpose(0, 1)
        _close(attn(x), torch.nn.functional.scaled_dot_product_attention(q, q, q), dtype)
    assert attn.trace_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_permuted_operands(backend):
    @pypto.jit(backend=backend)
    def f(a: pypto.Tensor[[33, 3, 16], pypto.float16], b: pypto.Tensor[[3, 16, 20], pypto.float16]):
        return pypto.matmul(a.permute(1, 0, 2), b)          # [3, 33, 16] @ [3, 16, 20]

    a, b = torch.randn(33, 3, 16, dtype=torch.float16), torch.randn(3, 16, 20, dtype=torch.float16)
    _close(f(a, b), a.float().permute(1, 0, 2) @ b.float(), torch.float16)


def test_contiguous_keeps_the_value():
    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[4, 6], pypto.float32]):
        return x.transpose(0, 1).contiguous() * 1.0

    x = torch.randn(4, 6)
    torch.testing.assert_close(f(x), x.t())

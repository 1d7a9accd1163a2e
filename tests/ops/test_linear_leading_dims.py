"""F.linear / pypto.linear of an input with leading dims ([B, T, K] @ W[N, K].T) is one [B*T, K] product: the
weight is read once, not once per leading index (a batched matmul with the weight broadcast read it B times:
a [32, 1, 2048] decode input into a 151936-row LM head moved 32 x 622 MB). Values vs torch on sim, fp32 /
fp16 / bf16, dynamic leading dims with tails; the bytes moved on the timing-only sim."""
import pytest
import torch

import pypto
import pypto.nn.functional as F

DYN = pypto.DYNAMIC
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def rel_rms(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def program(K, N, dt, **options):
    @pypto.jit(**options)
    def lin(x: pypto.Tensor[[DYN, DYN, K], dt], w: pypto.Tensor[[N, K], dt]):
        return F.linear(x, w)
    return lin


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_values_with_leading_dims_match_torch(dtype):
    K, N = 96, 200                                  # N not a multiple of the 256-column tile: a tail
    lin = program(K, N, pypto.dtypes.from_torch(dtype), backend="sim")
    gen = torch.Generator().manual_seed(0)
    w = (torch.randn(N, K, generator=gen) / K ** 0.5).to(dtype)
    for B, T in ((3, 1), (2, 7), (1, 130)):           # decode rows, a prefill, rows past one 128-row tile
        x = torch.randn(B, T, K, generator=gen).to(dtype)
        y = lin(x, w)
        assert y.shape == (B, T, N) and y.dtype == dtype
        assert rel_rms(y, (x.float() @ w.float().T)) <= TOL[dtype], (B, T)
    assert lin.trace_count == 1


def test_the_weight_is_read_once_for_many_leading_rows():
    K, N = 512, 4096
    lin = program(K, N, pypto.bfloat16, backend="sim", machine="a2a3", timing_only=True)
    w = torch.zeros(N, K, dtype=torch.bfloat16)
    weight_bytes = N * K * 2
    moved = {}
    for B in (1, 16):
        lin(torch.zeros(B, 1, K, dtype=torch.bfloat16), w)
        moved[B] = pypto.last_report().gm_bytes
    assert moved[1] >= weight_bytes
    assert moved[16] < 1.2 * weight_bytes, moved        # a batched matmul moved ~16x the weight

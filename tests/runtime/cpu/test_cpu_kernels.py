"""The cpu backend on hand-built Block IR kernels: results against torch, tails, dtypes, multi-core
launches, cube + vector clusters (every instruction against the simulator:
tests/runtime/test_every_instruction.py)."""
from __future__ import annotations

import math

import pytest
import torch

from pypto import dtypes
from pypto.runtime import cpu
from pypto.testing import kernels as ck

F32, F16, BF16 = dtypes.float32, dtypes.float16, dtypes.bfloat16
FLOATS = [F32, F16, BF16]


def all_kernels():
    ks = []
    for dt in FLOATS:
        ks += [ck.vector_add(dt), ck.softmax_rows(dt), ck.rms_norm(dt), ck.matmul(dt)]
    ks.append(ck.matmul_relu(F16))
    return ks


@pytest.fixture(scope="module", autouse=True)
def built():
    """One g++ build (or a cache hit) for every kernel of this file."""
    _, result = cpu.build(all_kernels())
    return result


def assert_close(actual, expected, dtype):
    rtol, atol = ck.tolerance(dtype)
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows,block_dim", [(1, 1), (16, 2), (77, 3), (200, 4)])
def test_vector_add_tails_and_double_buffering(dtype, rows, block_dim):
    x = torch.randn(rows, 256).to(dtype.torch_dtype)
    y = torch.randn(rows, 256).to(dtype.torch_dtype)
    z = torch.full_like(x, float("nan"))
    out, report = cpu.run_kernel(ck.vector_add(dtype), {"x": x, "y": y, "z": z}, block_dim=block_dim)
    assert out["z"] is z
    # fp16/bf16 add computes in fp32 and rounds once: exactly torch's result
    torch.testing.assert_close(z, x + y, rtol=0, atol=0)
    assert report.backend == "cpu" and report.wall_s > 0 and report.cycles is None
    assert report.blocks == block_dim


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_rows(dtype):
    x = (torch.randn(77, 256) * 3).to(dtype.torch_dtype)
    y = torch.empty_like(x)
    cpu.run_kernel(ck.softmax_rows(dtype), {"x": x, "y": y}, block_dim=4)
    assert_close(y, ck.ref_softmax(x), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    x = torch.randn(45, 256).to(dtype.torch_dtype)
    w = torch.randn(256).to(dtype.torch_dtype)
    y = torch.empty_like(x)
    cpu.run_kernel(ck.rms_norm(dtype), {"x": x, "w": w, "y": y}, block_dim=3)
    assert_close(y, ck.ref_rms_norm(x, w), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(64, 32, 64), (100, 70, 130), (65, 33, 88)])   # tails: rows, K, 16 + 8 cols
def test_matmul_k_accumulation(dtype, m, k, n):
    a = torch.randn(m, k).to(dtype.torch_dtype)
    b = torch.randn(k, n).to(dtype.torch_dtype)
    c = torch.full((m, n), float("nan"))
    cpu.run_kernel(ck.matmul(dtype), {"a": a, "b": b, "c": c}, block_dim=math.ceil(m / 64) * math.ceil(n / 64))
    torch.testing.assert_close(c, ck.ref_matmul(a, b), rtol=1e-5, atol=1e-4)


def test_cube_vector_cluster():
    a = torch.randn(100, 70).to(torch.float16)
    b = torch.randn(70, 130).to(torch.float16)
    c = torch.empty(100, 130, dtype=torch.float16)
    ws = torch.empty(100, 130)
    blocks = math.ceil(100 / 32) * math.ceil(130 / 64)
    out, report = cpu.run_kernel(ck.matmul_relu(F16), {"a": a, "b": b, "ws": ws, "c": c}, block_dim=blocks)
    assert set(out) == {"ws", "c"}
    ref = (torch.relu(ck.ref_matmul(a, b)) * 2).to(torch.float16)
    assert_close(c, ref, F16)

"""Cube lowering: matmul with M/N/K tails and K accumulation, batched and transposed operands,
split-K, fp32/fp16/bf16/int8, and matmul + bias + gelu as one AIC block plus one AIV block."""
import pytest
import torch

import pypto
from .passes_helpers import aic_kernels, aiv_kernels, lowered, rand, sim_vs_reference

# matmul results depend on the accumulation order: tolerances scale with K
MM_TOL = {torch.float32: (1e-5, 2e-4), torch.float16: (2e-3, 2e-2), torch.bfloat16: (1.6e-2, 1e-1)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", [(70, 300, 50), (16, 64, 16), (129, 1000, 33)])
def test_matmul_tails_and_k_accumulation(dtype, m, k, n):
    sim_vs_reference(lambda a, b: a @ b, rand((m, k), dtype, seed=1), rand((k, n), dtype, seed=2),
                     tol=MM_TOL[dtype])


@pytest.mark.parametrize("case", ["batched", "broadcast_b", "a_trans", "b_trans", "mT_view", "linear"])
def test_matmul_layouts(case):
    a3, b = rand((3, 40, 96), seed=3), rand((96, 24), seed=4)
    cases = {
        "batched": (lambda a, b: pypto.matmul(a, b), (a3, rand((3, 96, 24), seed=5))),
        "broadcast_b": (lambda a, b: pypto.matmul(a, b), (a3, b)),
        "a_trans": (lambda a, b: pypto.matmul(a, b, a_trans=True), (rand((96, 40), seed=6), b)),
        "b_trans": (lambda a, b: pypto.matmul(a, b, b_trans=True), (rand((40, 96), seed=7), rand((24, 96), seed=8))),
        "mT_view": (lambda a, b: a @ b.mT, (rand((40, 96), seed=9), rand((24, 96), seed=10))),
        "linear": (lambda x, w, c: pypto.linear(x, w, c), (rand((2, 5, 96), seed=11), rand((24, 96), seed=12),
                                                          rand((24,), seed=13))),
    }
    fn, args = cases[case]
    sim_vs_reference(fn, *args, tol=MM_TOL[torch.float32])


def test_split_k_when_few_output_tiles():
    a, b = rand((32, 4096), seed=14), rand((4096, 64), seed=15)
    sim_vs_reference(lambda a, b: a @ b, a, b, tol=(1e-5, 5e-4))
    eg = lowered(lambda a, b: a @ b, a, b)
    assert len(aic_kernels(eg)) == 1 and len(aiv_kernels(eg)) == 1      # partial products + their sum
    ws = [b for b in eg.buffers.values() if b.role == "workspace"]
    assert len(ws) == 1 and ws[0].dtype == pypto.float32 and ws[0].shape[1:] == (32, 64) and ws[0].shape[0] > 1


def test_int8_matmul():
    g = torch.Generator().manual_seed(16)
    a = torch.randint(-8, 8, (33, 64), generator=g, dtype=torch.int8)
    b = torch.randint(-8, 8, (64, 40), generator=g, dtype=torch.int8)
    sim_vs_reference(lambda a, b: a @ b, a, b)


def test_matmul_bias_gelu_is_one_aic_plus_one_aiv():
    x, w, c = rand((64, 256), torch.float16, seed=17), rand((512, 256), torch.float16, seed=18), \
        rand((512,), torch.float16, seed=19)

    def f(x, w, c):
        return pypto.gelu(pypto.linear(x, w, c))
    sim_vs_reference(f, x, w, c, tol=MM_TOL[torch.float16])
    eg = lowered(f, x, w, c)
    assert len(aic_kernels(eg)) == 1 and len(aiv_kernels(eg)) <= 1


def test_dynamic_m_one_compile():
    @pypto.jit(backend="sim")
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], w: pypto.Tensor[[64, 48], pypto.float32]):
        return (x @ w).relu()
    ref = pypto.jit(f.fn, backend="reference")
    w = rand((64, 48), seed=20)
    for m in (1, 17, 300):
        x = rand((m, 64), seed=m)
        torch.testing.assert_close(f(x, w), ref(x, w), rtol=1e-5, atol=2e-4)
    assert f.trace_count == 1


def test_cube_hint_sets_l0_tiles():
    def f(a, b):
        pypto.set_cube_tile_shapes([32, 32], [32, 64], [64, 64])
        return a @ b
    a, b = rand((100, 200), seed=21), rand((200, 70), seed=22)
    sim_vs_reference(f, a, b, tol=MM_TOL[torch.float32])
    eg = lowered(f, a, b)
    (k,) = aic_kernels(eg)
    shapes = {t.name.split("_")[0]: t.shape for t in k.blocks[0].tiles}
    assert shapes["c0"] == (32, 64) and shapes["a0"] == (32, 32) and shapes["b0"] == (32, 64)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 16, 32), (1, 32, 16)), ((1, 16, 32), (2, 32, 16)),
                                             ((3, 1, 16, 32), (1, 2, 32, 16)), ((2, 1, 1), (1, 1, 1))])
def test_matmul_size1_batch_dim_broadcasts(a_shape, b_shape):
    # a size-1 batch dim of an operand was indexed with the output's batch index (read outside the tensor)
    sim_vs_reference(lambda a, b: a @ b, rand(a_shape, seed=17), rand(b_shape, seed=18), tol=MM_TOL[torch.float32])

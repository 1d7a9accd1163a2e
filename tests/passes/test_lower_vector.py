"""Vector lowering: elementwise chains, broadcasting, scalars, reductions, fused normalisations —
the sim backend against the reference interpreter, fp32/fp16/bf16, with tails and dynamic sizes."""
import pytest
import torch

import pypto
from .passes_helpers import aiv_kernels, gm_workspaces, lowered, rand, sim_vs_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 50), (3, 5, 129), (1000,)])
def test_elementwise_chain_with_tails(dtype, shape):
    def f(x, y):
        return ((x * 2 - y).exp() + 1).sqrt() / (y.abs() + 0.5)
    sim_vs_reference(f, rand(shape, dtype, seed=1), rand(shape, dtype, seed=2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_table(dtype):
    def f(x):
        return (x.sigmoid() + x.tanh() - x.neg().relu() + x.sin() * x.cos() + pypto.gelu(x)
                + pypto.silu(x) + pypto.softplus(x) + x.exp2() + x.abs().log1p() + x.floor() - x.ceil())
    sim_vs_reference(f, rand((19, 70), dtype, seed=3), tol={torch.float32: (3e-6, 3e-6),
                                                             torch.float16: (4e-3, 4e-3),
                                                             torch.bfloat16: (3e-2, 3e-2)}.get(dtype))


@pytest.mark.parametrize("case", ["row", "col", "3d", "scalar_first", "column_first"])
def test_broadcasting(case):
    x = rand((33, 40), seed=4)
    fns = {
        "row": (lambda x, b: x + b, (x, rand((40,), seed=5))),
        "col": (lambda x, b: x * b - b, (x, rand((33, 1), seed=6))),
        "3d": (lambda x, b: (x + b).relu(), (rand((2, 33, 40), seed=7), rand((40,), seed=8))),
        "scalar_first": (lambda x: 2.0 - 1.0 / (x.abs() + 1) + 2 ** x, (x,)),
        "column_first": (lambda c, x: c - x + c / (x.abs() + 1), (rand((33, 1), seed=9), x)),
    }
    fn, args = fns[case]
    sim_vs_reference(fn, *args)


def test_compare_where_clip_cast():
    def f(x, y):
        m = (x > y) | (x < -1.0)
        z = pypto.where(m, x, 0.1 * x)
        return z.clip(-0.5, 0.75), (x * 10).to(pypto.int32), m
    sim_vs_reference(f, rand((25, 48), seed=10), rand((25, 48), seed=11))


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "mean"])
@pytest.mark.parametrize("dtype,dim,keepdim", [(torch.float32, -1, True), (torch.float16, -1, False),
                                               (torch.bfloat16, 0, True), (torch.float32, 1, False),
                                               (torch.float16, (0, 2), False)])
def test_reductions(dtype, op, dim, keepdim):
    def f(x):
        return getattr(pypto, op)(x, dim, keepdim=keepdim) * 1.0
    sim_vs_reference(f, rand((29, 3, 61), dtype, seed=12))


def test_prod_var_argmax():
    def f(x):
        return x.prod(-1), x.var(-1), x.argmax(-1), x.argmax(0, keepdim=True)
    sim_vs_reference(f, rand((23, 17), lo=0.5, hi=1.5, seed=13))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "rms_norm", "layer_norm", "l2norm"])
def test_norms_fuse_into_one_aiv_kernel(dtype, name):
    x = rand((50, 96), dtype, seed=14)
    w, b = rand((96,), dtype, seed=15), rand((96,), dtype, seed=16)
    fns = {
        "softmax": (lambda x: pypto.softmax(x, -1), (x,)),
        "log_softmax": (lambda x: pypto.log_softmax(x, -1), (x,)),
        "rms_norm": (lambda x, w: pypto.rms_norm(x, w, 1e-6), (x, w)),
        "layer_norm": (lambda x, w, b: pypto.layer_norm(x, (96,), w, b, 1e-5), (x, w, b)),
        "l2norm": (lambda x: pypto.l2norm(x, -1, 1e-6), (x,)),
    }
    fn, args = fns[name]
    sim_vs_reference(fn, *args)
    eg = lowered(fn, *args)
    assert len(aiv_kernels(eg)) == 1 and len(list(eg.tasks())) == 1
    assert not gm_workspaces(eg)


def test_softmax_rmsnorm_4096_fp16_single_kernel_no_gm_intermediate():
    x = torch.empty(4096, 4096, dtype=torch.float16)
    w = torch.empty(4096, dtype=torch.float16)
    for fn, args in ((lambda x: pypto.softmax(x, -1), (x,)), (lambda x, w: pypto.rms_norm(x, w, 1e-6), (x, w))):
        eg = lowered(fn, *args)
        assert len(eg.kernels) == 1 and len(list(eg.tasks())) == 1
        assert not gm_workspaces(eg)


def test_long_row_reductions_are_two_level():
    x = rand((5, 70000), seed=17)
    sim_vs_reference(lambda x: (x.sum(-1), x.amax(-1)), x, tol=(1e-5, 1e-4))
    sim_vs_reference(lambda x: pypto.softmax(x, -1), rand((3, 70000), seed=18), tol=(1e-5, 1e-9))
    eg = lowered(lambda x: x.sum(-1), x)
    (k,) = eg.kernels.values()
    assert "for k in range(0, 9, 2)" in str(k)        # the column tiles, accumulated (double-buffered)


def test_dynamic_sizes_one_compile():
    @pypto.jit(backend="sim")
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], w: pypto.Tensor[[64], pypto.float32]):
        return pypto.rms_norm(x * 2, w, 1e-6) + 1
    ref = pypto.jit(f.fn, backend="reference")
    w = rand((64,), seed=19)
    for m in (1, 7, 64, 333):
        x = rand((m, 64), seed=m)
        torch.testing.assert_close(f(x, w), ref(x, w), rtol=1e-6, atol=1e-6)
    assert f.trace_count == 1 and len(f.cache) == 1


def test_cumsum_tril_triu():
    def f(x):
        return x.cumsum(-1), x.cumsum(0), pypto.tril(x, 1), pypto.triu(x, -2)
    sim_vs_reference(f, rand((20, 37), seed=20), tol=(1e-5, 1e-5))


def test_views_and_outputs_that_are_inputs():
    def f(x):
        return x[2:7, 3:40] * 2, x, x[:, None, :].reshape(10, 1, 48) + 1
    sim_vs_reference(f, rand((10, 48), seed=21))

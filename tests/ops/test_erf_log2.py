"""erf and log2, two ops added by their registry entries alone (pypto/ops/elementwise.py): pypto.erf /
Tensor.erf / torch.compile's aten.erf, and the same for log2, against torch on the sim and cpu
backends in fp32, fp16 and bf16, on sizes that are not tile multiples (tails) and with a dynamic dim.

erf is one instruction (TERF); log2 is log(x) * (1 / ln 2) computed in fp32 and rounded once.
Tolerances (torch.testing.assert_close, rtol = atol): fp32 1e-6 (a few fp32 ulps: the fp32 log,
the constant and the product each round once); fp16 1e-3 and bf16 8e-3 (one rounding of the result
type, whose relative spacing is 2^-10 and 2^-7).
"""
import pytest
import torch

import pypto
import pypto.dynamo as pd

TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = list(TOL)


def _inputs(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 1.5).to(dtype)                     # erf: around its S-bend
    pos = torch.exp(torch.randn(shape, generator=gen) * 3).clamp(1e-3, 1e3)      # log2: many octaves
    return x, pos.to(dtype)


def _check(got, want, dtype):
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype])


def erf_log2(x, y):
    return pypto.erf(x), y.log2(), x.erf() * 2        # function and method forms


def _torch_erf_log2(x, y):
    return torch.erf(x), torch.log2(y), torch.erf(x) * 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_erf_log2_match_torch_with_tails_on_sim(dtype):
    x, y = _inputs((37, 130), dtype)          # neither dim a tile multiple
    got = pypto.jit(erf_log2, backend="sim")(x, y)
    for g, w in zip(got, _torch_erf_log2(x, y)):
        _check(g, w, dtype)


def test_erf_log2_match_torch_with_tails_on_cpu():
    """All three dtypes in one program: one g++ build."""
    ins = [t for dtype in DTYPES for t in _inputs((37, 130), dtype)]
    def three_dtypes(x32, y32, x16, y16, xb, yb):
        return erf_log2(x32, y32) + erf_log2(x16, y16) + erf_log2(xb, yb)
    got = pypto.jit(three_dtypes, backend="cpu")(*ins)
    for k, dtype in enumerate(DTYPES):
        for g, w in zip(got[3 * k:3 * k + 3], _torch_erf_log2(ins[2 * k], ins[2 * k + 1])):
            _check(g, w, dtype)


def test_erf_log2_dynamic_rows_one_trace_on_sim():
    def rows_dynamic(x: pypto.Tensor[[pypto.DYNAMIC, 48], pypto.float32],
                     y: pypto.Tensor[[pypto.DYNAMIC, 48], pypto.float32]):
        return erf_log2(x, y)
    f = pypto.jit(rows_dynamic, backend="sim")
    for rows in (1, 7, 300):
        x, y = _inputs((rows, 48), torch.float32, seed=rows)
        for g, w in zip(f(x, y), _torch_erf_log2(x, y)):
            _check(g, w, torch.float32)
    assert f.trace_count == 1


def test_log2_exact_on_powers_of_two_and_of_integers():
    """log2 of 2^k is k (to fp32 rounding), and an integer input gives fp32, as torch."""
    p = torch.tensor([[2.0 ** k for k in range(-20, 20)]])
    got = pypto.jit(lambda t: t.log2(), backend="sim")(p)
    torch.testing.assert_close(got, torch.arange(-20, 20, dtype=torch.float32)[None], rtol=0, atol=4e-6)
    i = torch.arange(1, 65, dtype=torch.int32).reshape(4, 16)
    got = pypto.jit(lambda t: pypto.log2(t), backend="sim")(i)
    assert got.dtype == torch.float32
    _check(got, torch.log2(i), torch.float32)


def test_erf_log2_through_torch_compile_on_sim():
    """aten.erf / aten.log2 have rules generated from the registry: nothing is left in eager."""
    def model(x):
        return torch.erf(x) + torch.log2(x.abs() + 0.5)
    x = torch.randn(9, 40)
    torch._dynamo.reset()
    pd.reset()                       # the counters are process-wide: read only this test's
    compiled = torch.compile(model, backend="pypto", options={"backend": "sim", "strict": True})
    _check(compiled(x), model(x), torch.float32)
    assert pd.counters["eager_ops"] == 0 and pd.counters["partitions"] == 1


def test_log2_decomposition_is_fp32_inside():
    """fp16 in, fp16 out: the log and the scaling run in fp32 and the result is rounded once."""
    from pypto.ops import REGISTRY
    f = pypto.jit(lambda x: REGISTRY["log2"].decompose(pypto, [x], {}), backend="reference")
    g = f.trace(torch.rand(4, 16, dtype=torch.float16) + 0.5)
    ops = [(g.op(n), g.info(n).dtype) for n in g.nodes() if g.op(n) not in ("input", "scalar")]
    assert ops == [("cast", pypto.float32), ("log", pypto.float32), ("mul", pypto.float32),
                   ("cast", pypto.float16)]

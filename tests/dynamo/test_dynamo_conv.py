"""Convolution (1-D, 2-D: stride, padding, dilation, groups, depthwise, bias or none), inference batch
norm and cumsum along a dynamic dim through torch.compile(backend="pypto") (pypto/fx/conv.py,
rules.py), against eager torch: fp32 at rtol/atol 1e-4 (scaled to the output), fp16 / bf16 at their
rounding of an fp32-accumulated result. What pypto does not take (transposed convolution, integer
cumsum along a dynamic dim) stays in eager with its reason."""
import pytest
import torch
import torch.nn as nn

import pypto.dynamo as pd
from dynamo_cases import backends, check_ran_in_pypto

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 2e-2}


def _close(got, want):
    scale = max(want.float().abs().max().item(), 1.0)
    tol = TOL[want.dtype] * scale
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=TOL[want.dtype], atol=tol)


class VisionBlock(nn.Module):
    """conv -> batch norm -> relu -> grouped strided conv -> depthwise conv (no bias), and a dilated 1-D
    conv with padding on a second input."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.dw = nn.Conv2d(8, 8, (3, 2), padding=(1, 0), groups=8, bias=False)
        self.c3 = nn.Conv1d(4, 6, 3, padding=2, dilation=2)
        self.bn1 = nn.BatchNorm1d(6, affine=False)

    def forward(self, x, t):
        y = self.dw(self.c2(torch.relu(self.bn(self.c1(x)))))
        return y, self.bn1(self.c3(t))


def _block(dtype=torch.float32):
    torch.manual_seed(0)
    m = VisionBlock().eval()
    with torch.no_grad():
        for bn in (m.bn, m.bn1):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
    return m.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_convolutions_and_batch_norm_on_reference(dtype):
    """Every convolution form and both batch norms convert (reference: the conversion alone)."""
    m = _block(dtype)
    c = torch.compile(m, backend="pypto", options={"backend": "reference"})
    for hw in ((9, 10), (8, 8)):
        x, t = torch.randn(2, 3, *hw).to(dtype), torch.randn(2, 4, 11).to(dtype)
        with torch.no_grad():
            for got, want in zip(c(x, t), m(x, t)):
                _close(got, want)
    check_ran_in_pypto("reference")
    assert pd.counters["eager_ops"] == 0


@pytest.mark.parametrize("backend", [b for b in backends() if b.values[0] != "reference"], indirect=True)
def test_convolutions_and_batch_norm_lowered(backend):
    m = _block()
    c = torch.compile(m, backend="pypto", options={"backend": backend})
    x, t = torch.randn(2, 3, 9, 10), torch.randn(2, 4, 11)
    with torch.no_grad():
        for got, want in zip(c(x, t), m(x, t)):
            _close(got, want)
    check_ran_in_pypto(backend)
    assert pd.counters["eager_ops"] == 0


@pytest.mark.slow
def test_convolutions_dynamic_image_sizes_one_graph_on_sim():
    m = _block()
    c = torch.compile(m, backend="pypto", dynamic=True, options={"backend": "sim"})
    with torch.no_grad():
        for hw in ((9, 10), (12, 7)):
            x, t = torch.randn(2, 3, *hw), torch.randn(2, 4, 11 + hw[0])
            for got, want in zip(c(x, t), m(x, t)):
                _close(got, want)
    check_ran_in_pypto("sim")
    assert pd.counters["graphs"] == 1


def test_what_pypto_does_not_take_stays_in_eager_with_its_reason():
    torch.manual_seed(0)
    up = nn.ConvTranspose2d(4, 3, 2, stride=2).eval()

    def f(x, i):
        return up(x).relu(), i.cumsum(1)
    x, i = torch.randn(1, 4, 5, 5), torch.randint(0, 5, (2, 7))
    with torch.no_grad():
        r = pd.explain(f, x, i, options={"backend": "reference"}, dynamic=True)
        got = torch.compile(f, backend="pypto", dynamic=True, options={"backend": "reference"})(x, i)
    reasons = {op: why for (op, why) in r.eager_ops}
    assert reasons["aten.convolution.default"] == "transposed convolution"
    assert reasons["aten.cumsum.default"] == "cumsum of integers along a dynamic dim"
    for g, w in zip(got, f(x, i)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def cumsums(x, v):
    return x.cumsum(1) * 2, x.cumsum(-1), x.half().cumsum(0), v.cumsum(0), x.bfloat16().cumsum(2)


@pytest.mark.parametrize("backend", backends(slow=("cpu",)), indirect=True)
def test_cumsum_along_dynamic_dims(backend):
    """Along a dynamic dim, cumsum is a product with a triangle of ones (its lowering scans static dims
    only): first, middle and last dim, 1-D, fp16 / bf16, one graph for every length."""
    c = torch.compile(cumsums, backend="pypto", dynamic=True, options={"backend": backend})
    for n in (7, 33):
        x, v = torch.randn(n, n + 1, 5), torch.randn(n)
        for got, want in zip(c(x, v), cumsums(x, v)):
            _close(got, want)
    check_ran_in_pypto(backend)
    assert pd.counters["eager_ops"] == 0 and pd.counters["graphs"] == 1

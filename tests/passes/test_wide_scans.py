"""cumsum / argmax along dims longer than one tile (blockwise, pypto/passes/wide_scans.py) and
reductions of strided views, on sim and cpu against torch."""
import pytest
import torch

import pypto
from pypto.passes import wide_scans

BACKENDS = ["sim", "cpu"]
# (shape, dim): tails (5000 = 4 * 1024 + 904), an exact multiple, a middle dim, dim 0
SHAPES = [((3, 5000), -1), ((2, 4096), 1), ((2, 3000, 4), 1), ((2500, 8), 0)]
TOL = {torch.float32: (1e-5, 2e-3), torch.float16: (2e-3, 0.1), torch.bfloat16: (1.6e-2, 1.0)}


def data(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-4, 5, shape, generator=g).to(dtype)        # many ties


# fp32 over every shape on both backends; the other dtypes on sim over a tail and a middle dim
CUMSUM_CASES = [(b, torch.float32, s, d) for b in BACKENDS for s, d in SHAPES] + \
    [("sim", dt, s, d) for dt in (torch.float16, torch.bfloat16, torch.int32) for s, d in (SHAPES[0], SHAPES[2])]


def case_id(case):
    backend, dtype, shape, dim = case
    return f"{backend}-{str(dtype).split('.')[1]}-{'x'.join(map(str, shape))}-dim{dim}"


@pytest.mark.parametrize("backend,dtype,shape,dim", CUMSUM_CASES, ids=[case_id(c) for c in CUMSUM_CASES])
def test_wide_cumsum(backend, dtype, shape, dim):
    x = data(shape, dtype)
    got = pypto.jit(lambda t: pypto.cumsum(t, dim), backend=backend)(x)
    expected = torch.cumsum(x.double() if dtype.is_floating_point else x, dim)
    assert got.dtype == torch.cumsum(x, dim).dtype
    if dtype.is_floating_point:
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol)
    else:
        assert torch.equal(got, expected)


ARGMAX_CASES = [(b, torch.float32, s, d) for b in BACKENDS for s, d in SHAPES] + \
    [("sim", dt, s, d) for dt in (torch.float16, torch.int32) for s, d in (SHAPES[0], SHAPES[3])]


@pytest.mark.parametrize("backend,dtype,shape,dim", ARGMAX_CASES, ids=[case_id(c) for c in ARGMAX_CASES])
def test_wide_argmax_first_occurrence(backend, dtype, shape, dim):
    keepdim = dim == 1
    x = data(shape, dtype, seed=1)
    got = pypto.jit(lambda t: pypto.argmax(t, dim, keepdim=keepdim), backend=backend)(x)
    assert torch.equal(got, torch.argmax(x, dim, keepdim=keepdim))


def test_wide_argmax_of_the_flattened_tensor():
    x = data((7, 900), torch.float32, seed=2)
    got = pypto.jit(lambda t: pypto.argmax(t), backend="sim")(x)
    assert torch.equal(got, torch.argmax(x))


@pytest.mark.parametrize("op", ["cumsum", "argmax"])
def test_blocks_of_blocks(monkeypatch, op):
    """More blocks than fit one tile: the carries / block maxima are themselves done blockwise."""
    monkeypatch.setattr(wide_scans, "LIMIT", 8)
    monkeypatch.setattr(wide_scans, "BLOCK", 4)
    x = data((3, 203), torch.float32, seed=3)
    fn = (lambda t: pypto.cumsum(t, 1)) if op == "cumsum" else (lambda t: pypto.argmax(t, 1))
    got = pypto.jit(fn, backend="sim")(x)
    if op == "cumsum":
        torch.testing.assert_close(got, torch.cumsum(x, 1), rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, torch.argmax(x, 1))


# a reduction over a leading dim of a strided view: one row per GM box while the reduction needs
# the whole dim in one tile (was a silent wrong answer: the reduced dim was cut across cores)
STRIDED = {
    "sum": lambda x: pypto.sum(pypto.view(x, [5, 1, 16], [0, 3, 0]), 0),
    "cumsum": lambda x: pypto.cumsum(pypto.view(x, [5, 1, 16], [0, 3, 0]), 0),
    "fused_amax": lambda x: pypto.amax(pypto.view(x, [5, 1, 16], [0, 1, 0]) * 2.0, 0),
    "column": lambda x: x[:, :, 3:4] * 2.0,                              # one column of the last dim
    "column_cumsum": lambda x: pypto.cumsum(x[:, :, 3:4].reshape(5, 4), 1),
}
STRIDED_TORCH = {
    "sum": lambda x: torch.sum(x[:, 3:4], 0),
    "cumsum": lambda x: torch.cumsum(x[:, 3:4], 0),
    "fused_amax": lambda x: torch.amax(x[:, 1:2] * 2.0, 0),
    "column": lambda x: x[:, :, 3:4] * 2.0,
    "column_cumsum": lambda x: torch.cumsum(x[:, :, 3:4].reshape(5, 4), 1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(STRIDED))
def test_reduction_over_a_strided_view(backend, name):
    x = data((5, 4, 16), torch.float32, seed=4)
    got = pypto.jit(STRIDED[name], backend=backend)(x)
    torch.testing.assert_close(got, STRIDED_TORCH[name](x), rtol=1e-5, atol=1e-5)

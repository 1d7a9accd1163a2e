import pytest
import torch

# (atol, rtol) per dtype, atol scaled by the reference's largest magnitude: fp32 agrees to float
# rounding; fp16/bf16 results may differ from torch's by a couple of roundings of the output dtype
# (torch and pypto round intermediates at different points).
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2)}


def _assert_close(actual, expected, dtype=None):
    dtype = dtype or expected.dtype
    atol, rtol = TOLERANCES[dtype]
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    scale = max(expected.float().abs().max().item(), 1.0) if expected.numel() else 1.0
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol * scale, rtol=rtol)


@pytest.fixture
def assert_close():
    return _assert_close


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _reference_backend():
    """nn tests check module machinery and layer numerics against torch on the reference interpreter;
    test_nn_backends.py runs modules on the lowered backends."""
    import pypto
    old = pypto.get_backend()
    pypto.set_backend("reference")
    yield
    pypto.set_backend(old)

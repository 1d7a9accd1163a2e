"""pypto.jit(lowering={...}) and Module.compile(lowering={...}): the caller overrides the compiler's
choices (the keyword options of passes.pipeline.lower), the report says so, and a misspelt option is
a clear error at the call. Results are compared with torch (fp32, rtol = atol = 1e-5) both ways."""
import pytest
import torch
import torch.nn.functional as TF

import pypto
from pypto.testing.source import line_of


def attn(q, k, v):
    return pypto.nn.functional.scaled_dot_product_attention(q, k, v)


def _qkv(rows=200, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, rows, 64, generator=gen) for _ in range(3)]


@pytest.mark.parametrize("lowering", [None, {"flash": False}], ids=["default", "flash_off"])
def test_flash_can_be_switched_off_and_both_forms_match_torch(lowering):
    q, k, v = _qkv()
    f = pypto.jit(attn, backend="sim", lowering=lowering)
    torch.testing.assert_close(f(q, k, v), TF.scaled_dot_product_attention(q, k, v), rtol=1e-5, atol=1e-5)
    kernels = list(f.last_report.decisions)
    said = [n for n in f.last_report.notes if "lowering options set by the caller" in n]
    if lowering is None:
        assert any(name.startswith("flash_attention") for name in kernels) and not said
    else:
        assert not any(name.startswith("flash_attention") for name in kernels), kernels
        assert said == ["lowering options set by the caller: flash=False"]


def test_module_compile_passes_lowering_options():
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40)
    m = pypto.nn.Linear(48, 40)
    m.load_state_dict(lin.state_dict())
    m.compile(backend="sim", lowering={"fuse": False})
    x = torch.randn(3, 7, 48)
    torch.testing.assert_close(m(x), lin(x), rtol=1e-5, atol=1e-5)
    assert "lowering options set by the caller: fuse=False" in m.compiled.last_report.notes


def test_an_unknown_lowering_option_is_an_error_at_the_call():
    q, k, v = _qkv(rows=8)
    f = pypto.jit(attn, backend="sim", lowering={"flsh": False})

    def call():
        return f(q, k, v)                               # the line the error names
    with pytest.raises(pypto.PyptoError, match="lowering option 'flsh' is not one of fuse, multibuffer") as err:
        call()
    assert f"{__file__}:{line_of(call, 'f(q, k, v)')}" in str(err.value)


def test_lowering_must_be_a_dict():
    with pytest.raises(pypto.TypeMismatchError, match="lowering= takes a dict"):
        pypto.jit(attn, lowering=["flash"])

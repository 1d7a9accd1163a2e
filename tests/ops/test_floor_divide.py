"""floor_divide (`a // b`, pypto.floor_divide, Tensor.floor_divide, aten.floor_divide) and the reflected
`%` (`3.0 % t`), added by their registry entries (pypto/ops/elementwise.py).

floor_divide follows torch's rule, the integer nearest (a - remainder(a, b)) / b computed in fp32 and
rounded once to the result dtype, so the cases where a / b rounds up to an integer match torch
(1 // 0.1 is 9.0, not 10.0). Integer operands are refused at the user's line (the vector unit divides
in floating point). Tolerance: exact (rtol = atol = 0) against torch run in fp32 and rounded once to
the input dtype. For fp16 that is torch's own fp16 result; torch's bf16 kernel rounds its steps in bf16
and is one bf16 step off the true floor in ~0.3% of these cases (20.375 // -0.0879 gives -231, the
floor of -231.8 is -232), so bf16 is held to the correctly rounded floor.
"""
import pytest
import torch

import pypto
import pypto.dynamo as pd
from pypto.testing.source import line_of

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _inputs(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=gen) * 20
    b = torch.randn(shape, generator=gen) * 3
    b = torch.where(b.abs() < 0.05, torch.full_like(b, 0.25), b)       # no zero divisors
    # a / b rounding up to an integer, with every sign pairing
    a.view(-1)[:4] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    b.view(-1)[:4] = torch.tensor([0.1, 0.1, -0.1, -0.1])
    return a.to(dtype), b.to(dtype)


def floor_forms(a, b):
    return a // b, a // 2.0, 7.0 // b, pypto.floor_divide(a, b), a.floor_divide(b), 3.0 % b


def _torch_forms(a, b):
    dt, a, b = a.dtype, a.float(), b.float()
    want = a // b, a // 2.0, 7.0 // b, torch.floor_divide(a, b), a.floor_divide(b), 3.0 % b
    return tuple(w.to(dt) for w in want)


def _check(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_floor_divide_matches_torch_with_tails_on_sim(dtype):
    a, b = _inputs((37, 130), dtype)
    _check(pypto.jit(floor_forms, backend="sim")(a, b), _torch_forms(a, b))


def test_floor_divide_matches_torch_on_cpu():
    a, b = _inputs((37, 130), torch.float32)
    ah, bh = _inputs((5, 33), torch.float16, seed=1)
    got = pypto.jit(lambda a, b, c, d: floor_forms(a, b) + floor_forms(c, d), backend="cpu")(a, b, ah, bh)
    _check(got, _torch_forms(a, b) + _torch_forms(ah, bh))


def test_floor_divide_broadcasts_and_keeps_one_trace_for_dynamic_rows():
    def rows_by_one(a: pypto.Tensor[[pypto.DYNAMIC, 48], pypto.float32], b):
        return a // b
    f = pypto.jit(rows_by_one, backend="sim")
    for rows in (1, 9, 300):
        a, b = _inputs((rows, 48), torch.float32, seed=rows)
        _check((f(a, b[:1]),), (a // b[:1],))
    assert f.trace_count == 1


def test_floor_divide_of_integers_is_a_clear_error_at_the_users_line():
    def int_div(a, b):
        return a // b                                   # the line the error names
    a = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    with pytest.raises(pypto.DTypeError, match="floor_divide") as err:
        pypto.jit(int_div, backend="sim")(a, a + 1)
    assert f"{__file__}:{line_of(int_div, 'a // b')}" in str(err.value)


def test_floor_divide_through_torch_compile_on_sim():
    def model(a, b):
        return a // b + torch.remainder(a, b)
    a, b = _inputs((9, 40), torch.float32)
    torch._dynamo.reset()
    pd.reset()
    compiled = torch.compile(model, backend="pypto", options={"backend": "sim", "strict": True})
    _check((compiled(a, b),), (model(a, b),))
    assert pd.counters["eager_ops"] == 0 and pd.counters["partitions"] == 1

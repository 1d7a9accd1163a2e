"""A scalar operand of a vector instruction is a value of the instruction's element type, never index math:
comparisons of a tensor with integral-valued float scalars (-1.0, 0.0, 2.0) and a fractional one (0.5), on
sim and cpu vs torch, fp32 / fp16 / bf16, with tails. Was a cpu CompileError ('index expression
-1.00000000000000 is not an integer'): the compare's mask destination decided the scalar's type."""
import pytest
import torch

import pypto

CMPS = {"ge": torch.ge, "gt": torch.gt, "lt": torch.lt, "le": torch.le, "eq": torch.eq}
SCALARS = (-1.0, 0.0, 2.0, 0.5)


def _inputs(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (37, 45), generator=gen).float() / 2      # hits every scalar exactly (eq)
    return x.to(dtype)


def _compares(x):
    return [pypto.where(getattr(pypto, name)(x, s), x, x * 2.0) for name in CMPS for s in SCALARS]


def _check(outs, x):
    j = 0
    for name, ref in CMPS.items():
        for s in SCALARS:
            want = torch.where(ref(x, s), x, x * 2.0)
            assert outs[j].dtype == x.dtype
            assert torch.equal(outs[j], want), f"{name}(x, {s})"
            j += 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_compare_with_float_scalars_on_sim(dtype):
    x = _inputs(dtype)
    _check(pypto.jit(lambda x: tuple(_compares(x)), backend="sim")(x), x)


def test_compare_with_float_scalars_on_cpu():
    """One compile (g++ is the cost) for the three dtypes."""
    xs = [_inputs(dt) for dt in (torch.float32, torch.float16, torch.bfloat16)]
    f = pypto.jit(lambda a, b, c: tuple(o for x in (a, b, c) for o in _compares(x)), backend="cpu")
    outs = f(*xs)
    n = len(CMPS) * len(SCALARS)
    for j, x in enumerate(xs):
        _check(outs[j * n:(j + 1) * n], x)


def test_the_reported_repro_on_cpu():
    @pypto.jit(backend="cpu")
    def f(w: pypto.Tensor[[64, 32], pypto.float32]):
        return pypto.where(pypto.ge(w, -1.0), w, w * 2.0)
    w = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    assert torch.equal(f(w), torch.where(w >= -1.0, w, w * 2.0))


def test_an_int_tile_compared_with_an_integral_float_on_cpu():
    """An int32 tile's scalar stays an integer (the instruction's type is the tile's)."""
    x = torch.arange(-8, 8, dtype=torch.int32).reshape(4, 4)
    f = pypto.jit(lambda x: pypto.where(pypto.ge(x, 2.0), x, x * 3), backend="cpu")
    assert torch.equal(f(x), torch.where(x >= 2.0, x, x * 3))

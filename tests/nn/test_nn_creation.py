"""pypto.randn/rand/zeros/ones/full/from_torch: concrete torch tensors outside a trace, traced ops inside."""
import pytest
import torch

import pypto


@pytest.mark.parametrize("fn, check", [
    (pypto.zeros, lambda t: torch.all(t == 0)),
    (pypto.ones, lambda t: torch.all(t == 1)),
    (pypto.randn, lambda t: t.std() > 0.5),
    (pypto.rand, lambda t: torch.all((t >= 0) & (t < 1))),
], ids=["zeros", "ones", "randn", "rand"])
@pytest.mark.parametrize("dtype", [None, pypto.float16, pypto.bfloat16, torch.float32], ids=str)
def test_outside_a_trace_returns_torch_tensors(fn, check, dtype):
    for shape_args in ((4, 8), ((4, 8),), ([4, 8],), (torch.Size([4, 8]),)):
        t = fn(*shape_args) if dtype is None else fn(*shape_args, dtype=dtype)
        assert type(t) is torch.Tensor and t.shape == (4, 8)
        assert t.dtype == (torch.float32 if dtype is None else pypto.dtypes.to_dtype(dtype).torch_dtype)
        assert check(t.float())


def test_full_and_integer_dtypes():
    assert torch.equal(pypto.full((2, 3), 7, dtype=pypto.int32), torch.full((2, 3), 7, dtype=torch.int32))
    assert pypto.full([2], 1.5).dtype == torch.float32 and pypto.full(3, 2).dtype == torch.int64
    assert pypto.zeros(3, dtype=pypto.int8).dtype == torch.int8
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(pypto.randn(5, generator=g1), pypto.randn(5, generator=g2))


def test_from_torch():
    x = torch.randn(4, 6).t()
    y = pypto.from_torch(x)
    assert y.is_contiguous() and torch.equal(y, x)
    assert pypto.from_torch(x, dtype=pypto.float16).dtype == torch.float16


def test_inside_a_trace_records_ops():
    table = torch.arange(6.0).reshape(2, 3)

    @pypto.jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 3], pypto.float32]):
        n = x.shape[0]
        z = pypto.zeros(n, 3)                               # symbolic size: fine inside a trace
        o = pypto.ones(n, 3, dtype=pypto.float16)
        c = pypto.full((1, 3), 2.0)
        t = pypto.from_torch(table)
        return x + z + o.float() * c, t * 1.0

    for rows in (1, 5):
        x = torch.randn(rows, 3)
        y, t = f(x)
        torch.testing.assert_close(y, x + 2.0)
        torch.testing.assert_close(t, table)
    assert f.trace_count == 1
    g = f.trace(torch.randn(2, 3))
    ops = [g.op(n) for n in g.nodes()]
    assert ops.count("full") == 3 and "constant" in ops


ERRORS = [
    (lambda: pypto.randn(pypto.dynamic("T"), 4), pypto.SymbolicError, "expected an int, found the symbolic size T"),
    (lambda: pypto.zeros(2.5), pypto.TypeMismatchError, "expected int sizes, found float"),
    (lambda: pypto.ones(-1), pypto.PyptoError, "expected non-negative sizes, found -1"),
    (lambda: pypto.randn(3, dtype=pypto.int32), pypto.DTypeError, "expected a floating dtype"),
    (lambda: pypto.from_torch([1, 2]), pypto.TypeMismatchError, "expected a torch.Tensor, found list"),
    (lambda: pypto.zeros(2, dtype="complex"), pypto.DTypeError, "expected a pypto dtype"),
]


@pytest.mark.parametrize("make, exc, fragment", ERRORS)
def test_creation_errors(make, exc, fragment):
    with pytest.raises(exc) as e:
        make()
    assert fragment in str(e.value) and e.value.loc.file == __file__


def test_random_inside_a_trace_raises():
    @pypto.jit
    def f(x):
        return x + pypto.randn(3)

    with pytest.raises(pypto.PyptoError, match="cannot be used inside a traced function") as e:
        f(torch.ones(3))
    assert e.value.loc.file == __file__

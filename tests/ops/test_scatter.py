"""scatter / scatter_ (torch.scatter, and CANN's pypto.scatter spelling) vs torch eager on sim (and cpu):
a scalar value or a tensor src, every dim, an index smaller than the input in the other dims, a src
larger than the index, repeated indices (the last one along dim wins without reduce; reduce='add' /
'multiply' combine them), int32 / int64 indices, fp32 / fp16 / bf16, tails, a dynamic size from one
trace, indices out of range at run time, and bad input named at the user's line."""
import pytest
import torch

import pypto
from pypto.errors import DTypeError, PyptoError, ShapeError

from .op_testing import T, Inp, assert_close, check_error, compile_case

ANY = (torch.float32, torch.float16, torch.bfloat16)


def _unique_index(shape, dim, n, gen):
    """An index of ``shape`` whose entries along ``dim`` are distinct values in [0, n)."""
    shape = list(shape)
    m = shape[dim]
    moved = shape[:dim] + shape[dim + 1:] + [m]
    rows = int(torch.tensor(moved[:-1]).prod()) if len(moved) > 1 else 1
    idx = torch.stack([torch.randperm(n, generator=gen)[:m] for _ in range(rows)]).reshape(moved)
    return idx.movedim(-1, dim).contiguous()


def _last_wins(x, dim, index, src):
    """scatter by a plain loop in index order (the last write wins): an independent reference."""
    out = x.clone()
    for pos in torch.cartesian_prod(*[torch.arange(s) for s in index.shape]).reshape(-1, index.ndim).tolist():
        tgt = list(pos)
        tgt[dim] = int(index[tuple(pos)])
        out[tuple(tgt)] = src[tuple(pos)] if isinstance(src, torch.Tensor) else src
    return out


@pytest.mark.parametrize("dtype", ANY)
@pytest.mark.parametrize("dim,xshape,ishape", [
    (0, (37, 24), (37, 24)),          # CANN's example form: index as large as the input, repeats along dim
    (1, (37, 24), (29, 5)),           # an index smaller in the other dim (a tail of 37 rows)
    (-1, (4, 37, 6), (3, 20, 6)),     # 3-D, the last dim
    (1, (4, 37, 6), (4, 50, 5)),      # 3-D, a middle dim, an index longer than the dim
])
def test_scatter_value_matches_torch(dtype, dim, xshape, ishape):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(xshape, generator=gen).to(dtype)
    index = torch.randint(0, x.shape[dim], ishape, generator=gen)
    out = pypto.jit(lambda x, i: pypto.scatter(x, dim, i, 0.5))(x, index)
    assert_close(out, torch.scatter(x, dim, index, 0.5), dtype, what="scatter value")


@pytest.mark.parametrize("dtype", ANY)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_tensor_src_unique_indices(dtype, dim):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(37, 24, generator=gen).to(dtype)
    ishape = (20, 24) if dim == 0 else (37, 9)
    index = _unique_index(ishape, dim, x.shape[dim], gen).to(torch.int32)
    src = torch.randn(40, 30, generator=gen).to(dtype)          # larger than the index: its corner is used
    out = pypto.jit(lambda x, i, s: x.scatter(dim, i, s))(x, index, src)
    assert_close(out, torch.scatter(x, dim, index.long(), src), dtype, what="scatter src")


def test_repeated_indices_last_one_along_dim_wins():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(6, 5, generator=gen)
    index = torch.randint(0, 3, (6, 5), generator=gen)          # many repeats along dim 0
    src = torch.randn(6, 5, generator=gen)
    out = pypto.jit(lambda x, i, s: pypto.scatter(x, 0, i, s))(x, index, src)
    assert torch.equal(out, _last_wins(x, 0, index, src))


@pytest.mark.parametrize("dtype", ANY)
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_combines_repeats(dtype, reduce):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(7, 33, generator=gen).to(dtype)
    index = torch.randint(0, 7, (5, 33), generator=gen)
    src = (torch.rand(5, 33, generator=gen) + 0.5).to(dtype)
    out = pypto.jit(lambda x, i, s: pypto.scatter(x, 0, i, s, reduce=reduce))(x, index, src)
    ref = torch.scatter_reduce(x.float(), 0, index, src.float(), "sum" if reduce == "add" else "prod").to(dtype)
    assert_close(out, ref, dtype, factor=2.0, what=f"scatter reduce={reduce}")
    out = pypto.jit(lambda x, i: pypto.scatter(x, 0, i, 2.0, reduce=reduce))(x, index)
    ref = torch.scatter_reduce(x.float(), 0, index, torch.full(index.shape, 2.0), "sum" if reduce == "add" else "prod")
    assert_close(out, ref.to(dtype), dtype, factor=2.0, what=f"scatter value reduce={reduce}")


def test_scatter_in_place_method():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, 16, generator=gen)
    index = torch.randint(0, 16, (9, 3), generator=gen)

    def f(x, i):
        y = x * 2.0
        y.scatter_(1, i, -1.0)
        return y
    assert_close(pypto.jit(f)(x, index), torch.scatter(x * 2.0, 1, index, -1.0), torch.float32)


def test_scatter_dynamic_size_one_trace():
    fn = compile_case(lambda m, x, i: m.scatter(x, 0, i, 3.0),
                      [pypto.Tensor[[pypto.dynamic("T"), 24], pypto.float32],
                       pypto.Tensor[[pypto.dynamic("T"), 24], pypto.int64]], backend="sim")
    for t in (1, 7, 64, 130):
        gen = torch.Generator().manual_seed(t)
        x = torch.randn(t, 24, generator=gen)
        index = torch.randint(0, t, (t, 24), generator=gen)
        assert_close(fn(x, index), torch.scatter(x, 0, index, 3.0), torch.float32, what=f"T={t}")
    assert fn.trace_count == 1


def test_scatter_on_cpu_backend():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 5, generator=gen)
    index = torch.randint(0, 3, (3, 5), generator=gen)
    src = torch.randn(3, 5, generator=gen)
    index_u = _unique_index((2, 5), 0, 3, gen)
    f = pypto.jit(lambda x, i, j, s: (pypto.scatter(x, 0, i, 0.5), pypto.scatter(x, 0, j, s)), backend="cpu")
    a, b = f(x, index, index_u, src)
    assert_close(a, torch.scatter(x, 0, index, 0.5), torch.float32)
    assert_close(b, torch.scatter(x, 0, index_u, src[:2]), torch.float32)


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_scatter_index_out_of_range_fails_at_run_time(backend):
    f = pypto.jit(lambda x, i: pypto.scatter(x, 1, i, 1.0), backend=backend)
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"index 9 at \[0, 0\], outside the dim of size 4"):
        f(torch.randn(3, 4), torch.full((3, 2), 9))


def test_scatter_computed_index_out_of_range_fails_at_run_time():
    f = pypto.jit(lambda x, i: pypto.scatter(x, 1, i + 3, 1.0))
    with pytest.raises(pypto.IndexOutOfRangeError):
        f(torch.randn(3, 4), torch.full((3, 2), 2))


X = Inp((T, 24))
ERRORS = [
    (lambda m, x, i: m.scatter(x, 1, i, 1.0), [X, Inp((T, 5), "index:24", torch.float32)], DTypeError,
     r"scatter: index must be int32 or int64, found float32"),
    (lambda m, x, i: m.scatter(x, 1, i, 1.0), [X, Inp((T,), "index:24", torch.int64)], ShapeError,
     r"scatter: index \[T\] and input \[T, 24\] differ in rank"),
    (lambda m, x, i: m.scatter(x, 1, i, 1.0), [Inp((4, 24)), Inp((5, 3), "index:24", torch.int64)], ShapeError,
     r"scatter: index \[5, 3\] is larger than input \[4, 24\] in dim 0"),
    (lambda m, x, i, s: m.scatter(x, 1, i, s), [X, Inp((T, 5), "index:24", torch.int64), Inp((T, 5), "int",
                                                                                         torch.int32)],
     DTypeError, r"scatter: src \(int32\) must have the input's dtype \(float32\)"),
    (lambda m, x, i, s: m.scatter(x, 1, i, s), [X, Inp((T, 5), "index:24", torch.int64), Inp((T, 2))], ShapeError,
     r"scatter: index \[T, 5\] is larger than src \[T, 2\] in dim 1"),
    (lambda m, x, i: m.scatter(x, 1, i, 1.0, reduce="max"), [X, Inp((T, 5), "index:24", torch.int64)], PyptoError,
     r"reduce must be None, 'add' or 'multiply'"),
    (lambda m, x, i: m.scatter(x, 2, i, 1.0), [X, Inp((T, 5), "index:24", torch.int64)], ShapeError, r"dim"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_scatter_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)

"""one_hot (pypto.nn.functional), bincount, histc and index_add / index_add_ vs torch eager on sim, cpu and
reference: int32 / int64 labels, fp32 / fp16 / bf16 / int32 values, repeats, tails, a dynamic length from
one trace, labels out of range at run time (an argument's and a computed one's), and bad input named at
the user's line."""
import pytest
import torch
import torch.nn.functional as TF

import pypto
import pypto.nn.functional as F
from pypto.errors import DTypeError, PyptoError, ShapeError, TypeMismatchError

from .op_testing import T, Case, Inp, assert_close, case_params, check_error, compile_case, run_case

ANY = (torch.float32, torch.float16, torch.bfloat16)


# ------------------------------------------------------------------ one_hot
@pytest.mark.parametrize("idt", [torch.int32, torch.int64])
def test_one_hot_matches_torch(idt):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 13, (7, 5), generator=gen).to(idt)
    out = pypto.jit(lambda x: F.one_hot(x, 13))(x)
    assert out.dtype == torch.int64 and torch.equal(out, TF.one_hot(x.long(), 13))


def test_one_hot_of_topk_indices_dynamic_tokens():
    """The router's mask: one_hot of the top-k experts summed over k, from one trace for several T."""
    fn = compile_case(lambda m, x: m.sum(F.one_hot(m.topk(x, 2).indices, 8), 1),
                      [pypto.Tensor[[pypto.dynamic("T"), 8], pypto.float32]], backend="sim")
    for t in (1, 33):
        x = torch.randn(t, 8, generator=torch.Generator().manual_seed(t))
        assert torch.equal(fn(x), TF.one_hot(torch.topk(x, 2).indices, 8).sum(1))
    assert fn.trace_count == 1


# ------------------------------------------------------------------ bincount
@pytest.mark.parametrize("wdt", [None, torch.float32, torch.bfloat16])
def test_bincount_matches_torch(wdt):
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 9, (77,), generator=gen)            # many repeats, a tail of 77
    if wdt is None:
        out = pypto.jit(lambda x: pypto.bincount(x, minlength=12))(x)
        assert out.dtype == torch.int64 and torch.equal(out, torch.bincount(x, minlength=12))
        return
    w = torch.randn(77, generator=gen).to(wdt)
    out = pypto.jit(lambda x, w: x.bincount(w, minlength=12))(x, w)
    assert_close(out, torch.bincount(x, w.float(), minlength=12), torch.float32, factor=4.0, what="bincount")


def test_bincount_dynamic_length_one_trace():
    fn = compile_case(lambda m, x: m.bincount(x, minlength=64),
                      [pypto.Tensor[[pypto.dynamic("T")], pypto.int32]], backend="sim")
    for t in (1, 100, 600):
        x = torch.randint(0, 64, (t,), generator=torch.Generator().manual_seed(t), dtype=torch.int32)
        assert torch.equal(fn(x), torch.bincount(x.long(), minlength=64))
    assert fn.trace_count == 1


# ------------------------------------------------------------------ histc
@pytest.mark.parametrize("dtype", ANY)
def test_histc_matches_torch(dtype):
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(9, 13, generator=gen) * 2).to(dtype)
    x[0, :5] = torch.tensor([-1.0, 3.0, 0.0, 5.0, -7.0]).to(dtype)        # both edges, a bin edge, outside
    f = pypto.jit(lambda x: (pypto.histc(x, bins=8, min=-1, max=3), x.histc(5)))
    a, b = f(x)
    assert a.dtype == dtype
    assert torch.equal(a, torch.histc(x.float(), 8, -1, 3).to(dtype))
    assert torch.equal(b, torch.histc(x.float(), 5).to(dtype))           # min == max: the data's range


def test_histc_constant_input_widens_its_range():
    x = torch.full((6,), 2.0)
    assert torch.equal(pypto.jit(lambda x: pypto.histc(x, 4))(x), torch.histc(x, 4))


# ------------------------------------------------------------------ index_add
def _index_add_ref(x, dim, index, src, alpha=1):
    """fp32 sums rounded once (the decomposition's order; torch's fp16 kernel rounds after each add)."""
    if x.dtype.is_floating_point:
        return torch.index_add(x.float(), dim, index.long(), src.float(), alpha=alpha).to(x.dtype)
    return torch.index_add(x, dim, index.long(), src, alpha=alpha)


@pytest.mark.parametrize("dtype", ANY + (torch.int32,))
def test_index_add_matches_torch(dtype):
    gen = torch.Generator().manual_seed(3)

    def rand(*shape):
        t = torch.randn(shape, generator=gen) if dtype.is_floating_point else torch.randint(-5, 6, shape,
                                                                                          generator=gen)
        return t.to(dtype)
    x, src0, src1 = rand(10, 37), rand(23, 37), rand(10, 4)
    i0 = torch.randint(0, 10, (23,), generator=gen)                     # repeats add up
    i1 = torch.randint(0, 37, (4,), generator=gen, dtype=torch.int32)
    f = pypto.jit(lambda x, i0, s0, i1, s1: (pypto.index_add(x, 0, i0, s0, alpha=2), x.index_add(-1, i1, s1)))
    a, b = f(x, i0, src0, i1, src1)
    assert_close(a, _index_add_ref(x, 0, i0, src0, alpha=2), dtype, factor=4.0, what="index_add dim 0")
    assert_close(b, _index_add_ref(x, 1, i1, src1), dtype, what="index_add dim 1")


def test_index_add_in_place():
    gen = torch.Generator().manual_seed(4)
    x, src = torch.randn(3, 6, 5, generator=gen), torch.randn(3, 2, 5, generator=gen)
    index = torch.tensor([4, 1])

    def f(x, i, s):
        y = x * 1.0
        y.index_add_(1, i, s)
        return y
    assert_close(pypto.jit(f)(x, index, src), torch.index_add(x, 1, index, src), torch.float32)


# ------------------------------------------------------------------ all four on cpu, one compile
def test_counting_ops_on_cpu():
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(0, 6, (19,), generator=gen)
    x = torch.randn(19, generator=gen)
    base, src = torch.randn(6, 3, generator=gen).half(), torch.randn(19, 3, generator=gen).half()
    f = pypto.jit(lambda l, x, b, s: (F.one_hot(l, 6), pypto.bincount(l, x, minlength=6), pypto.histc(x, 4, -1, 1),
                                      pypto.index_add(b, 0, l, s)), backend="cpu")
    oh, bc, hc, ia = f(labels, x, base, src)
    assert torch.equal(oh, TF.one_hot(labels, 6))
    assert_close(bc, torch.bincount(labels, x, minlength=6), torch.float32, factor=4.0)
    assert torch.equal(hc, torch.histc(x, 4, -1, 1))
    assert_close(ia, _index_add_ref(base, 0, labels, src), torch.float16, factor=4.0)


# ------------------------------------------------------------------ labels out of range at run time
@pytest.mark.parametrize("backend", ["reference", "sim"])
@pytest.mark.parametrize("fn,labels", [
    (lambda l: F.one_hot(l, 8), [0, 3, 8, 1]),
    (lambda l: pypto.bincount(l, minlength=8), [0, 3, 8, 1]),
    (lambda l: pypto.index_add(pypto.zeros([8, 2]), 0, l, pypto.ones([4, 2])), [0, 3, -1, 1]),
    (lambda l: F.one_hot(l + 1, 8), [0, 3, 7, 1]),           # a computed label: counted by the run
], ids=["one_hot", "bincount", "index_add", "computed"])
def test_a_label_out_of_range_is_an_error(backend, fn, labels):
    f = pypto.jit(fn, backend=backend)
    with pytest.raises(pypto.IndexOutOfRangeError, match=r"outside the dim of size 8"):
        f(torch.tensor(labels))


# ------------------------------------------------------------------ the op table and bad input
CASES = [
    Case("one_hot", lambda m, x: (F if m is pypto else TF).one_hot(x.long() if m is torch else x, 24),
         [Inp((T, 3), "index:24", torch.int64)], dtypes=(torch.int64,)),
    Case("bincount", lambda m, x: m.bincount(x, minlength=24), [Inp((T,), "index:24", torch.int64)],
         dtypes=(torch.int64,)),
    Case("histc", lambda m, x: m.histc(x, 10, -2, 2), [Inp((T, 5), dtype=torch.float32)], dtypes=(torch.float32,)),
    Case("index_add", lambda m, x, i, s: m.index_add(x, 0, i, s),
         [Inp((24, 6)), Inp((T,), "index:24", torch.int64), Inp((T, 6))],
         ref=lambda m, x, i, s: _index_add_ref(x, 0, i, s), tol=4.0),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_case_table(case, dtype):
    run_case(case, dtype)


L = Inp((T,), "index:12", torch.int64)
ERRORS = [
    (lambda m, x: F.one_hot(x), [L], PyptoError, r"one_hot: num_classes must be given"),
    (lambda m, x: F.one_hot(x, 0), [L], TypeMismatchError, r"one_hot: num_classes must be a positive static int"),
    (lambda m, x: F.one_hot(x, 4), [Inp((T,))], DTypeError, r"one_hot: input must be int32 or int64, found float32"),
    (lambda m, x: m.bincount(x), [L], PyptoError, r"bincount: minlength must be a positive static int, found 0"),
    (lambda m, x: m.bincount(x, minlength=4), [Inp((T, 2), "index:4", torch.int64)], ShapeError,
     r"bincount: input must be 1-D"),
    (lambda m, x, w: m.bincount(x, w, minlength=12), [L, Inp((5,))], ShapeError, r"bincount: weights \[5\] must"),
    (lambda m, x: m.histc(x, 4), [Inp((T,), "int", torch.int32)], DTypeError, r"histc: input must be a floating"),
    (lambda m, x: m.histc(x, 4, 2, 1), [Inp((T,))], ShapeError, r"histc: max \(1\) must not be below min \(2\)"),
    (lambda m, x: m.histc(x, 0), [Inp((T,))], TypeMismatchError, r"histc: bins must be a positive static int"),
    (lambda m, x, i, s: m.index_add(x, 0, i, s), [Inp((12, 3)), Inp((T,)), Inp((T, 3))], DTypeError,
     r"index_add: index must be int32 or int64, found float32"),
    (lambda m, x, i, s: m.index_add(x, 0, i, s), [Inp((12, 3)), L, Inp((T, 4))], ShapeError,
     r"index_add: source must have shape \[T, 3\]"),
    (lambda m, x, i, s: m.index_add(x, 0, i, s), [Inp((12, 3)), L, Inp((T, 3), "int", torch.int32)], DTypeError,
     r"index_add: source \(int32\) must have the input's dtype \(float32\)"),
    (lambda m, x, i, s: m.index_add(x, 2, i, s), [Inp((12, 3)), L, Inp((T, 3))], ShapeError, r"index_add: dim 2"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)

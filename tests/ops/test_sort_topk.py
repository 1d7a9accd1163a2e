"""topk, sort and argsort vs torch eager on sim, cpu and reference: fp32 / fp16 / bf16 / int32, every dim,
k = 1 and k = n, tails (sizes that are not a multiple of a vector tile), ties (lower index first:
torch.sort's stable order, the reference for indices; torch.topk's values), a dynamic leading dim from
one trace, the router's shape, and bad input named at the user's line."""
import pytest
import torch

import pypto
from pypto.errors import ShapeError, SymbolicError, TypeMismatchError

from .op_testing import T, Case, Inp, case_params, check_error, compile_case, dynamic_params, run_case, run_dynamic

ANY = (torch.float32, torch.float16, torch.bfloat16)


def stable_topk(x, k, dim=-1, largest=True):
    """(values, indices) of the k best along dim, ties lower index first (an independent reference:
    torch's stable sort)."""
    s = torch.sort(x, dim=dim, descending=largest, stable=True)
    return s.values.narrow(dim, 0, k), s.indices.narrow(dim, 0, k)


def _check(out, x, k, dim=-1, largest=True):
    v, i = out
    rv, ri = stable_topk(x, k, dim, largest)
    assert v.dtype == x.dtype and i.dtype == torch.int64
    assert torch.equal(v, rv), "values differ from the stable sort's"
    assert torch.equal(i, ri), "indices differ from the stable sort's (ties: lower index first)"
    tv = torch.topk(x.float(), k, dim, largest).values.to(x.dtype)    # torch.topk's own values
    assert torch.equal(v, tv)


@pytest.mark.parametrize("backend", ["sim", "reference"])
@pytest.mark.parametrize("dtype", ANY)
def test_topk_matches_torch(backend, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 45, generator=gen).to(dtype)          # tails in both dims
    f = pypto.jit(lambda x: tuple(pypto.topk(x, 5)), backend=backend)
    _check(f(x), x, 5)


def test_topk_sort_argsort_on_cpu():
    """One compile (g++ is the cost): topk of bf16 with a tail, sort and argsort of fp16 with ties."""
    gen = torch.Generator().manual_seed(10)
    b = torch.randn(5, 37, generator=gen).bfloat16()
    c = torch.randint(-3, 4, (6, 19), generator=gen).half()
    f = pypto.jit(lambda b, c: (*b.topk(4, largest=False), *pypto.sort(c, dim=0), pypto.argsort(c, descending=True)),
                  backend="cpu")
    out = f(b, c)
    _check(out[0:2], b, 4, largest=False)
    _stable_sort_check(out[2:4], c, 0, False)
    assert torch.equal(out[4], torch.sort(c, dim=-1, descending=True, stable=True).indices)


def _stable_sort_check(out, x, dim, descending):
    v, i = out
    r = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert v.dtype == x.dtype and i.dtype == torch.int64
    assert torch.equal(v, r.values) and torch.equal(i, r.indices)


@pytest.mark.parametrize("dtype", ANY + (torch.int32,))
@pytest.mark.parametrize("dim,descending,shape", [
    (-1, False, (9, 37)),            # a tail of 37
    (0, True, (21, 5)),               # along dim 0
    (1, False, (2, 13, 3)),           # a middle dim
])
def test_sort_is_stable_and_matches_torch(dtype, dim, descending, shape):
    gen = torch.Generator().manual_seed(11)
    x = torch.randint(-4, 5, shape, generator=gen).to(dtype)           # ties everywhere
    if dtype.is_floating_point:
        x = x + (torch.rand(shape, generator=gen) > 0.5).to(dtype) * 0.5
    f = pypto.jit(lambda x: (*x.sort(dim=dim, descending=descending, stable=True),
                             x.argsort(dim=dim, descending=descending)))
    v, i, j = f(x)
    _stable_sort_check((v, i), x, dim, descending)
    assert torch.equal(j, i)


def test_sort_one_element_and_dynamic_leading_dim():
    fn = compile_case(lambda m, x: tuple(m.sort(x, descending=True)),
                      [pypto.Tensor[[pypto.dynamic("T"), 24], pypto.float16]], backend="sim")
    for t in (1, 5, 70):
        x = torch.randn(t, 24, generator=torch.Generator().manual_seed(t)).half()
        _stable_sort_check(fn(x), x, -1, True)
    assert fn.trace_count == 1
    x = torch.randn(6, 1)
    _stable_sort_check(pypto.jit(lambda x: tuple(pypto.sort(x)))(x), x, -1, False)


@pytest.mark.parametrize("k,dim,largest,shape", [
    (1, -1, True, (9, 20)),           # k = 1 (an argmax and its value)
    (20, -1, False, (9, 20)),         # k = n, smallest first: a full stable sort
    (3, 0, True, (33, 7)),            # along dim 0 (a tail of 33 rows)
    (4, 1, False, (3, 13, 6)),        # a middle dim
])
def test_topk_dims_and_k(k, dim, largest, shape):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen)
    f = pypto.jit(lambda x: tuple(x.topk(k, dim=dim, largest=largest, sorted=True)))
    _check(f(x), x, k, dim, largest)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_topk_ties_lower_index_first(dtype):
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-2, 3, (16, 24), generator=gen).to(dtype)       # many repeats in each row
    x[0] = 1                                                            # a row all equal
    x[1, :] = float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min
    x[1, 5] = 0                                                         # the rest tie at the lowest value
    for largest in (True, False):
        f = pypto.jit(lambda x: tuple(pypto.topk(x, 6, largest=largest)))
        _check(f(x), x, 6, largest=largest)


def test_topk_named_result_inside_the_trace():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, generator=gen)

    def route(x):
        r = pypto.topk(pypto.softmax(x, -1), 4)
        w = r.values / pypto.sum(r.values, -1, keepdim=True)
        return w, r.indices
    w, i = pypto.jit(route)(x)
    rv, ri = torch.topk(torch.softmax(x, -1), 4)
    torch.testing.assert_close(w, rv / rv.sum(-1, keepdim=True), rtol=1e-5, atol=1e-6)
    assert torch.equal(i, ri)


def test_topk_dynamic_leading_dim_one_trace():
    fn = compile_case(lambda m, x: tuple(m.topk(x, 8)), [pypto.Tensor[[pypto.dynamic("T"), 64], pypto.bfloat16]],
                      backend="sim")
    for t in (1, 7, 130):
        x = torch.randn(t, 64, generator=torch.Generator().manual_seed(t)).bfloat16()
        _check(fn(x), x, 8)
    assert fn.trace_count == 1


# the op table (tests/ops/test_registry.py checks every op is traced by one); reference backend, random data
CASES = [
    Case("topk", lambda m, x: tuple(m.topk(x, 3)), [Inp((T, 24))]),
    Case("topk_smallest_dim0", lambda m, x: tuple(m.topk(x, 2, dim=0, largest=False)), [Inp((5, T))],
         dynamic=False),
    Case("sort", lambda m, x: tuple(m.sort(x, dim=-1, descending=True)), [Inp((T, 20))],
         ref=lambda m, x: tuple(m.sort(x, dim=-1, descending=True, stable=True))),     # bf16 has ties
    Case("argsort", lambda m, x: m.argsort(x, dim=0), [Inp((9, T))], dynamic=False,
         ref=lambda m, x: m.argsort(x, dim=0, stable=True)),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_case_table(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params(CASES))
def test_case_table_dynamic(case):
    run_dynamic(case)


X = Inp((T, 12))
ERRORS = [
    (lambda m, x: m.topk(x, 13), [X], ShapeError, r"topk: k = 13 is out of range for dim 1 of size 12"),
    (lambda m, x: m.topk(x, 0), [X], ShapeError, r"expected 1 <= k <= 12"),
    (lambda m, x: m.topk(x, 2, dim=2), [X], ShapeError, r"topk: dim 2 is out of range"),
    (lambda m, x: m.topk(x, 2.0), [X], TypeMismatchError, r"topk: k must be a static int, found float"),
    (lambda m, x: m.topk(x, 2, dim=0), [X], SymbolicError, r"topk: dim 0 of \[T, 12\] has the dynamic size"),
    (lambda m, x: m.topk(x, 2), [Inp((T, 12), "bool")], TypeMismatchError, r"topk: expected a numeric tensor"),
    (lambda m, x: m.sort(x, dim=0), [X], SymbolicError, r"sort: dim 0 of \[T, 12\] has the dynamic size"),
    (lambda m, x: m.argsort(x, dim=-3), [X], ShapeError, r"sort: dim -3 is out of range"),
    (lambda m, x: m.sort(x), [Inp((T, 12), "bool")], TypeMismatchError, r"sort: expected a numeric tensor"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)

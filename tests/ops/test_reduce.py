"""Reductions and scans vs torch eager: every dim form (int, tuple, None, negative), keepdim, dtypes,
dynamic sizes from one trace, loops over row blocks with tails, decompositions, and user errors."""
import pytest
import torch

import pypto
from pypto.errors import DTypeError, ShapeError, TypeMismatchError
from pypto.ops import REGISTRY

from .op_testing import (T, Case, Inp, assert_close, case_params, check_error, compile_case, dynamic_params,
                         run_case, run_dynamic)

X = Inp((T, 24))
X3 = Inp((4, T, 6))
INT = (torch.int32,)

CASES = [
    Case("sum_last", lambda m, x: m.sum(x, -1), [X]),
    Case("sum_keepdim", lambda m, x: x.sum(dim=1, keepdim=True), [X]),
    Case("sum_all", lambda m, x: m.sum(x), [X]),
    Case("sum_dim0", lambda m, x: x.sum(0), [X]),
    Case("sum_tuple_negative", lambda m, x: m.sum(x, (0, -1)), [X3]),
    Case("sum_middle_keepdim", lambda m, x: m.sum(x, -2, keepdim=True), [X3]),
    Case("sum_to_f32", lambda m, x: m.sum(x, -1, dtype=m.float32), [X]),
    Case("sum_int_widens", lambda m, x: m.sum(x, 0), [Inp((T, 5), "int")], dtypes=INT),
    Case("mean_last_keepdim", lambda m, x: x.mean(-1, keepdim=True), [X]),
    Case("mean_tuple", lambda m, x: m.mean(x, (0, 2)), [X3]),
    Case("mean_all", lambda m, x: x.mean(), [X3]),
    Case("amax_middle", lambda m, x: m.amax(x, -2), [X3]),
    Case("amax_keepdim", lambda m, x: x.amax(-1, keepdim=True), [X]),
    Case("amin_tuple", lambda m, x: m.amin(x, (1, 2)), [X3]),
    Case("amin_all", lambda m, x: m.amin(x), [X]),
    Case("prod_last", lambda m, x: m.prod(x, -1), [Inp((T, 6), "positive")]),
    Case("prod_tuple", lambda m, x: m.prod(x, (0, 2)), [Inp((3, T, 4), "positive")],
         ref=lambda m, x: x.float().prod(2).prod(0).to(x.dtype)),
    Case("var_last", lambda m, x: x.var(-1), [X]),
    Case("var_tuple_correction0_keepdim", lambda m, x: m.var(x, (0, 2), keepdim=True, correction=0), [X3]),
    Case("var_unbiased_false", lambda m, x: x.var(1, False), [X]),
    Case("var_all", lambda m, x: m.var(x), [X3]),
    Case("argmax_last", lambda m, x: x.argmax(-1), [X]),
    Case("argmax_flat", lambda m, x: m.argmax(x), [X3]),
    Case("argmax_keepdim", lambda m, x: m.argmax(x, 0, keepdim=True), [X]),
    Case("argmin_middle", lambda m, x: m.argmin(x, 1), [X3]),
    Case("max_dim_pair", lambda m, x: tuple(m.max(x, 1, keepdim=True)), [X]),
    Case("max_values", lambda m, x: x.max(-1).values, [X3]),
    Case("max_all", lambda m, x: x.max(), [X]),
    Case("max_two_tensors", lambda m, x, y: m.max(x, y), [X, Inp((1, 24))]),
    Case("min_dim_indices", lambda m, x: x.min(0).indices, [X]),
    Case("min_dim_index1", lambda m, x: m.min(x, -1)[1], [X3]),
    Case("min_two_tensors", lambda m, x, y: x.min(y), [X, Inp((T, 1))]),
    Case("cumsum_last", lambda m, x: m.cumsum(x, -1), [X]),
    Case("cumsum_dim0", lambda m, x: x.cumsum(0), [X3]),
    Case("cumsum_int_widens", lambda m, x: x.cumsum(1), [Inp((T, 5), "int")], dtypes=INT),
    Case("cumsum_to_f32", lambda m, x: m.cumsum(x, -1, dtype=m.float32), [X]),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_reduction_matches_torch(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params(CASES))
def test_reduction_dynamic_sizes_one_trace(case):
    run_dynamic(case)


def test_row_block_loop_with_tail():
    """Row sums and maxima written block by block from a pypto.loop; T is not a multiple of 16."""
    @pypto.jit(backend="reference")
    def rows(x: pypto.Tensor[[pypto.DYNAMIC, 32], pypto.float16], s: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float16],
             mx: pypto.Tensor[[pypto.DYNAMIC], pypto.float16]):
        n = x.shape[0]
        for i in pypto.loop(pypto.ceildiv(n, 16)):
            block = x[i * 16:(i + 1) * 16, :]
            s[i * 16:(i + 1) * 16, :] = block.sum(-1, keepdim=True)
            mx[i * 16:(i + 1) * 16] = pypto.amax(block, 1)

    for t in (1, 7, 64, 1000):
        x = torch.randn(t, 32, dtype=torch.float16)
        s, mx = torch.zeros(t, 1, dtype=torch.float16), torch.zeros(t, dtype=torch.float16)
        rows(x, s, mx)
        assert_close(s, x.sum(-1, keepdim=True), torch.float16)
        assert_close(mx, x.amax(1), torch.float16)
    assert rows.trace_count == 1


# composites: their decomposition into primitives must agree with torch too
DECOMPOSED = [
    ("mean", {"dims": (0, 1), "keepdim": False}, [X], lambda x: x.mean((0, 1))),
    ("mean", {"dims": (1,), "keepdim": True}, [X3], lambda x: x.mean(1, keepdim=True)),
    ("var", {"dims": (1,), "keepdim": False, "correction": 1}, [X], lambda x: x.var(1)),
    ("var", {"dims": (0, 2), "keepdim": True, "correction": 0}, [X3], lambda x: x.var((0, 2), correction=0,
                                                                                        keepdim=True)),
    ("argmin", {"dim": 1, "keepdim": False}, [X], lambda x: x.argmin(1)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op,attrs,inputs,ref", DECOMPOSED, ids=[f"{d[0]}{i}" for i, d in enumerate(DECOMPOSED)])
def test_decomposition_matches_torch(op, attrs, inputs, ref, dtype):
    f = run_case(Case(op, lambda m, *xs: REGISTRY[op].decompose(m, list(xs), attrs) if m is pypto else ref(*xs),
                      inputs), dtype)
    graph = next(iter(f.cache.values())).graph
    used = {graph.op(n) for n in graph.nodes()}
    assert op not in used and all(REGISTRY[o].decompose is None for o in used - {"input"})


ERRORS = [
    (lambda m, x: m.sum(x, 2), [X], ShapeError, r"sum: dim 2 is out of range .*expected -2 <= dim < 2"),
    (lambda m, x: m.amax(x, (1, -1)), [X], ShapeError, r"amax: dim \[1, -1\] names the same dim twice"),
    (lambda m, x: x.mean(1.0), [X], ShapeError, r"mean: dim must be an int, found float"),
    (lambda m, x: m.mean(x, 0), [Inp((T, 4), "int", torch.int32)], DTypeError, r"mean: expected a floating tensor"),
    (lambda m, x: x.var(-1), [Inp((T, 4), "int", torch.int32)], DTypeError, r"var: expected a floating tensor .*int32"),
    (lambda m, x: m.sum([1.0, 2.0]), [X], TypeMismatchError, r"pypto.sum: expected a pypto.Tensor .*found list"),
    (lambda m, x: m.argmax(x, -3), [X], ShapeError, r"argmax: dim -3 is out of range"),
    (lambda m, x: m.cumsum(x, 5), [X3], ShapeError, r"cumsum: dim 5 is out of range"),
    (lambda m, x: m.max(x, 0, keepdim=True).values + m.ones(3, 5), [X], ShapeError, r"cannot broadcast"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[e[3][:24] for e in ERRORS])
def test_reduction_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)


def test_max_indices_are_traced_only_when_used():
    f = compile_case(lambda m, x: m.max(x, -1).values, [pypto.Tensor[[4, 8], pypto.float32]])
    g = f.trace(torch.randn(4, 8))
    assert [g.op(n) for n in g.nodes()] == ["input", "amax"]


def test_size_min_max_still_work_on_sizes():
    n = pypto.dynamic("n")
    assert pypto.min(64, 100) == 64 and pypto.max(3, 9, 4) == 9
    assert str(pypto.min(64, n)) == "Min(64, n)"

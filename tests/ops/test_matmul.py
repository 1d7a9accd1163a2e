"""matmul (2-D, batched, broadcast batch, 1-D operands, a_trans/b_trans, out_dtype, int8) and linear vs
torch eager; dynamic M from one trace; the linear decomposition; user errors."""
import inspect

import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto.errors import DTypeError, ShapeError, TypeMismatchError
from pypto.ops import REGISTRY

from .op_testing import T, Case, Inp, case_params, check_error, dynamic_params, run_case, run_dynamic

CASES = [
    Case("mm_2d", lambda m, a, b: m.matmul(a, b), [Inp((T, 32)), Inp((32, 24))]),
    Case("matmul_operator", lambda m, a, b: a @ b, [Inp((T, 16)), Inp((16, 8))]),
    Case("batched", lambda m, a, b: m.matmul(a, b), [Inp((3, T, 16)), Inp((3, 16, 8))]),
    Case("broadcast_batch", lambda m, a, b: a @ b, [Inp((2, 1, T, 16)), Inp((3, 16, 8))]),
    Case("batch_times_2d", lambda m, a, b: a.matmul(b), [Inp((4, T, 16)), Inp((16, 8))]),
    Case("vector_matrix", lambda m, a, b: m.matmul(a, b), [Inp((16,)), Inp((2, 16, T))]),
    Case("matrix_vector", lambda m, a, b: m.matmul(a, b), [Inp((T, 16)), Inp((16,))]),
    Case("dot", lambda m, a, b: m.matmul(a, b), [Inp((T,)), Inp((T,))]),
    Case("a_trans", lambda m, a, b: m.matmul(a, b, a_trans=True) if m is pypto else a.mT @ b,
         [Inp((16, T)), Inp((16, 8))]),
    Case("b_trans", lambda m, a, b: m.matmul(a, b, b_trans=True) if m is pypto else a @ b.mT,
         [Inp((T, 16)), Inp((8, 16))]),
    Case("both_trans_batched", lambda m, a, b: m.matmul(a, b, a_trans=True, b_trans=True) if m is pypto
         else a.mT @ b.mT, [Inp((2, 16, T)), Inp((2, 8, 16))]),
    Case("out_f32", lambda m, a, b: m.matmul(a, b, m.float32) if m is pypto else (a.float() @ b.float()),
         [Inp((T, 32)), Inp((32, 8))]),
    Case("mm", lambda m, a, b: m.mm(a, b), [Inp((T, 8)), Inp((8, 4))]),
    Case("bmm", lambda m, a, b: a.bmm(b), [Inp((2, T, 8)), Inp((2, 8, 4))]),
    Case("int8_to_int32", lambda m, a, b: m.matmul(a, b) if m is pypto else a.int() @ b.int(),
         [Inp((T, 16), "int", torch.int8), Inp((16, 4), "int", torch.int8)], dtypes=(torch.int8,)),
    # linear rounds the matmul to the input dtype before adding the bias: 2x the dtype's tolerance
    Case("linear_bias", lambda m, x, w, b: m.linear(x, w, b) if m is pypto else F.linear(x, w, b),
         [Inp((T, 32)), Inp((24, 32)), Inp((24,))], tol=2),
    Case("linear_3d_no_bias", lambda m, x, w: m.linear(x, w) if m is pypto else F.linear(x, w),
         [Inp((2, T, 32)), Inp((24, 32))]),
    Case("linear_vector", lambda m, x, w, b: m.linear(x, w, b) if m is pypto else F.linear(x, w, b),
         [Inp((32,)), Inp((T, 32)), Inp((T,))], tol=2),
]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_matmul_matches_torch(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params(CASES))
def test_matmul_dynamic_sizes_one_trace(case):
    run_dynamic(case)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_linear_decomposition_matches_torch(dtype):
    case = Case("linear", lambda m, x, w, b: REGISTRY["linear"].decompose(m, [x, w, b], {}) if m is pypto
                else F.linear(x, w, b), [Inp((T, 32)), Inp((16, 32)), Inp((16,))], tol=2)
    f = run_case(case, dtype)
    g = next(iter(f.cache.values())).graph
    assert [g.op(n) for n in g.nodes() if g.op(n) != "input"] == ["matmul", "add"]


def test_matmul_records_cube_unit_and_flops():
    op = REGISTRY["matmul"]
    assert op.unit == "cube"
    f = pypto.jit(lambda a, b: a @ b, backend="reference")
    g = f.trace(torch.randn(2, 8, 16), torch.randn(16, 4))
    mm = next(n for n in g.nodes() if g.op(n) == "matmul")
    node = g.node(mm)
    from pypto.ops.registry import op_flops
    assert op_flops(op, [g.info(i) for i in node["inputs"]], node["attrs"], node["out"]) == 2 * 2 * 8 * 4 * 16


K = pypto.dynamic("K")
ERRORS = [
    (lambda m, a, b: m.matmul(a, b), [Inp((T, 16)), Inp((12, 8))], ShapeError,
     r"matmul: inner dimensions differ: \[T, 16\] has K=16 but \[12, 8\] has K=12"),
    (lambda m, a, b: a @ b, [Inp((T, 16)), Inp((8, 16))], ShapeError, r"\[8, 16\] has K=8"),
    (lambda m, a, b: m.matmul(a, b, b_trans=True), [Inp((T, 16)), Inp((16, 8))], ShapeError,
     r"\[16, 8\] \(b_trans\) has K=8"),
    (lambda m, a, b: m.matmul(a, b), [Inp((2, T, 16)), Inp((3, 16, 8))], ShapeError, r"batch dims .* do not broadcast"),
    (lambda m, a, b: m.matmul(a, b), [Inp((T, 16)), Inp((16, 8), dtype=torch.float16)], DTypeError,
     r"both operands must have one dtype, found float32 and float16"),
    (lambda m, a, b: m.matmul(a, b, m.float16), [Inp((T, 16)), Inp((16, 8))], DTypeError,
     r"out_dtype float16 is not available for float32 operands"),
    (lambda m, a, b: m.matmul(a, b), [Inp((T, 4), "int", torch.int32), Inp((4, 2), "int", torch.int32)], DTypeError,
     r"operands must be one of .*found int32"),
    (lambda m, a, b: m.matmul(a, 2.0), [Inp((T, 16)), Inp((16, 8))], TypeMismatchError,
     r"pypto.matmul: expected a pypto.Tensor for 'other', found float"),
    (lambda m, x, w: m.linear(x, w), [Inp((T, 16)), Inp((8, 12))], ShapeError, r"linear: inner dimensions differ"),
    (lambda m, x, w, b: m.linear(x, w, b), [Inp((T, 16)), Inp((8, 16)), Inp((5,))], ShapeError,
     r"linear: bias \[5\] does not broadcast"),
    (lambda m, a, b: m.mm(a, b), [Inp((2, T, 16)), Inp((16, 8))], ShapeError, r"mm: expected two 2-D tensors"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_matmul_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)


def test_dynamic_k_mismatch_is_an_error():
    @pypto.jit(backend="reference")
    def f(a: pypto.Tensor[[8, pypto.dynamic("K")], pypto.float32],
          b: pypto.Tensor[[pypto.dynamic("J"), 4], pypto.float32]):
        return a @ b                                     # K and J may differ: rejected at trace time
    with pytest.raises(ShapeError, match="dynamic K must be the same symbol") as e:
        f(torch.randn(8, 5), torch.randn(5, 4))
    lines, start = inspect.getsourcelines(f.fn)
    assert e.value.loc.line == start + next(i for i, text in enumerate(lines) if "return a @ b" in text)

"""Elementwise ops vs torch eager: every unary and binary op of the registry's tables, broadcasting,
Python-scalar operands on either side, comparisons, logical ops, where, clip, casts, dtype promotion;
dynamic sizes from one trace; user errors."""
import pytest
import torch
import torch.nn.functional as F

import pypto
from pypto.errors import DTypeError, PyptoError, ShapeError, TypeMismatchError
from pypto.ops.registry import ops_of_form

from .op_testing import T, Case, Inp, case_params, check_error, dynamic_params, run_case, run_dynamic

X = Inp((T, 24))
POS = Inp((T, 24), "positive")
ROW = Inp((1, 24))
MASK = Inp((T, 24), "bool")
INT = (torch.int32,)

# ops whose input must be positive; torch spellings that live in torch.nn.functional
DOMAIN = {"log", "log1p", "log2", "sqrt", "rsqrt"}
UNARY_NAMES = [op.name for op in ops_of_form("unary")]
BINARY_NAMES = [op.name for op in ops_of_form("binary") + ops_of_form("comparison")]
TORCH_NAME = {"silu": F.silu, "softplus": F.softplus}
UNARY_CASES = [
    Case(f"unary_{n}", (lambda n: lambda m, x: getattr(m, n)(x))(n), [POS if n in DOMAIN else X],
         ref=(lambda n: lambda m, x: TORCH_NAME[n](x))(n) if n in TORCH_NAME else None)
    for n in UNARY_NAMES
]
BINARY_CASES = [
    Case(f"binary_{n}_broadcast", (lambda n: lambda m, x, y: getattr(m, n)(x, y))(n),
         [POS if n in ("pow", "remainder") else X, Inp((24,), "positive") if n in ("pow", "remainder", "div")
          else ROW])
    for n in BINARY_NAMES if n not in ("logical_and", "logical_or")
]
CASES = UNARY_CASES + BINARY_CASES + [
    Case("gelu_exact", lambda m, x: m.gelu(x) if m is pypto else F.gelu(x), [X]),
    Case("gelu_tanh", lambda m, x: m.gelu(x, approximate="tanh") if m is pypto else F.gelu(x, approximate="tanh"),
         [X]),
    Case("scalar_right", lambda m, x: (x + 2, x - 0.5, x * 3, x / 4.0, x ** 2, x % 1.5), [X]),
    Case("scalar_left", lambda m, x: (2 + x, 0.5 - x, 3 * x, 4.0 / x, 2 ** x), [POS]),
    Case("operators", lambda m, x, y: (-x, abs(x), x @ y.mT, x > y, x <= 0.0, x == y, x != 0.25), [X, ROW]),
    Case("promote_f32", lambda m, x, y: (x + y, x * y), [X, Inp((24,), dtype=torch.float32)]),
    Case("logical", lambda m, a, b: (m.logical_and(a, b), a | b, ~a, m.logical_or(a, b), a & b), [MASK, MASK],
         dtypes=(torch.bool,)),
    Case("where_tensors", lambda m, c, x, y: m.where(c, x, y), [MASK, X, ROW]),
    Case("where_scalars", lambda m, c, x: (m.where(c, x, 0.0), m.where(c, 1.5, x)), [MASK, X]),
    Case("clip_both", lambda m, x: m.clip(x, -0.5, 0.5) if m is pypto else x.clamp(-0.5, 0.5), [X]),
    Case("clamp_min_method", lambda m, x: x.clamp(min=0.1), [X]),
    Case("casts", lambda m, x: (x.to(m.float16), x.float(), x.bfloat16(), x.int(), x.to(m.int8).to(m.float32)),
         [X]),
    Case("int_ops", lambda m, x, y: (x + y, x * 3, -x, abs(x), x.sign(), m.maximum(x, y), x - y, x > y),
         [Inp((T, 8), "int"), Inp((1, 8), "int")], dtypes=INT),
    Case("int_div_is_float", lambda m, x, y: x / y, [Inp((T, 8), "int"), Inp((8,), "positive")], dtypes=INT),
]

@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_elementwise_matches_torch(case, dtype):
    run_case(case, dtype)


@pytest.mark.parametrize("case", dynamic_params(CASES))
def test_elementwise_dynamic_sizes_one_trace(case):
    run_dynamic(case, case.dtypes[0] if case.dtypes[0] in (torch.bool, torch.int32) else torch.float32)


ERRORS = [
    (lambda m, x, y: x + y, [X, Inp((T, 5))], ShapeError, r"cannot broadcast shapes \[T, 24\] and \[T, 5\]"),
    (lambda m, x, y: x * y, [X, Inp((3, 24))], ShapeError, r"dimension -2 is T in one and 3 in another"),
    (lambda m, x: m.add(1, 2), [X], TypeMismatchError, r"at least one operand must be a pypto.Tensor"),
    (lambda m, x: m.exp("x"), [X], TypeMismatchError, r"pypto.exp: expected a pypto.Tensor .*found str"),
    (lambda m, x: m.where(x, x, x), [X], DTypeError, r"where: condition must be bool, found f32"),
    (lambda m, x: m.clip(x), [X], PyptoError, r"clip: at least one of min and max"),
    (lambda m, x: m.gelu(x, approximate="fast"), [X], PyptoError, r"approximate must be 'none' or 'tanh'"),
    (lambda m, x: x.to("complex"), [X], DTypeError, r"expected a pypto dtype, found 'complex'"),
]


@pytest.mark.parametrize("fn,inputs,exc,match", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_elementwise_errors_name_the_user_line(fn, inputs, exc, match):
    check_error(fn, inputs, exc, match)


def test_dynamic_dims_of_different_symbols_do_not_broadcast():
    @pypto.jit(backend="reference")
    def f(x: pypto.Tensor[[pypto.dynamic("A"), 4], pypto.float32],
          y: pypto.Tensor[[pypto.dynamic("B"), 4], pypto.float32]):
        return x + y
    with pytest.raises(ShapeError, match="dynamic sizes must be the same symbol"):
        f(torch.randn(3, 4), torch.randn(3, 4))

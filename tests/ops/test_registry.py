"""The registry as a whole: every op is exercised by a case table, declares a known unit and (where it
names one) a real PTO instruction, and every composite has a decomposition."""
import pytest
import torch

from pypto.ir.isa import ISA
from pypto.ops import REGISTRY

from . import test_elementwise, test_matmul, test_norm, test_reduce, test_shape
from .op_testing import compile_case, make_input, spec_of, traced_ops

TABLES = (test_elementwise, test_reduce, test_matmul, test_shape, test_norm)
UNITS = {"vector", "cube", "aicpu", "none"}
COMPOSITES = {"mean", "var", "argmin", "linear", "softmax", "log_softmax", "rms_norm", "layer_norm", "l2norm"}


def _ops_of_all_cases() -> set:
    seen = set()
    for module in TABLES:
        for case in module.CASES:
            dtype = case.dtypes[0]
            gen = torch.Generator().manual_seed(0)
            f = compile_case(case.fn, [spec_of(i, dtype, dynamic=False) for i in case.inputs])
            f.trace(*[make_input(i, dtype, 5, gen) for i in case.inputs])
            seen |= traced_ops(f)
    return seen


def test_every_registered_op_is_exercised_by_a_case():
    missing = set(REGISTRY) - _ops_of_all_cases()
    assert not missing, f"ops without a test case: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_op_declaration(name):
    op = REGISTRY[name]
    assert op.unit in UNITS
    for key in ("pto", "pto_col", "pto_row", "pto_acc"):
        instr = op.pto if key == "pto" else op.extra.get(key)
        assert instr is None or instr in ISA, f"{name}.{key} = {instr} is not a PTO instruction"
    assert (op.decompose is not None) == (name in COMPOSITES)

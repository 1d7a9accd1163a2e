"""The registry as a whole: every op is exercised by a case table, declares a known unit and (where it
names one) a real PTO instruction that the vector lowering emits for it, and every composite has a
decomposition."""
import pytest
import torch

import pypto
from pypto.ir.isa import ISA
from pypto.passes.vector_rules import SPECIAL_RULES
from pypto.ops import REGISTRY

from . import test_counting, test_elementwise, test_matmul, test_norm, test_reduce, test_shape, test_sort_topk
from .op_testing import compile_case, make_input, spec_of, traced_ops

TABLES = (test_elementwise, test_reduce, test_matmul, test_shape, test_norm, test_sort_topk, test_counting)
UNITS = {"vector", "cube", "aicpu", "none"}
COMPOSITES = {"mean", "var", "argmin", "linear", "softmax", "log_softmax", "rms_norm", "layer_norm", "l2norm",
              "log2", "trunc", "floor_divide", "topk", "argsort", "one_hot", "bincount", "histc", "index_add"}


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


# a pl / pt kernel called in a traced function: exercised by tests/frontend/test_kernel_node.py
KERNEL_NODE_OPS = {"custom_kernel", "kernel_result"}


def test_every_registered_op_is_exercised_by_a_case():
    missing = set(REGISTRY) - _ops_of_all_cases() - KERNEL_NODE_OPS
    assert not missing, f"ops without a test case: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_op_declaration(name):
    op = REGISTRY[name]
    assert op.unit in UNITS
    assert op.pto is None or op.pto in ISA, f"{name}.pto = {op.pto} is not a PTO instruction"
    # pto names the instruction of the generic one-instruction rule; no op has both it and a rule of its own
    assert op.pto is None or (op.form is not None and name not in SPECIAL_RULES), name
    assert (op.decompose is not None) == (name in COMPOSITES)
    if op.form is not None:      # generated frontend function and Tensor method, with the registry's doc
        assert getattr(pypto, name).__doc__ == op.doc and callable(getattr(pypto.Tensor, name))

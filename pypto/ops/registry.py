"""The op registry: every op is declared once, with its meaning as data. It is the one list of op
names: the frontend functions and Tensor methods of elementwise ops, their torch.compile rules and
the vector lowering's one-instruction rules are generated from it.

An ``OpDef`` holds: the op's name and family; ``infer`` (symbolic shape and dtype inference over
the inputs' ValueInfo and the attrs, raising pypto errors on bad input); ``ref`` (the reference
semantics on torch CPU tensors, attrs already evaluated to ints); ``unit`` (which core executes
it: vector, cube, aicpu, or none for pure views/metadata); ``form`` (how an elementwise op without
attrs is called, so that its frontend function, Tensor method and torch.compile rule are generated:
see FORMS); ``pto`` (the PTO instruction that computes it tile-wise, for elementwise ops the vector
lowering maps onto one instruction; other ops are lowered by their own rule in
passes/vector_rules.py or passes/cube_tiling.py); ``decompose`` (composites: their definition in
primitive ops, applied by the decomposition pass before tiling); ``flops`` (FLOPs per output element,
for cost and roofline).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import PyptoError


@dataclass
class OpDef:
    name: str
    family: str
    infer: Callable            # (inputs: list[ValueInfo], attrs: dict) -> ValueInfo
    ref: Callable              # (inputs: list[torch.Tensor], attrs: dict) -> torch.Tensor
    unit: str = "vector"       # vector | cube | aicpu | none
    flops: float = 1.0         # per output element (matmul declares its own in the lowering)
    num_inputs: int | None = None   # None = variadic
    doc: str = ""
    form: str | None = None    # one of FORMS, or None: the frontend function is hand-written
    pto: str | None = None     # the one PTO instruction the vector lowering emits for it (TEXP, TADD, TCMP...)
    # composite ops: (P, inputs: list[Tensor], attrs) -> Tensor, traced with the frontend functions P
    # (pypto.frontend.api, passed in by passes/decompose.py: ops sit below the frontend)
    decompose: Callable | None = None
    # total FLOPs of one application when not flops x numel(out) (reductions, matmul):
    # (inputs: list[ValueInfo], attrs, out: ValueInfo) -> int or sympy expression
    flops_fn: Callable | None = None


# how an op with a ``form`` is called: f(x); f(input, other) with broadcasting and Python-scalar
# operands (result in the promoted dtype); or a comparison (the same call, operands compared in their
# common dtype, a bool result: eq, lt, logical_and...)
FORMS = ("unary", "binary", "comparison")

REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name} registered twice")
    if op.form is not None and op.form not in FORMS:
        raise ValueError(f"op {op.name}: form {op.form!r} is not one of {FORMS}")
    REGISTRY[op.name] = op
    return op


def numel(shape):
    n = 1
    for d in shape:
        n = n * d
    return n


def op_flops(op: OpDef, inputs: list, attrs: dict, out) -> object:
    """Total FLOPs of one application of ``op`` (symbolic when sizes are)."""
    if op.flops_fn is not None:
        return op.flops_fn(inputs, attrs, out)
    return op.flops * numel(out.shape)


def ops_of_form(form: str) -> list[OpDef]:
    """The registered ops called as ``form`` (see FORMS), in registration order."""
    return [op for op in REGISTRY.values() if op.form == form]


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise PyptoError(f"unknown op '{name}'") from None

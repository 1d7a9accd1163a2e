"""The op registry: every op is declared once, with its meaning as data.

An ``OpDef`` holds: the op's name and family; ``infer`` (symbolic shape and dtype inference over
the inputs' ValueInfo and the attrs, raising pypto errors on bad input); ``ref`` (the reference
semantics on torch CPU tensors, attrs already evaluated to ints); ``unit`` (which core executes
it: vector, cube, aicpu, or none for pure views/metadata); ``pto`` (the PTO instruction that
computes it on tiles, for ops that map onto one); ``decompose`` (composites: their definition in
primitive ops, applied by the decomposition pass before tiling); ``flops`` (FLOPs per output element,
for cost and roofline); and the slots filled by the tiling/lowering layer (``tiling``, ``lower``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
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
    pto: str | None = None     # the PTO instruction that computes it tile-wise (elementwise: TEXP, TADD...)
    decompose: Callable | None = None   # composite ops: (inputs: list[Tensor], attrs) -> Tensor, traced
    tiling: object = None      # how an output tile maps to input tiles (filled by passes/tiling)
    lower: object = None       # Block IR lowering (filled by the lowering layer)
    extra: dict = field(default_factory=dict)
    # total FLOPs of one application when not flops x numel(out) (reductions, matmul):
    # (inputs: list[ValueInfo], attrs, out: ValueInfo) -> int or sympy expression
    flops_fn: Callable | None = None


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name} registered twice")
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


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise PyptoError(f"unknown op '{name}'") from None

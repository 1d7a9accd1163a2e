"""Decompose composite ops into primitive ops.

IR in: a TensorGraph that may hold composite ops (those whose registry entry has ``decompose``:
softmax, rms_norm, linear, mean, var, log2...). IR out: an equivalent TensorGraph without any, loop
bodies included; a composite may use another, so the rewrite repeats until none is left (at most
MAX_ROUNDS times). Each composite's meaning stays in its registry entry, written against the
frontend functions that this pass passes in (``decompose(P, inputs, attrs)``): pypto/ops sits below
the frontend and does not import it.
"""
from __future__ import annotations

from ..errors import CompileError
from ..frontend import api
from ..ir.tensor_graph import TensorGraph
from ..ops.registry import get_op
from .rewrite import rebuild

MAX_ROUNDS = 8


def has_composites(g: TensorGraph) -> bool:
    for nid in g.nodes():
        op = g.op(nid)
        if op == "loop" and has_composites(g.node(nid)["attrs"]["body"]):
            return True
        if op not in ("input", "loop", "loop_result") and get_op(op).decompose is not None:
            return True
    return False


def _rewrite(g, nid, ins):
    od = get_op(g.op(nid))
    if od.decompose is None:
        return None
    return od.decompose(api, ins, dict(g.node(nid)["attrs"]))


def decompose(g: TensorGraph) -> TensorGraph:
    for _ in range(MAX_ROUNDS):
        if not has_composites(g):
            return g
        g = rebuild(g, _rewrite)
    if has_composites(g):
        raise CompileError(f"internal: composite ops are left after {MAX_ROUNDS} rounds of decomposition "
                           "(a decomposition that uses itself?)")
    return g

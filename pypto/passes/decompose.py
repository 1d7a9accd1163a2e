"""Decompose composite ops (OpDef.decompose: softmax, rms_norm, linear, mean, var...) into primitive
ops, repeatedly until none is left (a composite may use another)."""
from __future__ import annotations

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
    return od.decompose(ins, dict(g.node(nid)["attrs"]))


def decompose(g: TensorGraph) -> TensorGraph:
    for _ in range(MAX_ROUNDS):
        if not has_composites(g):
            return g
        g = rebuild(g, _rewrite)
    return g

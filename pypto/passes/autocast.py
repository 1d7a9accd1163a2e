"""Autocast: vector math in a dtype the vector unit computes natively.

The a2a3 vector unit has no bf16 arithmetic (bf16 is a storage format there: loads, stores, moves,
selects and conversions): a vector op on bf16 values runs on their fp32 form and rounds once to
bf16 — exactly what the reference computes (torch's bf16 ops compute in fp32 and round per op), so
the rewrite changes the instructions, not the numbers. Ops that only move data keep their dtype.
"""
from __future__ import annotations

from .. import dtypes
from ..frontend import api as P
from ..ir.tensor_graph import TensorGraph
from ..ops.registry import get_op
from .iterspace import op_class
from .rewrite import rebuild

COMPUTE_IN = {dtypes.bfloat16: dtypes.float32}          # storage dtype -> the dtype its math runs in
DATA_MOVEMENT = {"cast", "where", "copy", "full", "arange", "tril", "triu", "assemble", "concat", "pad",
                 "fillpad", "gather", "index_select", "scalar", "constant"}


def _needs(g, nid) -> bool:
    op = g.op(nid)
    if op in DATA_MOVEMENT or op_class(g, nid) not in ("ew", "reduce", "scan"):
        return False
    if get_op(op).unit != "vector":
        return False
    values = [g.info(nid)] + [g.info(i) for i in g.node(nid)["inputs"]]
    return any(v.dtype in COMPUTE_IN for v in values)


def _widen(t):
    if t.dtype not in COMPUTE_IN:
        return t
    node = t._graph.node(t._node)
    if node["op"] == "scalar":              # a constant operand: the same number in the wide dtype
        return P.scalar(node["attrs"]["value"], COMPUTE_IN[t.dtype])
    return P.cast(t, COMPUTE_IN[t.dtype])


def _rewrite(g, nid, ins):
    if not _needs(g, nid):
        return None
    wide = [_widen(t) for t in ins]
    attrs = dict(g.node(nid)["attrs"])
    if attrs.get("dtype") in COMPUTE_IN:
        attrs["dtype"] = COMPUTE_IN[attrs["dtype"]]
    out = P.emit(g.op(nid), wide, attrs)
    want = g.info(nid).dtype
    return out if out.dtype == want else P.cast(out, want)


def autocast(g: TensorGraph) -> TensorGraph:
    if not any(_needs(g, n) for n in g.nodes()) and not any(g.op(n) == "loop" for n in g.nodes()):
        return g
    return rebuild(g, _rewrite)

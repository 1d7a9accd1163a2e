"""Rebuilding a TensorGraph through the tracing machinery, so rewrites are written as pypto code.

``rebuild(g, rewrite)`` re-creates every node needed by the outputs (dead nodes drop out) in a new
graph; ``rewrite(g, nid, inputs)`` may return a Tensor built with pypto functions to replace node
``nid`` (its inputs already rebuilt), or None to copy the node as it is. Nodes a rewrite creates
take the replaced node's source location and tiling hints. Loop bodies are rebuilt recursively.
"""
from __future__ import annotations

from ..frontend import context as ctx
from ..frontend import hints
from ..frontend.tensor import Tensor
from ..ir.tensor_graph import OutputSpec, TensorGraph


def live_nodes(g: TensorGraph) -> set:
    keep = set()
    stack = [o.node for o in g.outputs]
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        stack.extend(g.node(n)["inputs"])
    return keep | set(g.inputs)


def rebuild(g: TensorGraph, rewrite) -> TensorGraph:
    new = TensorGraph(g.name)
    new.symbols = list(g.symbols)
    new.returns_tuple = g.returns_tuple
    keep = live_nodes(g)
    vals: dict = {}
    ctx.push(new)
    try:
        for nid in g.nodes():
            if nid not in keep:
                continue
            n = g.node(nid)
            op, attrs, loc = n["op"], n["attrs"], n["loc"]
            if op == "input":
                vals[nid] = Tensor._wrap(new, new.add_input(n["out"], loc))
                continue
            ins = [vals[i] for i in n["inputs"]]
            first = new._next
            out = None
            if op not in ("loop", "loop_result"):
                with hints.scoped(attrs.get("vec_tile"), attrs.get("cube_tile")):
                    out = rewrite(g, nid, ins)
            if out is not None:
                for m in range(first, new._next):
                    if new.nx.has_node(m):
                        new.node(m)["loc"] = loc
                        if attrs.get("hint_adjusted") and new.node(m)["attrs"].get("vec_tile"):
                            new.node(m)["attrs"]["hint_adjusted"] = attrs["hint_adjusted"]   # passes/hints.py
                vals[nid] = out
                continue
            if op == "loop":
                attrs = dict(attrs)
                attrs["body"] = rebuild_body(attrs["body"], rewrite)
            node = new.add_node(op, [t._node for t in ins], dict(attrs), n["out"], loc)
            vals[nid] = Tensor._wrap(new, node)
    finally:
        ctx.pop()
    new.inputs = [vals[i]._node for i in g.inputs]
    new.outputs = [OutputSpec(vals[o.node]._node, o.kind, o.index, o.check) for o in g.outputs]
    return new


def rebuild_body(body: TensorGraph, rewrite) -> TensorGraph:
    """A loop body keeps every input (positions matter to the loop node), even unused ones."""
    new = rebuild(body, rewrite)
    return new

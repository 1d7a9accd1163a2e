"""JSON round-trip of a TensorGraph (sizes as sympy srepr, dtypes by name, constants as lists)."""
from __future__ import annotations

import sympy
import torch

from .. import dtypes
from ..errors import SourceLoc
from .tensor_graph import OutputSpec, TensorGraph, ValueInfo


def _enc(v):
    if isinstance(v, TensorGraph):
        return {"$graph": graph_to_json(v)}
    if isinstance(v, sympy.Basic):
        return {"$sym": sympy.srepr(v)}
    if isinstance(v, dtypes.DataType):
        return {"$dtype": v.name}
    if isinstance(v, torch.Tensor):
        return {"$tensor": v.tolist(), "dtype": dtypes.from_torch(v.dtype).name}
    if isinstance(v, ValueInfo):
        return {"$value": [_enc(list(v.shape)), v.dtype.name, v.name]}
    if isinstance(v, SourceLoc):
        return {"$loc": v.to_json()}
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {"$dict": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, float) and v != v:
        return {"$float": "nan"}
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return {"$float": str(v)}
    return v


def _dec(v):
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "$graph" in v:
        return graph_from_json(v["$graph"])
    if "$sym" in v:
        return eval(v["$sym"], vars(sympy).copy())   # srepr output is sympy constructor calls only
    if "$dtype" in v:
        return dtypes.to_dtype(v["$dtype"])
    if "$tensor" in v:
        return torch.tensor(v["$tensor"], dtype=dtypes.to_dtype(v["dtype"]).torch_dtype)
    if "$value" in v:
        shape, dt, name = v["$value"]
        return ValueInfo(tuple(_dec(shape)), dtypes.to_dtype(dt), name)
    if "$loc" in v:
        return SourceLoc.from_json(v["$loc"])
    if "$tuple" in v:
        return tuple(_dec(x) for x in v["$tuple"])
    if "$dict" in v:
        return {_dec(k): _dec(x) for k, x in v["$dict"]}
    if "$float" in v:
        return float(v["$float"])
    raise ValueError(f"unknown JSON tag in {list(v)}")


def graph_to_json(g: TensorGraph) -> dict:
    nodes = []
    for nid in g.nodes():
        n = g.node(nid)
        nodes.append({"id": nid, "op": n["op"], "inputs": n["inputs"], "attrs": _enc(n["attrs"]),
                      "out": _enc(n["out"]), "loc": _enc(n["loc"])})
    return {"name": g.name, "nodes": nodes, "inputs": g.inputs,
            "outputs": [[o.node, o.kind, o.index] for o in g.outputs],
            "symbols": [_enc(s) for s in g.symbols], "returns_tuple": g.returns_tuple}


def graph_from_json(data: dict) -> TensorGraph:
    g = TensorGraph(data["name"])
    for n in data["nodes"]:
        g._next = n["id"]
        g.add_node(n["op"], n["inputs"], _dec(n["attrs"]), _dec(n["out"]), _dec(n["loc"]))
    g._next = max((n["id"] for n in data["nodes"]), default=-1) + 1
    g.inputs = list(data["inputs"])
    g.outputs = [OutputSpec(*o) for o in data["outputs"]]
    g.symbols = [_dec(s) for s in data["symbols"]]
    g.returns_tuple = data["returns_tuple"]
    return g

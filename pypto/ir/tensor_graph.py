"""TensorGraph: the traced program as a networkx DiGraph of op applications.

A node is an op application: ``op`` (registry name), ``inputs`` (ordered node ids), ``attrs``,
``out`` (the ValueInfo of its result — a list of them for a multi-result ``loop`` node) and the
user's source location. Edges mirror ``inputs`` (edge attr ``pos`` lists operand positions) so
networkx algorithms see the data flow. Node ids are assigned in creation order, which is a
topological order. Loop nodes own a body TensorGraph (attrs ``body``) and a symbolic index.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import sympy

from ..dtypes import DataType
from ..errors import SourceLoc


@dataclass
class ValueInfo:
    shape: tuple
    dtype: DataType
    name: str | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass
class OutputSpec:
    """Where a graph output goes: returned (index in the returned tuple), written into an input, or read
    by the backend to check a run (passes/index_checks.py)."""
    node: int
    kind: str = "return"       # "return" | "inplace" | "index_check"
    index: int = 0             # return position, input position for "inplace", check number for "index_check"
    check: object = None       # for "index_check": the IndexRangeCheck it counts for


class TensorGraph:
    def __init__(self, name: str = "graph"):
        self.name = name
        self.nx = nx.DiGraph()
        self.inputs: list[int] = []
        self.outputs: list[OutputSpec] = []
        self.symbols: list[sympy.Symbol] = []     # run-time sizes, bound from input shapes
        self.scalar_reads: dict = {}              # data scalars (pypto.item): name -> ir.execution.ScalarRead
        self.notes: list[str] = []                # lines for the report of every run (frontend.context.note)
        self.returns_tuple = False
        self._next = 0

    # ------------------------------------------------------------------ building
    def add_node(self, op: str, inputs: list[int], attrs: dict, out, loc: SourceLoc | None = None) -> int:
        nid = self._next
        self._next += 1
        self.nx.add_node(nid, op=op, inputs=list(inputs), attrs=dict(attrs), out=out, loc=loc)
        for pos, src in enumerate(inputs):
            if self.nx.has_edge(src, nid):
                self.nx.edges[src, nid]["pos"].append(pos)
            else:
                self.nx.add_edge(src, nid, pos=[pos])
        return nid

    def add_input(self, info: ValueInfo, loc: SourceLoc | None = None) -> int:
        nid = self.add_node("input", [], {"index": len(self.inputs)}, info, loc)
        self.inputs.append(nid)
        return nid

    # ------------------------------------------------------------------ reading
    def node(self, nid: int) -> dict:
        return self.nx.nodes[nid]

    def op(self, nid: int) -> str:
        return self.nx.nodes[nid]["op"]

    def info(self, nid: int) -> ValueInfo:
        return self.nx.nodes[nid]["out"]

    def nodes(self):
        """Node ids in topological (creation) order."""
        return sorted(self.nx.nodes)

    def users(self, nid: int) -> list[int]:
        return sorted(self.nx.successors(nid))

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def count_ops(self, recursive: bool = True) -> int:
        n = 0
        for nid in self.nodes():
            n += 1
            if recursive and self.op(nid) == "loop":
                n += self.node(nid)["attrs"]["body"].count_ops()
        return n

    def output_nodes(self) -> list[int]:
        return [o.node for o in self.outputs]

    def __str__(self) -> str:
        from .graph_printer import print_graph
        return print_graph(self)

    def to_dot(self) -> str:
        from .graph_printer import to_dot
        return to_dot(self)

    def to_json(self) -> dict:
        from .graph_serialize import graph_to_json
        return graph_to_json(self)

    @staticmethod
    def from_json(data: dict) -> "TensorGraph":
        from .graph_serialize import graph_from_json
        return graph_from_json(data)

    def verify(self, ops) -> None:
        """Raise CompileError at the first inconsistency (see graph_verify); ``ops``: the op table,
        pypto.ops.registry.REGISTRY."""
        from .graph_verify import verify_graph
        verify_graph(self, ops)

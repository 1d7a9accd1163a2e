"""The tracing state: a stack of graphs under construction (the jit function's graph, then one per
enclosing ``pypto.loop`` body), value capture across them, and in-place mutation bookkeeping."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..errors import PyptoError
from ..ir.tensor_graph import TensorGraph


@dataclass
class Frame:
    graph: TensorGraph
    # value of the parent graph (parent node id) -> input node id in this graph
    captures: dict = field(default_factory=dict)
    capture_sources: list = field(default_factory=list)     # parent node ids, in body-input order
    # id(tensor) -> (tensor, graph, node) it had before its first mutation in this frame
    mutated: dict = field(default_factory=dict)
    # a run-time branch's side (frontend/control.py): refine(node) is the node its ops read instead,
    # refine.size(d) a size, simplified under the branch's condition; None elsewhere
    refine: object = None


_stack: list[Frame] = []
# Held while a trace is built and compiled (jit, tile and Professional-mode kernels): the trace stack
# above and the passes' state are process-wide, and threads calling one new signature at once must
# trace it once. Reentrant: a trace may compile what it calls.
compile_lock = threading.RLock()
# index symbol -> (lo, hi) inclusive, for the pypto.loop bodies being traced
loop_ranges: dict = {}


# serial number of the current root trace: names a trace for state that must not outlive it (tiling
# hints); an id() of its graph would be reused by a later trace once the graph is freed
trace_serial = 0


def push(graph: TensorGraph) -> Frame:
    global trace_serial
    if not _stack:
        trace_serial += 1
    f = Frame(graph)
    _stack.append(f)
    return f


def pop() -> Frame:
    return _stack.pop()


def note(text: str) -> None:
    """Record ``text`` on the graph being traced: a line of ``Report.notes`` of every run of it on sim,
    cpu and npu (e.g. which kernel a model layer fell back to, and why). Outside a trace: nothing."""
    if _stack and text not in _stack[0].graph.notes:
        _stack[0].graph.notes.append(text)


def refine_size(d):
    """``d`` simplified under the conditions of the run-time branch sides being traced."""
    for f in _stack:
        if f.refine is not None:
            d = f.refine.size(d)
    return d


def is_tracing() -> bool:
    return bool(_stack)


def current() -> Frame:
    if not _stack:
        raise PyptoError("pypto tensor ops run inside a traced function: decorate it with @pypto.jit, "
                         "or call it from a pypto.Module's forward")
    return _stack[-1]


def frame_index(graph: TensorGraph) -> int | None:
    for i in range(len(_stack) - 1, -1, -1):
        if _stack[i].graph is graph:
            return i
    return None


def resolve(graph: TensorGraph, node: int, refine: bool = True) -> int:
    """The node id that stands for (graph, node) in the current graph, capturing it into every
    loop body between its graph and the current one (``refine``: as a branch side's ops read it)."""
    k = frame_index(graph)
    if k is None:
        raise PyptoError("this tensor belongs to a finished trace: it was created inside a pypto.loop body "
                         "(or another traced function) and is used outside it",
                         hint="write results out of a loop with out[...] = value into a tensor created before the loop")
    for j in range(k + 1, len(_stack)):
        f = _stack[j]
        if node not in f.captures:
            info = _stack[j - 1].graph.info(node)
            f.captures[node] = f.graph.add_input(info)
            f.capture_sources.append(node)
        node = f.captures[node]
        if refine and f.refine is not None:
            node = f.refine(node)
    return node


def record_mutation(tensor) -> None:
    """Before ``tensor`` is rebound to a new value in the current graph: remember what it was, so a
    loop body can carry it and a traced function can write it back to its input."""
    f = current()
    if id(tensor) not in f.mutated:
        f.mutated[id(tensor)] = (tensor, tensor._graph, tensor._node)


def resolve_from(frame: Frame, graph: TensorGraph, node: int) -> int:
    """Like ``resolve`` for a frame that was just popped: the parent-graph node standing for
    (graph, node), captured into ``frame`` as a body input. Returns the parent node id."""
    parent_node = resolve(graph, node)           # in the (now current) parent graph
    if parent_node not in frame.captures:
        frame.captures[parent_node] = frame.graph.add_input(current().graph.info(parent_node))
        frame.capture_sources.append(parent_node)
    return parent_node

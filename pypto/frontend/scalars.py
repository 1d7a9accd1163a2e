"""Data scalars: an element of an integer argument read at run time by the control program (the
AICPU side of a run), as a symbolic value usable wherever a size is (a ``pypto.loop`` bound, a view
offset, a valid shape, index arithmetic, a run-time branch's condition).

    n = pypto.item(cu_seqlens, b + 1) - pypto.item(cu_seqlens, b)
    n = cu_seqlens[b + 1].item() - cu_seqlens[b].item()         # torch's spelling, the same symbol

Each read is a new symbol (``d0``, ``d1`` ...; integer, >= 0) recorded in the traced graph's
``scalar_reads`` (ir.execution.ScalarRead); runtime/host/scalars.py reads it when an expression of
the control program first needs it. What is read is an argument of the jit function that the
program does not write (the read needs no task to finish first), or a tensor the program computes at
its top level (not inside a pypto.loop body): that tensor becomes an output of the program (kind
"scalar_source", not returned; ``finish_sources``) and the control program reads the element once the
tasks writing it are done (runtime/host/control.py stages the expansion). A value < 0 or an index
outside the tensor is a run-time error at the line of the read.
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..errors import IndexOutOfRangeError, PyptoError, TypeMismatchError, user_location
from ..ir.execution import ScalarRead
from ..ir.tensor_graph import OutputSpec
from . import context as ctx

SOURCE_KIND = "scalar_source"       # an output kept for the control program's reads, not returned


def _root():
    if not ctx.is_tracing():
        raise PyptoError("pypto.item reads a tensor element inside a traced function (@pypto.jit)")
    return ctx._stack[0]


def _parent_node(k: int, node: int) -> int:
    """The node of frame k-1's graph that frame k's body input ``node`` captures."""
    for outer, inner in ctx._stack[k].captures.items():
        if inner == node:
            return outer
    raise PyptoError("internal: a loop body input that captures nothing")


def _element(t, index):
    """(root node, index tuple in its coordinates) of the element ``t[index]``: an input of the jit
    function, or a value computed at the top level of the program."""
    g, node = t._graph, t._node
    k = ctx.frame_index(g)
    if k is None:
        raise PyptoError("pypto.item of a tensor of a finished trace (created inside a pypto.loop body "
                         "and used outside it)")
    shape = tuple(g.info(node).shape)
    if index is None:
        if any(not (isinstance(d, int) and d == 1) for d in shape):
            raise PyptoError(f"tensor.item() needs a one-element tensor, this one is {list(shape)}",
                             hint="index it down to one element first (lens[b].item()), or write pypto.item(lens, b)")
        idx = [0] * len(shape)
    else:
        if len(index) != len(shape):
            raise PyptoError(f"pypto.item of a {len(shape)}-d tensor {list(shape)} needs {len(shape)} indices, "
                             f"found {len(index)}")
        idx = [sym.simplify(i) for i in index]
    while True:
        n = g.node(node)
        op = n["op"]
        if op == "input":
            if k == 0:
                return node, tuple(idx)
            node = _parent_node(k, node)
            k -= 1
            g = ctx._stack[k].graph
        elif op == "view" and len(n["attrs"]["offsets"]) == len(idx):
            idx = [sym.simplify(o + i) for o, i in zip(n["attrs"]["offsets"], idx)]
            node = n["inputs"][0]
        elif op in ("reshape", "squeeze", "unsqueeze") and all(
                isinstance(d, int) and d == 1 for d in g.info(n["inputs"][0]).shape):
            node = n["inputs"][0]
            idx = [0] * len(g.info(node).shape)
        elif k == 0:
            return node, tuple(idx)
        else:
            raise PyptoError(f"pypto.item reads an element of an argument of the jit function or of a tensor "
                             f"computed outside any pypto.loop body; this tensor is computed by '{op}'"
                             f"{_at(n['loc'])} inside a loop body",
                             hint="compute the value before the loop (the control program reads it once the "
                                  "tasks writing it are done), or pass it in as an argument")


def _at(loc) -> str:
    return f" at {loc.file}:{loc.line}" if loc is not None else ""


def item(input, *index):
    """``pypto.item(t, i, j ...)`` (or ``t[i, j].item()``): element ``t[i, j ...]`` of an integer argument
    as a run-time symbolic value (a data scalar), read by the control program when it is needed."""
    loc = user_location()
    if not hasattr(input, "_graph"):            # a pypto.Tensor (tensor.py imports this module)
        raise TypeMismatchError(f"pypto.item reads an element of a pypto.Tensor, found {type(input).__name__}",
                                loc=loc)
    if not input.dtype.is_integer:
        raise TypeMismatchError(f"pypto.item reads an integer tensor (a length, a count, an offset, a block id); "
                                f"this one is {input.dtype}", loc=loc,
                                hint="pass the sizes as an int32 / int64 tensor")
    for i in index:
        if hasattr(i, "_graph"):
            raise TypeMismatchError("pypto.item's indices are ints or sizes, found a Tensor", loc=loc,
                                    hint="read the index first: pypto.item(idx, k)")
    frame = _root()
    root = frame.graph
    node, idx = _element(input, index if index else None)
    computed = root.op(node) != "input"
    name = f"%{node}" if computed else root.info(node).name   # a computed tensor: named after its output later
    for t, og, onode in frame.mutated.values():
        if og is root and onode == node:
            raise PyptoError(f"pypto.item reads argument '{name}', which this program writes", loc=loc,
                             hint="the control program reads scalars from arguments no task writes")
    shape = root.info(node).shape
    for d, (i, n) in enumerate(zip(idx, shape)):
        # out of range for every value the loops give it: an error now (else the run checks each read)
        if sym.prove_nonnegative(sympy.sympify(-i - 1), ctx.loop_ranges) or \
                sym.prove_nonnegative(sympy.sympify(i - n), ctx.loop_ranges):
            raise IndexOutOfRangeError(f"pypto.item reads {name}[{', '.join(map(str, idx))}]: index {i} of dim {d} "
                                       f"is outside [0, {n})", loc=loc)
    sname = f"d{len(root.scalar_reads)}"
    s = sympy.Symbol(sname, integer=True, nonnegative=True)
    # a computed tensor's read keeps its node in ``source`` until finish_sources makes it an output
    root.scalar_reads[sname] = ScalarRead(s, name, tuple(idx), loc, node if computed else None)
    return s


def finish_sources(g) -> None:
    """At the end of a trace: each computed tensor a data scalar reads (``ScalarRead.source``, a node
    of ``g`` until now) becomes the position of an output of ``g`` holding it: a returned output of that
    node or an argument's new value (read from the argument's buffer, which the write updates where it
    happens; a separate output's copy may be placed later), else an output of kind SOURCE_KIND appended
    once per node."""
    at = {}
    for k, o in enumerate(g.outputs):
        if o.kind == "inplace" or (o.kind == "return" and o.node not in at):
            at[o.node] = k
    for sname, r in list(g.scalar_reads.items()):
        if r.source is None:
            continue
        k = at.get(r.source)
        if k is None:
            k = at[r.source] = len(g.outputs)
            g.outputs.append(OutputSpec(r.source, SOURCE_KIND, k))
        g.scalar_reads[sname] = ScalarRead(r.symbol, r.buffer, r.index, r.loc, k)


__all__ = ["SOURCE_KIND", "finish_sources", "item"]

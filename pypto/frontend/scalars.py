"""Data scalars: an element of an integer argument read at run time by the control program (the
AICPU side of a run), as a symbolic value usable wherever a size is (a ``pypto.loop`` bound, a view
offset, a valid shape, index arithmetic, a run-time branch's condition).

    n = pypto.item(cu_seqlens, b + 1) - pypto.item(cu_seqlens, b)
    n = cu_seqlens[b + 1].item() - cu_seqlens[b].item()         # torch's spelling, the same symbol

Each read is a new symbol (``d0``, ``d1`` ...; integer, >= 0) recorded in the traced graph's
``scalar_reads`` (ir.execution.ScalarRead); runtime/host/scalars.py reads it when an expression of
the control program first needs it. What is read must be an argument of the jit function that the
program does not write (the read then needs no task to finish first); a value < 0 or an index
outside the argument is a run-time error at the line of the read.
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..errors import IndexOutOfRangeError, PyptoError, TypeMismatchError, user_location
from ..ir.execution import ScalarRead
from . import context as ctx


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
    """(root input node, index tuple in its coordinates) of the element ``t[index]``."""
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
        else:
            raise PyptoError(f"pypto.item reads an element of an argument of the jit function; this tensor is "
                             f"computed by '{op}'{_at(n['loc'])}",
                             hint="the control program reads a scalar from an argument (e.g. cu_seqlens) that "
                                  "no task of the program writes")


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
    name = root.info(node).name
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
    root.scalar_reads[sname] = ScalarRead(s, name, tuple(idx), loc)
    return s


__all__ = ["item"]

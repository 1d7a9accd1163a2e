"""``pypto.loop``: a loop whose body is traced once with a symbolic index and whose trip count is
known only at run time. Tensors written in the body (``out[...] = v``) are carried through it."""
from __future__ import annotations

import itertools

from .. import symbolic as sym
from ..errors import PyptoError, user_location
from ..ir.tensor_graph import OutputSpec, TensorGraph, ValueInfo
from . import context as ctx
from .tensor import Tensor

_ids = itertools.count()


class loop:
    """``for i in pypto.loop(start, stop=None, step=1)``: like ``range``; bounds may be sizes
    (``x.shape[0]``), symbolic expressions (``pypto.ceildiv(T, 64)``) or ints."""

    def __init__(self, start, stop=None, step=1, name: str | None = None):
        if stop is None:
            start, stop = 0, start
        for what, v in (("start", start), ("stop", stop), ("step", step)):
            if isinstance(v, Tensor):
                raise PyptoError(f"pypto.loop {what} must be a size (int or symbolic), found a Tensor",
                                 hint="use a shape entry such as x.shape[0] or pypto.ceildiv(n, 64)")
        if isinstance(step, int) and step <= 0:
            raise PyptoError(f"pypto.loop step must be positive, found {step}")
        self.start, self.stop, self.step = sym.simplify(start), sym.simplify(stop), sym.simplify(step)
        self.name = name
        self.loc = user_location()

    def __iter__(self):
        parent = ctx.current()
        n = next(_ids)
        var = sym.index_symbol(self.name or f"i{n}")
        body = TensorGraph(f"{parent.graph.name}.loop{n}")
        frame = ctx.push(body)
        ctx.loop_ranges[var] = (self.start, sym.simplify(self.stop - 1))
        try:
            yield var
        finally:
            del ctx.loop_ranges[var]
            popped = ctx.pop()
            assert popped is frame
        self._close(parent, frame, var)

    def _close(self, parent, frame, var) -> None:
        body = frame.graph
        carried = [(t, g, nd) for (t, g, nd) in frame.mutated.values() if g is not body]
        carried_inputs = []
        for t, g, nd in carried:
            # the value the tensor had when the loop began, as a body input
            outer = ctx.resolve_from(frame, g, nd)
            carried_inputs.append(frame.captures[outer])
            body.outputs.append(OutputSpec(t._node, "return", len(body.outputs)))
        body.inputs = [frame.captures[s] for s in frame.capture_sources]
        g = parent.graph
        outs = [body.info(o.node) for o in body.outputs]
        attrs = {"body": body, "var": var, "start": self.start, "stop": self.stop, "step": self.step,
                 "carried": [body.inputs.index(c) for c in carried_inputs]}
        loop_node = g.add_node("loop", list(frame.capture_sources), attrs, outs, self.loc)
        for k, (t, og, onode) in enumerate(carried):
            res = g.add_node("loop_result", [loop_node], {"index": k}, ValueInfo(outs[k].shape, outs[k].dtype),
                             self.loc)
            parent.mutated.setdefault(id(t), (t, og, onode))
            t._graph, t._node = g, res

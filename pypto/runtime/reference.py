"""The reference interpreter: runs a TensorGraph (loops included) with torch on the CPU.
It is the oracle every later stage is compared with (``backend="reference"``)."""
from __future__ import annotations

import torch

from .. import symbolic as sym
from ..errors import IndexOutOfRangeError, PyptoError
from ..ir.tensor_graph import TensorGraph
from ..ops.registry import get_op
from ..passes.index_checks import INDEX_OPS, index_position, picked_bound
from .host.scalars import ScalarEnv, bind


def run_graph(g: TensorGraph, inputs: list[torch.Tensor], env: dict) -> list[torch.Tensor]:
    """Values of g's outputs (in g.outputs order) for the given inputs and size bindings."""
    vals: dict[int, torch.Tensor] = dict(zip(g.inputs, inputs))
    if getattr(g, "scalar_reads", None) and not isinstance(env, ScalarEnv):   # pypto.item: read on first use
        named = {g.info(n).name: t for n, t in zip(g.inputs, inputs)}
        # a computed tensor's element (ScalarRead.source: an output) is read from its value, computed
        # by then: nodes run in program order
        computed = {r.buffer: g.outputs[r.source].node for r in g.scalar_reads.values() if r.source is not None}
        env = bind(env, g.scalar_reads, lambda name: vals.get(computed[name]) if name in computed else named.get(name))
    for nid in g.nodes():
        n = g.node(nid)
        op = n["op"]
        if op == "input":
            continue
        args = [vals[i] for i in n["inputs"]]
        if op == "loop":
            vals[nid] = _run_loop(n["attrs"], args, env)
        elif op == "loop_result":
            vals[nid] = args[0][n["attrs"]["index"]]
        else:
            vals[nid] = _apply(op, args, n["attrs"], env, n["loc"])
    return [vals[o.node] for o in g.outputs]


def _apply(op, args, attrs, env, loc):
    a = sym.evaluate_tree({k: v for k, v in attrs.items()}, env)
    if op in INDEX_OPS:
        _check_index_range(op, args[index_position(op)], picked_bound(op, [t.shape for t in args], a), loc)
    try:
        return get_op(op).ref(args, a)
    except PyptoError as e:
        raise type(e)(e.message, loc=loc or e.loc, hint=e.hint) from None
    except (RuntimeError, ValueError, IndexError) as e:
        raise PyptoError(f"{op} failed at run time: {e}", loc=loc) from None


def _check_index_range(op, idx, n, loc):
    """torch raises IndexError (index_select) or RuntimeError (gather) for an index outside [0, n):
    the same IndexOutOfRangeError the lowered backends raise, at the op's line."""
    if idx.device.type == "meta":
        return
    bad = (idx < 0) | (idx >= n)
    if bool(bad.any()):
        pos = [int(i) for i in bad.nonzero()[0]]
        raise IndexOutOfRangeError(f"{op} got index {int(idx[tuple(pos)])} at {pos}, outside the dim of size {n} it "
                                   f"picks from (expected 0 <= index < {n})", loc=loc)


def _run_loop(attrs, args, env):
    body: TensorGraph = attrs["body"]
    start, stop, step = (sym.evaluate(attrs[k], env) for k in ("start", "stop", "step"))
    carried = attrs["carried"]
    state = list(args)
    for i in range(start, stop, step):
        outs = run_graph(body, state, env.child(attrs["var"].name, i) if isinstance(env, ScalarEnv)
                         else {**env, attrs["var"].name: i})
        for k, pos in enumerate(carried):
            state[pos] = outs[k]
    return [state[pos] for pos in carried]

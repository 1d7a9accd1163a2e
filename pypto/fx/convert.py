"""ATen FX graph -> pypto TensorGraph: ``convert`` walks one partition's FX graph in order and calls
the rules (pypto/fx/rules.py) inside a pypto trace, so the TensorGraph is built by pypto's own op
functions (shape/dtype inference, checks and source locations included). Every converted value is
checked against the shape torch's FakeTensor has for it (and cast to its dtype), so a rule bug cannot
give a wrong answer silently."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch

from .. import dtypes, symbolic as sym
from ..errors import PyptoError
from ..frontend import api, context as ctx
from ..frontend.jit import trace_callable
from ..frontend.tensor import Tensor, TensorSpec
from .locations import node_location
from .meta import _V, ConversionError, NothingToCompute, _opaque, dtype_of, plan_sizes, shape_of, size_expr
from .rules import RULES, NodeContext, bind_arguments, unsupported_reason


@dataclass
class Converted:
    """One partition as a pypto graph, and how to call it."""
    graph: object                                   # TensorGraph
    tensor_args: list[int]                          # FX argument positions feeding graph inputs, in order
    binders: list[tuple]                            # see plan_sizes
    outputs: list[tuple]                            # per FX output: ("graph", k) | ("arg", position)
    out_shapes: list[tuple]                         # expected shape of every graph output (pypto sizes)
    out_dtypes: list[dtypes.DataType]
    returns_tuple: bool
    in_dtypes: list[torch.dtype] = field(default_factory=list)      # per graph input (f64 scalars: f32)
    result_dtypes: list[torch.dtype] = field(default_factory=list)  # per FX output, as torch has it

    def bind(self, args) -> dict:
        env = {}
        for pos, dim, name, solution in self.binders:
            v = int(args[pos].shape[dim]) if dim is not None else int(args[pos])
            if solution is not None:
                v = sym.evaluate(solution, {**env, _V.name: v})
            if env.setdefault(name, v) != v:
                raise ConversionError(f"size {name} is bound to {env[name]} and {v}")
        return env


def convert(gm: torch.fx.GraphModule, name: str) -> Converted:
    """Trace the FX graph ``gm`` (ATen ops, FakeTensor metadata on every node) into a TensorGraph."""
    _opaque.clear()
    try:
        return _convert(gm, name)
    finally:
        _opaque.clear()


def _convert(gm: torch.fx.GraphModule, name: str) -> Converted:
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    binders = plan_sizes(placeholders)
    specs, tensor_args, sizes = [], [], {}
    for pos, p in enumerate(placeholders):
        v = p.meta.get("val")
        if isinstance(v, torch.Tensor):
            specs.append(TensorSpec(shape_of(v), dtype_of(v), p.name))
            tensor_args.append(pos)
        elif isinstance(v, torch.SymInt):
            sizes[p] = size_expr(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            raise ConversionError(f"placeholder {p.name} is a plain int")
        else:
            raise ConversionError(f"placeholder {p.name} holds {type(v).__name__}, not a tensor or SymInt")
    out_node = next(n for n in nodes if n.op == "output")
    returned = out_node.args[0]
    returns_tuple = isinstance(returned, (tuple, list))
    returned = list(returned) if returns_tuple else [returned]
    plan: dict = {}

    def body(*inputs):
        values = dict(sizes)
        values.update({placeholders[pos]: t for pos, t in zip(tensor_args, inputs)})
        g = ctx.current().graph
        for n in nodes:
            if n.op in ("placeholder", "output"):
                continue
            first_new = len(g.nx)
            values[n] = _convert_node(gm, n, values)
            loc = node_location(n)
            if loc is not None:
                for nid in range(first_new, len(g.nx)):
                    g.node(nid)["loc"] = loc
        graph_outs, outputs = [], []
        input_ids = {id(t): pos for pos, t in zip(tensor_args, inputs)}
        for r in returned:
            v = values.get(r) if isinstance(r, torch.fx.Node) else r
            if not isinstance(v, Tensor):
                raise ConversionError(f"output {r} is {type(v).__name__}, not a tensor")
            if id(v) in input_ids:
                outputs.append(("arg", input_ids[id(v)]))
                continue
            k = next((i for i, t in enumerate(graph_outs) if t is v), None)
            if k is None:
                graph_outs.append(v)
                k = len(graph_outs) - 1
            outputs.append(("graph", k))
        if not graph_outs:
            raise NothingToCompute("the partition computes nothing (every output is an input)")
        plan["outputs"] = outputs
        return tuple(graph_outs)

    try:
        graph = trace_callable(body, specs, name, symbols=[sym.symbol(b[2]) for b in binders])
    except ConversionError:
        raise
    except PyptoError as e:
        raise ConversionError(f"pypto rejected the graph: {e.message}", loc=e.loc) from None
    bound = {b[2] for b in binders}
    free = set()
    for nid in graph.nodes():
        info = graph.info(nid)
        for i in (info if isinstance(info, (list, tuple)) else [info]):
            free |= {s.name for s in sym.free_symbols(i.shape)}
        free |= {s.name for s in sym.free_symbols(*_attr_sizes(graph.node(nid)["attrs"]))}
    if free - bound:
        raise ConversionError(f"sizes {sorted(free - bound)} cannot be bound from the partition's inputs")
    infos = [graph.info(o.node) for o in graph.outputs]
    return Converted(graph, tensor_args, binders, plan["outputs"], [i.shape for i in infos],
                     [i.dtype for i in infos], returns_tuple, [s.dtype.torch_dtype for s in specs],
                     [r.meta["val"].dtype for r in returned])


def _attr_sizes(attrs: dict) -> list:
    out = []
    for v in attrs.values():
        if isinstance(v, sympy.Basic):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [x for x in v if isinstance(x, sympy.Basic)]
    return out


def _map_arg(v, values):
    if isinstance(v, torch.fx.Node):
        if v not in values:
            raise ConversionError(f"{v.name} has no pypto value")
        return values[v]
    if isinstance(v, (list, tuple)):
        return type(v)(_map_arg(x, values) for x in v)
    if isinstance(v, torch.SymInt):
        return size_expr(v)
    return v


def _convert_node(gm, n: torch.fx.Node, values: dict):
    if n.op == "get_attr":
        t = getattr(gm, n.target)
        if not isinstance(t, torch.Tensor):
            raise ConversionError(f"get_attr {n.target} is not a tensor")
        return api.constant(t)
    if n.op != "call_function":
        raise ConversionError(f"{n.op} node {n.name}")
    why = unsupported_reason(n)
    if why is not None:
        raise ConversionError(f"{n.name}: {why}")
    rule = RULES[n.target]
    args = {k: _map_arg(v, values) for k, v in bind_arguments(n.target, n.args, n.kwargs).items()}
    val = n.meta.get("val")
    cx = NodeContext(n, gm)
    if isinstance(val, torch.Tensor):
        cx.out_shape, cx.out_dtype = shape_of(val), dtype_of(val)
    try:
        result = rule.convert(cx, **args)
    except ConversionError:
        raise
    except Exception as e:      # a pypto error or a rule bug: either way this graph stays in eager
        raise ConversionError(f"{n.name} ({n.target}): {type(e).__name__}: {e}") from e
    return _check(n, result, val, cx)


def _check(n, result, val, cx):
    """The converted value must be what torch computes: same shape; the dtype is made to match."""
    if isinstance(val, torch.Tensor):
        if not isinstance(result, Tensor):
            raise ConversionError(f"{n.name}: rule produced {type(result).__name__}, expected a tensor")
        if len(result.shape) != len(cx.out_shape) or any(
                sym.equal(a, b) is False for a, b in zip(result.shape, cx.out_shape)):
            raise ConversionError(f"{n.name} ({n.target}): pypto shape {list(result.shape)} differs from "
                                  f"torch's {list(cx.out_shape)}")
        return api.cast(result, cx.out_dtype) if result.dtype != cx.out_dtype else result
    if isinstance(val, (list, tuple)) and isinstance(result, list):
        if len(val) != len(result):
            raise ConversionError(f"{n.name}: {len(result)} results, torch has {len(val)}")
        return [_check(n, r, v, NodeContext(n, cx.module, shape_of(v), dtype_of(v))) for r, v in zip(result, val)]
    return result

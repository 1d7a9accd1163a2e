"""Which ATen nodes a lowered backend (sim, cpu, npu) can compile, found by compiling each kind of node
alone once: a one-node FX graph is converted and lowered, and the verdict is cached per backend,
machine and node signature (op, argument values, dtypes, ranks, which dims are static).

The partitioner keeps nodes whose probe failed in eager, so a lowering that lacks some op (matmul,
a strided view...) still runs the rest of the model through pypto. A probe is a hint, not a promise:
a partition that fails to compile as a whole still falls back to eager (pypto/dynamo.py)."""
from __future__ import annotations

import logging
import operator

import torch

from .. import backends

log = logging.getLogger("pypto.dynamo")

_verdicts: dict = {}      # (backend, machine, signature) -> None (compiles) or why not


def _describe(v):
    if isinstance(v, torch.fx.Node):
        return _describe(v.meta.get("val"))
    if isinstance(v, torch.Tensor):
        dims = tuple(int(d) if isinstance(d, int) else "?" for d in v.shape)
        return ("T", str(v.dtype), dims)
    if isinstance(v, torch.SymInt):
        return "sym"
    if isinstance(v, (list, tuple)):
        return tuple(_describe(x) for x in v)
    return repr(v)


def signature(node: torch.fx.Node) -> tuple:
    return (str(node.target), _describe(list(node.args)), _describe(sorted(node.kwargs.items())),
            _describe(node))


def one_node_graph(node: torch.fx.Node) -> torch.fx.GraphModule:
    """``node`` alone: a placeholder per input node (same metadata), the call, its result as output."""
    g = torch.fx.Graph()
    env = {}
    for i, a in enumerate(node.all_input_nodes):
        p = g.placeholder(f"in{i}")
        p.meta = dict(a.meta)
        env[a] = p
    call = g.node_copy(node, lambda a: env[a])
    if isinstance(node.meta.get("val"), (list, tuple)):       # multi-result: the members in use
        used = sorted({u.args[1] for u in node.users if u.target is operator.getitem})
        items = []
        for i in used:
            item = g.call_function(operator.getitem, (call, i))
            item.meta = dict(next(u for u in node.users if u.args[1] == i).meta)
            items.append(item)
        g.output(tuple(items))
    else:
        g.output(call)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def probe(node: torch.fx.Node, backend: str, options: dict) -> str | None:
    """None when ``backend`` compiles ``node`` on its own, else why not."""
    if backend == "reference" or node.target.__module__ == "_operator":
        return None
    key = (backend, options.get("machine"), signature(node))
    if key not in _verdicts:
        from .convert import convert
        from .meta import NothingToCompute
        try:
            conv = convert(one_node_graph(node), f"probe_{node.name}")
            backends.compile_graph(conv.graph, backend, {k: v for k, v in options.items() if k != "dump"})
            _verdicts[key] = None
        except NothingToCompute:        # a view or copy that is free on its own: fine anywhere
            _verdicts[key] = None
        except Exception as e:    # noqa: BLE001 - any failure means: leave this kind of node in eager
            _verdicts[key] = f"{backend} lowering: " + (getattr(e, "message", None) or f"{type(e).__name__}: {e}")
            log.debug("pypto: probe %s on %s failed: %s", node.target, backend, _verdicts[key])
    return _verdicts[key]


def clear() -> None:
    _verdicts.clear()

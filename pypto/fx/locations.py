"""The user's source line of an ATen node: dynamo records a stack trace on the nodes of the graph it
captures; AOT autograd's ATen nodes point back to those through ``meta["from_node"]``."""
from __future__ import annotations

import re

import torch

from ..errors import SourceLoc

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


# id(dynamo FX graph) -> {node name: user source line}; ATen nodes reach them through meta["from_node"]
_LOCATIONS: dict[int, dict[str, SourceLoc]] = {}


def _parse_stack(trace: str | None) -> SourceLoc | None:
    frames = _FRAME_RE.findall(trace or "")
    if not frames:
        return None
    f, line, func = frames[-1]          # the innermost frame
    return SourceLoc(f, int(line), func)


def remember_locations(gm: torch.fx.GraphModule) -> None:
    """Record the user's source line of every node of the graph dynamo captured."""
    locs = {n.name: _parse_stack(n.meta.get("stack_trace")) for n in gm.graph.nodes}
    _LOCATIONS[id(gm.graph)] = {k: v for k, v in locs.items() if v is not None}


def node_location(node: torch.fx.Node) -> SourceLoc | None:
    """The user's source line that produced an ATen node: its own stack trace, or that of the dynamo
    node it was made from (following meta["from_node"] provenance)."""
    loc = _parse_stack(node.meta.get("stack_trace"))
    sources = list(node.meta.get("from_node") or [])
    while loc is None and sources:
        src = sources.pop()
        loc = _LOCATIONS.get(src.graph_id, {}).get(src.name)
        sources += list(src.from_node or [])
    return loc

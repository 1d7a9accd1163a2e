"""Copies: a value that must land in a buffer no program writes (a graph output that is an input
or a view of one) is copied through UB by a one-op tile program (TLOAD + TSTORE per tile)."""
from __future__ import annotations

from ..errors import CompileError
from ..ir.tensor_graph import TensorGraph, ValueInfo
from . import storage as st
from .fusion import plan_fusion


def copy_program(g, n, access, scope, target):
    if access is None:
        raise CompileError(f"internal: output value %{n} ({g.op(n)}) has no GM home to copy from",
                           loc=g.node(n)["loc"])
    from .vector_tiling import VectorTiler
    info = g.info(n)
    mini = TensorGraph(f"copy{n}")
    src = mini.add_input(ValueInfo(info.shape, info.dtype, "src"), g.node(n)["loc"])
    cp = mini.add_node("copy", [src], {}, ValueInfo(info.shape, info.dtype), g.node(n)["loc"])
    plan = plan_fusion(mini, scope.machine)
    grp = plan.groups[plan.group_of[cp]]
    stores = {cp: target if isinstance(target, st.Access) else st.full_access(scope.buffers[target])}
    scope.count += 1
    name = scope.unique(f"copy_{scope.count}")
    return VectorTiler(mini, grp, plan, {src: access}, stores, scope.view, scope.machine, name).build()


def fill_program(g, n, target, value, scope):
    """A tile program filling the whole of ``target`` (an Access) with ``value``."""
    from .vector_tiling import VectorTiler
    info = g.info(n)
    mini = TensorGraph(f"fill{n}")
    f = mini.add_node("full", [], {"shape": tuple(info.shape), "value": value, "dtype": info.dtype},
                      ValueInfo(info.shape, info.dtype), g.node(n)["loc"])
    plan = plan_fusion(mini, scope.machine)
    grp = plan.groups[plan.group_of[f]]
    scope.count += 1
    name = scope.unique(f"fill_{scope.count}")
    return VectorTiler(mini, grp, plan, {}, {f: target}, scope.view, scope.machine, name).build()

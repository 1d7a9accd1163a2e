"""Kernel nodes through the Tensor-level pipeline (``ir/kernel_node.py``): the tiling pass gives each
argument of a ``custom_kernel`` node a GM buffer and emits a ``KernelCall`` item; ``lower_blocks`` makes it
one Task of the prebuilt kernel; the memory and sync passes leave that kernel alone (``PREBUILT``).

Buffers (called from passes/tiling.py):
* an argument the kernel only reads is passed where its value lives when that is one whole buffer (a
  view of it included), else copied into a contiguous workspace first;
* an argument it writes gets a workspace of its own, which holds the node's result afterwards (the
  kernel may read the old value, and may write only part of it): the old value is stored there by its
  producer when the node is its only reader (``plan``), else copied there; except where the result is the
  argument's new value built in its own buffer (an out-param, a loop-carried tensor) and the node is the
  only reader of the old value: then the kernel updates that buffer in place (``_own_buffer``).
The Task declares no regions: its accesses are the kernel's loads and stores of the bound buffers
(runtime/host/control.py), the whole of each, so the host runtime orders it against every other task.
"""
from __future__ import annotations

import copy

from ..errors import CompileError
from ..ir.execution import Task
from ..ir.kernel_node import KernelCall
from . import storage as st

PREBUILT = "prebuilt"          # Kernel.attrs key: compiled by its front end, nothing more to do
_FRONT_ENDS = {"pro": "pl.jit", "tile": "pt.kernel"}


def node_of(g, n):
    return g.node(n)["attrs"]["kernel"]


def plan(body, n) -> None:
    """Before emission: a workspace per written argument, where a producer that only this node reads
    stores the old value straight away."""
    g = body.g
    node = node_of(g, n)
    ins = g.node(n)["inputs"]
    results = {g.node(u)["attrs"]["index"]: u for u in g.users(n) if g.op(u) == "kernel_result"}
    homes = []
    for j, p in enumerate(node.outputs):
        if p in node.fresh:
            homes.append(_fresh_home(body, node, p, results.get(j)))
            continue
        src = ins[node.params.index(p)]
        acc = _own_buffer(body, n, src, results.get(j))
        if acc is None:
            info = g.info(src)
            acc = body.scope.workspace(f"{node.name}_{p}", info.shape, info.dtype)
            body.store_straight_into(src, n, acc)
        homes.append(acc)
    body.kernel_homes[n] = homes


def _fresh_home(body, node, p, result):
    """Where an output-only param (``KernelNode.fresh``: written whole) is built: the buffer its result is
    wanted in when that is a whole one (a graph output), else a workspace."""
    want = body.wants.get(result) if result is not None else None
    if want and want[0].is_full:
        acc = want.pop(0)
        if not want:
            del body.wants[result]
        return acc
    info = node.fresh[p]
    return body.scope.workspace(f"{node.name}_{p}", info.shape, info.dtype)


def _own_buffer(body, n, src, result):
    """The argument's own buffer, written in place by the kernel, when the kernel's result is the written
    argument's new value (an out-param or a loop-carried tensor, passes/out_params.py: the buffer is in the
    result's wants, or the result is copied there at the end) and the kernel is the only reader of the old
    value: a decode step updating a state pool then moves no copy of the pool. Else None (a workspace)."""
    g = body.g
    home = body.storage.get(src)
    if result is None or home is None or not home.is_full or any(u != n for u in g.users(src)):
        return None
    others = [body.storage.get(i) for i in g.node(n)["inputs"] if i != src]
    if any(a is not None and a.buffer == home.buffer for a in others):
        return None                       # the same buffer also read through another argument
    want = body.wants.get(result)
    if want and _same(want[0], home):
        return home
    late = [k for k, (f, acc) in enumerate(body.late) if f == result and _same(acc, home)]
    if late:                              # out_params would copy it back at the end: no reader needs the old value
        del body.late[late[0]]
        return home
    return None


def emit(body, n) -> None:
    g = body.g
    gnode = g.node(n)
    node = node_of(g, n)
    build = node.build(body.scope.machine)
    homes = body.kernel_homes[n]
    gm_args = {p: homes[node.outputs.index(p)].buffer for p in node.fresh}
    for p, src in zip(node.params, gnode["inputs"]):
        if p in node.outputs:
            acc = homes[node.outputs.index(p)]
            if not (src in body.storage and _same(body.storage[src], acc)):
                body._copy(src, acc)
            gm_args[p] = acc.buffer
            continue
        acc = body.storage.get(src)
        if acc is None:
            raise CompileError(f"internal: argument '{p}' of kernel {node.name} has no GM home", loc=gnode["loc"])
        if not acc.is_full:
            info = g.info(src)
            tmp = body.scope.workspace(f"{node.name}_{p}_c", info.shape, info.dtype)
            body._copy(src, tmp)
            acc = tmp
        gm_args[p] = acc.buffer
    for p, shape, dtype in build.workspaces:
        gm_args[p] = body.scope.add_buffer(f"{node.name}_{p}", shape, dtype, "workspace").name
    for p, shape, dtype, base in build.views:
        b = body.scope.buffers[gm_args[base]]
        gm_args[p] = body.scope.add_buffer(f"{node.name}_{p}", shape, dtype, "workspace", view_of=b.name).name
    body.items.append(KernelCall(node.name, build, gm_args, gnode["loc"], node.level))


def result(body, n) -> None:
    """A kernel_result node: the value lives in its argument's workspace."""
    g = body.g
    src = g.node(n)["inputs"][0]
    body.storage[n] = body.kernel_homes[src][g.node(n)["attrs"]["index"]]


def _same(a: st.Access, b: st.Access) -> bool:
    return a.buffer == b.buffer and a.is_full and b.is_full


def lower_call(call: KernelCall, kernels: dict) -> Task:
    """The Task of a KernelCall; its kernel joins ``kernels`` once (a copy marked PREBUILT, renamed when
    another kernel has its name)."""
    source = call.build.kernel
    kernel = next((k for k in kernels.values() if k.attrs.get("_source") is source), None)
    if kernel is None:
        name, k = source.name, 1
        while name in kernels:
            k += 1
            name = f"{source.name}_{k}"
        kernel = copy.copy(source)
        kernel.name = name
        where = f" at {call.loc}" if call.loc else ""
        front = _FRONT_ENDS.get(call.level, call.level)
        decisions = {**source.attrs.get("decisions", {}),
                     "hint": f"a {front} kernel called as a graph node{where}: its tiles, buffers and pipelining "
                             "are its own"}
        kernel.attrs = {**source.attrs, PREBUILT: True, "_source": source, "decisions": decisions}
        kernels[name] = kernel
    return Task(kernel.name, dict(call.gm_args), dict(call.build.scalars), call.build.block_dim, None, None,
                call.loc, call.name)


def is_prebuilt(kernel) -> bool:
    return bool(kernel.attrs.get(PREBUILT))

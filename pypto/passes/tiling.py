"""The tiling pass: TensorGraph -> TileGraph.

Walks the fusion plan in program order and gives every value a home: graph inputs and constants
are GM buffers; views (box, expand, transpose, size-1 reshape) are accesses of their source's
buffer; a general reshape reinterprets a contiguous buffer (``Buffer.view_of``); a fused vector
group becomes one TileProgram (vector_tiling), storing the values other groups or the caller need
into a workspace or straight into an output buffer; a matmul becomes a cube TileProgram
(cube_tiling); ``pypto.loop`` becomes a TileLoop with its body tiled the same way, carried tensors
updated in place; ``assemble`` writes its source into a box of its destination's buffer.
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..errors import CompileError
from ..ir.execution import Buffer
from ..ir.tile_graph import TileGraph, TileLoop
from . import storage as st
from .fusion import plan_fusion
from .iterspace import op_class


class _Scope:
    """Tiling state shared by a graph and the bodies of its loops."""

    def __init__(self, machine, buffers):
        self.machine = machine
        self.buffers = buffers
        self.names: set = set(buffers)
        self._views: dict = {}
        self.count = 0

    def unique(self, base: str) -> str:
        base = "".join(c if (c.isalnum() or c == "_") else "_" for c in base) or "t"
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}{k}"
        self.names.add(name)
        return name

    def add_buffer(self, base, shape, dtype, role, **kw) -> Buffer:
        b = Buffer(self.unique(base), tuple(shape), dtype, role, **kw)
        self.buffers[b.name] = b
        return b

    def root(self, name):
        b = self.buffers[name]
        off = 0
        while b.view_of is not None:
            off = off + b.view_offset if not (isinstance(off, int) and off == 0) else b.view_offset
            b = self.buffers[b.view_of]
        return b, off

    def view(self, buffer: str, shape) -> str:
        """A buffer with exactly ``shape`` over the same bytes as ``buffer`` (itself when equal)."""
        b = self.buffers[buffer]
        shape = tuple(shape)
        if len(shape) == len(b.shape) and all(sym.equal(x, y) is True for x, y in zip(shape, b.shape)):
            return buffer
        key = (buffer, tuple(str(s) for s in shape))
        if key not in self._views:
            root, off = self.root(buffer)
            v = self.add_buffer(f"{buffer}_v", shape, b.dtype, "view", view_of=root.name, view_offset=off)
            self._views[key] = v.name
        return self._views[key]


def build_tile_graph(g, machine, *, fuse: bool = True) -> TileGraph:
    buffers: dict = {}
    scope = _Scope(machine, buffers)
    inputs = []
    for k, nid in enumerate(g.inputs):
        info = g.info(nid)
        b = scope.add_buffer(info.name or f"in{k}", info.shape, info.dtype, "input")
        inputs.append(b.name)
    outputs = []
    out_target = {}
    for k, o in enumerate(g.outputs):
        info = g.info(o.node)
        b = scope.add_buffer(f"out{k}", info.shape, info.dtype, "output")
        outputs.append(b.name)
        out_target.setdefault(o.node, []).append(b.name)
    storage = {nid: st.full_access(buffers[name]) for nid, name in zip(g.inputs, inputs)}
    items = _tile_body(g, scope, storage, out_target, fuse)
    return TileGraph(g.name, buffers, inputs, outputs, items, list(g.symbols))


def _tile_body(g, scope, storage, out_target, fuse):
    """Tile programs (and loops) for graph ``g``; ``storage`` holds the accesses known so far
    (the graph's inputs); ``out_target``: node -> buffers the value must end up in."""
    from .vector_tiling import VectorTiler
    plan = plan_fusion(g, scope.machine, enable=fuse)
    items = []
    users = {n: g.users(n) for n in g.nodes()}
    # values each group must store, and where
    stores_of = {}
    for gid, grp in plan.groups.items():
        members = set(grp.nodes)
        stores_of[gid] = {}
        for n in grp.nodes:
            outside = [u for u in users[n] if u not in members]
            if n in out_target or outside:
                stores_of[gid][n] = None
    pending_out = dict(out_target)
    for kind, ident in plan.order:
        if kind == "group":
            grp = plan.groups[ident]
            if grp.kind == "matmul":
                from .cube_tiling import matmul_program
                n = grp.nodes[0]
                acc = _store_target(g, scope, storage, n, pending_out)
                prog = matmul_program(g, n, storage, acc, scope, _pname(g, grp, scope))
                items.extend(prog if isinstance(prog, list) else [prog])
                continue
            stores = {}
            for n in stores_of[ident]:
                stores[n] = _store_target(g, scope, storage, n, pending_out)
            tiler = VectorTiler(g, grp, plan, storage, stores, scope.view, scope.machine, _pname(g, grp, scope))
            items.append(tiler.build())
            continue
        n = ident
        cls = op_class(g, n)
        if cls == "source":
            if g.op(n) == "constant":
                value = g.node(n)["attrs"]["value"]
                info = g.info(n)
                b = scope.add_buffer(f"const{n}", info.shape, info.dtype, "constant", data=value)
                storage[n] = st.full_access(b)
        elif cls == "scalar":
            pass
        elif cls in ("access", "alias"):
            acc = _derive_access(g, n, storage, scope)
            if acc is None:
                raise CompileError(f"{g.op(n)} of a non-contiguous view needs a copy, which is not supported yet",
                                   loc=g.node(n)["loc"])
            storage[n] = acc
        else:
            raise CompileError(f"op '{g.op(n)}' is not lowered yet", loc=g.node(n)["loc"])
    # graph outputs that no program wrote (inputs, views): copy them
    for n, targets in pending_out.items():
        for t in targets:
            items.append(_copy_program(g, n, storage, scope, t))
    return items


def _pname(g, grp, scope) -> str:
    last = grp.nodes[-1]
    ops = [g.op(n) for n in grp.nodes if g.op(n) not in ("cast",)] or [g.op(last)]
    base = ops[-1] if len(ops) == 1 else f"{ops[0]}_{ops[-1]}"
    scope.count += 1
    return scope.unique(f"{base}_{scope.count}")


def _store_target(g, scope, storage, n, pending_out) -> st.Access:
    """The buffer a group writes value ``n`` to: an output buffer when the caller wants it, else a workspace."""
    targets = pending_out.get(n)
    info = g.info(n)
    if targets:
        name = targets[0]
        rest = targets[1:]
        if rest:
            pending_out[n] = rest
        else:
            del pending_out[n]
        b = scope.buffers[name]
    else:
        b = scope.add_buffer(f"ws{n}", info.shape, info.dtype, "workspace")
    acc = st.full_access(b)
    storage[n] = acc
    return acc


def _derive_access(g, n, storage, scope):
    op = g.op(n)
    node = g.node(n)
    src = node["inputs"][0]
    if src not in storage:
        raise CompileError(f"internal: {op} reads a value that is not in GM", loc=node["loc"])
    acc = storage[src]
    a = node["attrs"]
    in_shape, out_shape = g.info(src).shape, g.info(n).shape
    if op == "view":
        return st.view_access(acc, a["offsets"], a["shape"])
    if op == "expand":
        return st.expand_access(acc, in_shape, out_shape)
    if op == "permute":
        return st.permute_access(acc, a["dims"])
    if op == "transpose":
        perm = list(range(len(in_shape)))
        perm[a["dim0"]], perm[a["dim1"]] = perm[a["dim1"]], perm[a["dim0"]]
        return st.permute_access(acc, perm)
    if op == "reshape":
        from .iterspace import is_unit_reshape
        if is_unit_reshape(in_shape, out_shape):
            return st.unit_reshape_access(acc, in_shape, out_shape)
        start = st.contiguous_start(acc)
        broadcast = any(v is None and not (isinstance(d, int) and d == 1) for v, d in zip(acc.vdims, in_shape))
        if start is None or broadcast:
            return None
        root, off = scope.root(acc.buffer)
        total = start if (isinstance(off, int) and off == 0) else sym.simplify(sympy.sympify(off) + start)
        b = scope.add_buffer(f"{root.name}_r", out_shape, g.info(n).dtype, "view", view_of=root.name,
                             view_offset=total)
        return st.full_access(b)
    raise CompileError(f"access op '{op}' is not lowered yet", loc=node["loc"])


def _copy_program(g, n, storage, scope, target):
    from .copy_tiling import copy_program
    return copy_program(g, n, storage[n] if n in storage else None, scope, target)


__all__ = ["build_tile_graph", "TileLoop"]

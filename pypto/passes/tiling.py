"""The tiling pass: TensorGraph -> TileGraph.

Walks the fusion plan in program order and gives every value a home in GM:
* graph inputs and constants are buffers; views (box, expand, transpose, size-1 reshape) are
  accesses of their source's buffer; a general reshape reinterprets a contiguous buffer
  (``Buffer.view_of``);
* a fused vector group becomes one TileProgram (vector_tiling) storing the values that others
  need into a workspace, straight into an output buffer, or into the box of a tensor that an
  ``assemble`` writes in place; a matmul becomes a cube TileProgram (cube_tiling);
* ``assemble(dst, src)`` writes in place when nothing reads ``dst`` afterwards and ``dst`` is
  ours to change (the producer of ``src`` then stores straight into the box); otherwise ``dst``
  and ``src`` are copied into a new buffer. ``concat``, ``pad`` and ``fillpad`` build a new buffer
  from boxes the same way;
* ``pypto.loop`` becomes a TileLoop with its symbolic bounds; a carried tensor lives in one buffer
  that every iteration updates in place (its initial value is stored or copied there first).
* an argument the function writes (an out-param: ``out[...] = expr``) is its own output buffer: its new
  value is built there when no old value can be read after being overwritten (out_params.py), else
  built elsewhere and copied there after every other program.
Values the caller wants that no program wrote where wanted are copied at the end.
"""
from __future__ import annotations

import networkx as nx
import sympy

from .. import symbolic as sym
from ..errors import CompileError
from ..ir.execution import Buffer
from ..ir.tile_graph import TileGraph, TileLoop
from . import flash, kernel_nodes, out_params, storage as st
from .fusion import plan_fusion
from .iterspace import op_class
from .exprs import same



class _Scope:
    """Tiling state shared by a graph and the bodies of its loops."""

    def __init__(self, machine, buffers):
        self.machine = machine
        self.buffers = buffers
        self.names: set = set(buffers)
        self._views: dict = {}
        self.count = 0
        self.loop_vars: dict = {}         # index symbol of each loop being tiled -> (first, last) value
        self.loop_stack: list = []        # index symbols of the loops whose body is being tiled, outermost first
        self.static_masks = True          # cube tiles skip what compile-time masks discard (static_masks.py)

    def unique(self, base: str) -> str:
        base = "".join(c if (c.isalnum() or c == "_") else "_" for c in base) or "t"
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}{k}"
        self.names.add(name)
        return name

    def add_buffer(self, base, shape, dtype, role, **kw) -> Buffer:
        if role == "workspace" and self.loop_stack:
            # made while tiling a loop body: it holds a value of one iteration (carried values live in
            # buffers the enclosing body made), so each iteration may use a copy of its own (multibuffer.py)
            kw.setdefault("private_to", tuple(self.loop_stack))
        b = Buffer(self.unique(base), tuple(shape), dtype, role, **kw)
        self.buffers[b.name] = b
        return b

    def workspace(self, base, shape, dtype) -> st.Access:
        """A workspace for a value of ``shape``: the whole buffer, or, when a size depends on the index of
        an enclosing loop (a tail block's valid rows), the leading box of a buffer of the bounding size
        (buffers are sized once per launch, not per iteration)."""
        bounded = tuple(self._bound(d) for d in shape)
        b = self.add_buffer(base, bounded, dtype, "workspace")
        acc = st.full_access(b)
        if bounded == tuple(shape):
            return acc
        return st.view_access(acc, (0,) * len(shape), tuple(shape))

    def _bound(self, d):
        if isinstance(d, int) or not (d.free_symbols & self.loop_vars.keys()):
            return d
        mins = [a for a in sympy.Add.make_args(d) if isinstance(a, sympy.Min)] if isinstance(d, sympy.Add) else []
        if len(mins) == 1:
            # min(i*t + t, n) - i*t is min(t, n - i*t): bounded by t, the loop-free argument
            d = sympy.Min(*(sym.simplify(a + d - mins[0]) for a in mins[0].args))
        if isinstance(d, sympy.Min):
            free = [a for a in d.args if not (a.free_symbols & self.loop_vars.keys())]
            if free:
                return sym.simplify(sympy.Min(*free)) if len(free) > 1 else free[0]
        loops = [v for v in d.free_symbols if v in self.loop_vars]
        if len(loops) == 1 and _degree(d, loops[0]) == 1:
            # linear in one loop index: largest at an end of the loop's range
            lo, hi = self.loop_vars[loops[0]]
            ends = [sym.simplify(d.subs(loops[0], e)) for e in (lo, hi)]
            if not any(e.free_symbols & self.loop_vars.keys() for e in ends if isinstance(e, sympy.Basic)):
                return sym.simplify(sympy.Max(*ends))
        raise CompileError(f"a value of size {d} (it depends on a loop index) must be kept in memory, and its "
                           "largest size is not known", hint="give the view a tile shape and a valid_shape: "
                           "pypto.view(x, [64, n], [i * 64, 0], valid_shape=[pypto.min(64, m - i * 64), n])")

    def root(self, name):
        b = self.buffers[name]
        off = 0
        while b.view_of is not None:
            off = b.view_offset if (isinstance(off, int) and off == 0) else sym.simplify(off + b.view_offset)
            b = self.buffers[b.view_of]
        return b, off

    def view(self, buffer: str, shape) -> str:
        """A buffer with exactly ``shape`` over the same bytes as ``buffer`` (itself when equal)."""
        b = self.buffers[buffer]
        shape = tuple(shape)
        if len(shape) == len(b.shape) and all(same(x, y) for x, y in zip(shape, b.shape)):
            return buffer
        key = (buffer, tuple(str(s) for s in shape))
        if key not in self._views:
            root, off = self.root(buffer)
            v = self.add_buffer(f"{buffer}_v", shape, b.dtype, "view", view_of=root.name, view_offset=off)
            self._views[key] = v.name
        return self._views[key]


def build_tile_graph(g, machine, *, fuse: bool = True, static_masks: bool = True, flash: bool = True) -> TileGraph:
    buffers: dict = {}
    scope = _Scope(machine, buffers)
    scope.static_masks = static_masks
    scope.flash = flash                   # attention as one cluster kernel (flash.py)
    inputs = []
    for k, nid in enumerate(g.inputs):
        info = g.info(nid)
        b = scope.add_buffer(info.name or f"in{k}", info.shape, info.dtype, "input")
        inputs.append(b.name)
    outputs = []
    wants = {}
    out_params = []
    for k, o in enumerate(g.outputs):
        if o.kind == "inplace":
            # an argument written by the function: its new value goes back into its own buffer
            name = inputs[o.index]
            outputs.append(name)
            out_params.append((o.node, g.inputs[o.index], st.full_access(buffers[name])))
            continue
        info = g.info(o.node)
        b = scope.add_buffer(f"out{k}", info.shape, info.dtype, "output")
        outputs.append(b.name)
        wants.setdefault(o.node, []).append(st.full_access(b))
    storage = {nid: st.full_access(buffers[name]) for nid, name in zip(g.inputs, inputs)}
    items = _Body(g, scope, storage, wants, set(), fuse, out_params).run()
    return TileGraph(g.name, buffers, inputs, outputs, items, list(g.symbols))


def _same_place(a: st.Access, b: st.Access) -> bool:
    return (a.buffer == b.buffer and tuple(map(str, a.offsets)) == tuple(map(str, b.offsets))
            and tuple(map(str, a.extents)) == tuple(map(str, b.extents)) and a.vdims == b.vdims)


class _Body:
    """Tiles one graph (the program, or a loop body). ``wants``: node -> accesses its value must be
    written to; ``mutable``: input nodes whose buffers this graph may update in place."""

    def __init__(self, g, scope, storage, wants, mutable, fuse, out_params=()):
        self.g, self.scope, self.storage = g, scope, storage
        self.wants = {n: list(v) for n, v in wants.items()}
        self.mutable = set(mutable)
        self.out_params = list(out_params)    # (final value, argument node, the argument's buffer)
        self.late: list = []                  # (value, access) copied after every program
        self.copy_in: set = set()             # in-place assembles whose source is copied in, not stored there
        self.snapshots: dict = {}             # late value -> the workspace it is copied to where it stands
        self.plan = plan_fusion(g, scope.machine, enable=fuse)
        self.items: list = []
        self.pos = {}
        for k, (kind, ident) in enumerate(self.plan.order):
            if kind == "group":
                for n in self.plan.groups[ident].nodes:
                    self.pos[n] = k
            else:
                self.pos[ident] = k
        self.writer = {n for grp in self.plan.groups.values() for n in grp.nodes}   # stored by their program
        self.homes: dict = {}        # node -> Access decided ahead (in-place targets)
        self.inplace: set = set()    # assemble nodes written in place
        self.carried: dict = {}      # loop node -> [buffer Access per carried value]
        self.kernel_homes: dict = {}  # kernel node -> [buffer Access per written argument] (kernel_nodes.py)

    # ------------------------------------------------------------------ planning ahead
    def _later_users_ok(self, d, a) -> bool:
        """Every other reader of d runs before the assemble a (it is one of a's ancestors), and no output
        wants d's value but where it is built (an out-param's buffer)."""
        anc = nx.ancestors(self.g.nx, a)
        home = self.homes.get(d)
        return (all(u == a or u in anc for u in self.g.users(d))
                and all(w is home for w in self.wants.get(d, ())))

    def _home_of(self, n):
        """A mutable buffer home for value n, creating one for values a program will store."""
        if n in self.homes:
            return self.homes[n]
        g = self.g
        op = g.op(n)
        if n in self.mutable:
            return self.storage[n]
        if op == "assemble" and n in self.inplace:
            return self._home_of(g.node(n)["inputs"][0])
        if n in self.writer or op in ("concat", "pad", "fillpad"):
            info = g.info(n)
            acc = self.scope.workspace(f"ws{n}", info.shape, info.dtype)
            self.homes[n] = acc
            if n in self.writer:
                self.wants.setdefault(n, []).insert(0, acc)
            return acc
        if op == "loop_result":
            loop = g.node(n)["inputs"][0]
            return self.carried[loop][g.node(n)["attrs"]["index"]]
        return None

    def _plan_out_params(self):
        """Each written argument's new value built in its own buffer when that is safe, else built
        elsewhere and copied there after every program (passes/out_params.py)."""
        g = self.g
        decisions = out_params.plan_out_params(g, self.plan, self.pos, self.writer, self.wants,
                                               [(f, i) for f, i, _ in self.out_params])
        for (f, i, buf), d in zip(self.out_params, decisions):
            if f == i:
                continue
            if not d.in_place:
                self.late.append((f, buf))
                if d.snapshot:
                    self.snapshots[f] = None
                continue
            self.copy_in |= d.copy_in
            base, chain = out_params.chain_of(g, f)
            if base == i:
                self.mutable.add(i)             # the partial writes go into boxes of the argument
            else:
                if base in self.writer:
                    self.homes[base] = buf
                self.wants.setdefault(base, []).insert(0, buf)
            if chain:
                self.wants.setdefault(f, []).append(buf)

    def _plan(self):
        g = self.g
        self._plan_out_params()
        for n in g.nodes():
            op = g.op(n)
            if op == "loop":
                self._plan_loop(n)
            elif op == "custom_kernel":
                kernel_nodes.plan(self, n)
            elif op == "assemble":
                d, s = g.node(n)["inputs"]
                ok = (self._later_users_ok(d, n)
                      and (d not in self.writer or self.pos.get(s, -1) > self.pos.get(d, -1))
                      and not (s in self.writer and d in self.writer
                               and self.plan.group_of.get(s) == self.plan.group_of.get(d)))
                home = self._home_of(d) if ok else None
                if home is not None and home.is_full:
                    self.inplace.add(n)
                    box = st.view_access(home, g.node(n)["attrs"]["offsets"], g.info(s).shape)
                    if s in self.writer and g.op(s) != "scalar" and n not in self.copy_in:
                        self.wants.setdefault(s, []).append(box)
            elif op == "concat":
                home = self._concat_home(n)
                off = 0
                dim = g.node(n)["attrs"]["dim"]
                for s in g.node(n)["inputs"]:
                    shape = g.info(s).shape
                    offs = [0] * len(shape)
                    offs[dim] = off
                    if s in self.writer:
                        self.wants.setdefault(s, []).append(st.view_access(home, offs, shape))
                    off = sym.simplify(off + shape[dim]) if not isinstance(off, int) or not isinstance(shape[dim], int) \
                        else off + shape[dim]

    def _concat_home(self, n):
        if n in self.homes:
            return self.homes[n]
        want = self.wants.get(n)
        if want and want[0].is_full:
            acc = want.pop(0)
            if not want:
                del self.wants[n]
        else:
            info = self.g.info(n)
            acc = self.scope.workspace(f"ws{n}", info.shape, info.dtype)
        self.homes[n] = acc
        return acc

    def store_straight_into(self, src, n, acc) -> None:
        """``n`` (a loop or a kernel node) reads ``src`` into the workspace ``acc``: when ``n`` is its only
        reader and a program here writes it, that program stores it in ``acc`` straight away (no copy)."""
        if src in self.writer and all(u == n for u in self.g.users(src)) and src not in self.wants:
            self.wants[src] = [acc]

    def _plan_loop(self, n):
        g = self.g
        attrs = g.node(n)["attrs"]
        results = {g.node(u)["attrs"]["index"]: u for u in g.users(n) if g.op(u) == "loop_result"}
        bufs = []
        for j, pos in enumerate(attrs["carried"]):
            init = g.node(n)["inputs"][pos]
            res = results.get(j)
            want = self.wants.get(res) if res is not None else None
            if want and want[0].is_full:
                acc = want.pop(0)
                if not want:
                    del self.wants[res]
            else:
                info = g.info(init)
                acc = self.scope.workspace(f"carry{n}_{j}", info.shape, info.dtype)
            bufs.append(acc)
            self.store_straight_into(init, n, acc)
        self.carried[n] = bufs

    # ------------------------------------------------------------------ emission
    def run(self):
        self._plan()
        flash.plan_body(self)                 # attention shapes: one flash kernel each (flash.py)
        from .vector_tiling import NeedsCopy, VectorTiler
        g = self.g
        late = {f for f, _ in self.late}      # written arguments copied at the end: their programs store them
        for kind, ident in self.plan.order:
            if ident in self.flash_skip and kind in ("group", "node"):
                continue                      # computed inside a flash kernel
            if kind == "group" and ident in self.flash_at:
                flash.emit(self, self.flash_at[ident])
                continue
            if kind == "group":
                grp = self.plan.groups[ident]
                if grp.kind == "matmul":
                    from .cube_tiling import matmul_program
                    n = grp.nodes[0]
                    acc = self._store_target(n)
                    for _attempt in range(3):       # each strided operand is copied contiguous once
                        try:
                            prog = matmul_program(g, n, self.storage, acc, self.scope, _pname(g, grp, self.scope))
                            break
                        except NeedsCopy as need:
                            self._copy_contiguous(need.src)
                    progs = prog if isinstance(prog, list) else [prog]
                    if n in self.flash_why:
                        for p in progs:
                            p.attrs["flash"] = f"not flash: {self.flash_why[n]}"
                    _record_tile_source(g, [n], progs, "cube_tile")
                    self.items.extend(progs)
                    self._extra_copies(n, acc)
                    continue
                members = set(grp.nodes)
                stores = {}
                for n in grp.nodes:
                    if any(u not in members for u in g.users(n)) or n in self.wants or n in late:
                        stores[n] = self._store_target(n)
                name = _pname(g, grp, self.scope)
                for _attempt in range(8):
                    try:
                        prog = self._fitting_program(grp, stores, name)
                        break
                    except NeedsCopy as need:
                        self._copy_contiguous(need.src)
                from .cube_tiling import narrow_a_producer
                prog = narrow_a_producer(g, stores, prog, self.scope)   # masked softmax: the columns P @ V reads
                _record_tile_source(g, grp.nodes, [prog], "vec_tile")
                self.items.append(prog)
                for n in stores:
                    self._extra_copies(n, stores[n])
                continue
            self._node(ident)
            if ident in self.snapshots:
                self._snapshot(ident)
        # values still wanted somewhere: copy them
        for n, accs in list(self.wants.items()):
            for acc in accs:
                if n in self.storage and _same_place(self.storage[n], acc):
                    continue
                self._copy(n, acc)
        # written arguments not built in place: last, after every read of their old values
        from .copy_tiling import copy_program
        for n, acc in self.late:
            src = self.snapshots.get(n) or self.storage[n]
            if not _same_place(src, acc):
                self.items.append(copy_program(self.g, n, src, self.scope, acc))
        return self.items

    def _snapshot(self, n):
        """An old argument value (or a view of one) that another argument takes: copied aside here,
        before the writes that replace it."""
        info = self.g.info(n)
        tmp = self.scope.workspace(f"ws{n}_old", info.shape, info.dtype)
        self._copy(n, tmp)
        self.snapshots[n] = tmp

    def _copy_contiguous(self, src):
        """Value ``src`` copied to a contiguous workspace, which its readers then read."""
        info = self.g.info(src)
        tmp = self.scope.workspace(f"ws{src}_c", info.shape, info.dtype)
        self._copy(src, tmp)
        self.storage[src] = tmp

    def _fitting_program(self, grp, stores, name):
        """The group's TileProgram with tiles the memory planner can place: the chooser's UB estimate
        first; when the planned block overflows, smaller budgets; when even the smallest tiles overflow,
        the program without its second (ping-pong) copy. The memory pass reports what still overflows."""
        from .tile_choice import TilingError
        from .vector_tiling import VectorTiler

        def build(scale):
            tiler = VectorTiler(self.g, grp, self.plan, self.storage, stores, self.scope.view,
                                self.scope.machine, name)
            tiler.ub_scale = scale
            return tiler.build()
        try:
            prog = build(1.0)
        except TilingError as first:
            try:
                prog = build(0.5)    # transposing loads then take narrower tiles
            except TilingError:
                raise first from None
        if _ub_fits(prog, self.scope.machine):
            return prog
        for scale in (0.5, 0.25, 0.125):
            try:
                smaller = build(scale)
            except TilingError:
                break
            if _ub_fits(smaller, self.scope.machine):
                return smaller
            prog = smaller
        prog.attrs["pingpong"] = False
        return prog

    def _store_target(self, n) -> st.Access:
        accs = self.wants.get(n)
        if accs:
            acc = accs.pop(0)
            if not accs:
                del self.wants[n]
        else:
            info = self.g.info(n)
            acc = self.scope.workspace(f"ws{n}", info.shape, info.dtype)
        self.storage[n] = acc
        return acc

    def _extra_copies(self, n, first):
        """A value wanted in several places: the program stored it once; copy it to the others."""
        for acc in self.wants.pop(n, []):
            self._copy(n, acc)

    def _copy(self, n, target: st.Access):
        from .copy_tiling import copy_program, fill_program
        if n not in self.storage and self.g.op(n) == "scalar":     # a 0-d constant output: made in the kernel
            self.items.append(fill_program(self.g, n, target, self.g.node(n)["attrs"]["value"], self.scope))
            return
        if n not in self.storage:
            raise CompileError(f"internal: value %{n} ({self.g.op(n)}) has no GM home to copy from",
                               loc=self.g.node(n)["loc"])
        self.items.append(copy_program(self.g, n, self.storage[n], self.scope, target))

    def _node(self, n):
        g = self.g
        cls = op_class(g, n)
        node = g.node(n)
        if cls == "source":
            if g.op(n) == "constant":
                info = g.info(n)
                b = self.scope.add_buffer(f"const{n}", info.shape, info.dtype, "constant", data=node["attrs"]["value"])
                self.storage[n] = st.full_access(b)
        elif cls == "scalar":
            pass
        elif cls in ("access", "alias"):
            acc = _derive_access(g, n, self.storage, self.scope)
            if acc is None:
                # a reshape of a box that is not one contiguous run: copy it first
                src = node["inputs"][0]
                info = g.info(src)
                tmp = self.scope.workspace(f"ws{src}_c", info.shape, info.dtype)
                self._copy(src, tmp)
                self.storage[src] = tmp
                acc = _derive_access(g, n, self.storage, self.scope)
            self.storage[n] = acc
        elif cls == "assemble":
            self._assemble(n)
        elif cls == "concat":
            self._concat(n)
        elif cls in ("pad", "fillpad"):
            self._pad(n)
        elif cls == "loop":
            self._loop(n)
        elif cls == "loop_result":
            loop = node["inputs"][0]
            self.storage[n] = self.carried[loop][node["attrs"]["index"]]
        elif cls == "kernel":
            kernel_nodes.emit(self, n)
        elif cls == "kernel_result":
            kernel_nodes.result(self, n)
        else:
            raise CompileError(f"op '{g.op(n)}' is not lowered yet", loc=node["loc"])

    def _assemble(self, n):
        g = self.g
        d, s = g.node(n)["inputs"]
        offsets = g.node(n)["attrs"]["offsets"]
        if n in self.inplace:
            home = self._home_of(d)
            box = st.view_access(home, offsets, g.info(s).shape)
            if not (s in self.storage and _same_place(self.storage[s], box)):
                if s in self.writer and g.op(s) != "scalar" and n not in self.copy_in:
                    raise CompileError("internal: assemble source was not stored in place", loc=g.node(n)["loc"])
                self._copy(s, box)
            self.storage[n] = home
            return
        info = g.info(n)
        home = self.scope.workspace(f"ws{n}", info.shape, info.dtype)
        self._copy(d, home)
        self._copy(s, st.view_access(home, offsets, g.info(s).shape))
        self.storage[n] = home

    def _concat(self, n):
        g = self.g
        home = self._concat_home(n)
        dim = g.node(n)["attrs"]["dim"]
        off = 0
        for s in g.node(n)["inputs"]:
            shape = g.info(s).shape
            offs = [0] * len(shape)
            offs[dim] = off
            box = st.view_access(home, offs, shape)
            if not (s in self.storage and _same_place(self.storage[s], box)):
                self._copy(s, box)
            off = off + shape[dim] if isinstance(off, int) and isinstance(shape[dim], int) \
                else sym.simplify(sympy.sympify(off) + shape[dim])
        self.storage[n] = home

    def _pad(self, n):
        """pad / fillpad: fill a new buffer with the value, then copy the input into its box."""
        from .copy_tiling import fill_program
        g = self.g
        a = g.node(n)["attrs"]
        src = g.node(n)["inputs"][0]
        home = self._concat_home(n)
        value = a.get("value", 0)
        value = 0 if value is None else value
        self.items.append(fill_program(g, n, home, value, self.scope))
        shape = g.info(src).shape
        if g.op(n) == "pad":
            pads = list(a["pad"])
            offs = [0] * len(shape)
            for k in range(len(pads) // 2):
                offs[len(shape) - 1 - k] = pads[2 * k]
        else:
            offs = [0] * len(shape)
        self._copy(src, st.view_access(home, offs, shape))
        self.storage[n] = home

    def _loop(self, n):
        g = self.g
        node = g.node(n)
        attrs = node["attrs"]
        body = attrs["body"]
        bufs = self.carried[n]
        carried_pos = list(attrs["carried"])
        # initial values into the carried buffers
        for j, pos in enumerate(carried_pos):
            init = node["inputs"][pos]
            if not (init in self.storage and _same_place(self.storage[init], bufs[j])):
                self._copy(init, bufs[j])
        body_storage = {}
        for k, (bin_, outer) in enumerate(zip(body.inputs, node["inputs"])):
            if k in carried_pos:
                body_storage[bin_] = bufs[carried_pos.index(k)]
            else:
                if outer not in self.storage:
                    raise CompileError(f"internal: loop input %{outer} has no GM home", loc=node["loc"])
                body_storage[bin_] = self.storage[outer]
        # each carried value is the body's written argument: updated in its buffer as an out-param is
        carried = [(o.node, body.inputs[carried_pos[j]], bufs[j]) for j, o in enumerate(body.outputs)]
        last = attrs["start"] + (sympy.ceiling((attrs["stop"] - attrs["start"]) / attrs["step"]) - 1) * attrs["step"]
        self.scope.loop_vars[attrs["var"]] = (attrs["start"], sym.simplify(last))
        self.scope.loop_stack.append(attrs["var"])
        try:
            items = _Body(body, self.scope, body_storage, {}, set(), True, carried).run()
        finally:
            self.scope.loop_stack.pop()
        self.items.append(TileLoop(attrs["var"], attrs["start"], attrs["stop"], attrs["step"], items, node["loc"]))


def _record_tile_source(g, nodes, progs, hint_attr) -> None:
    """The report's decisions: whether a hint (frontend/hints.py) or the chooser set the tiles."""
    source = "hint" if any(g.node(n)["attrs"].get(hint_attr) for n in nodes) else "chooser"
    adjusted = sorted({g.node(n)["attrs"]["hint_adjusted"] for n in nodes if g.node(n)["attrs"].get("hint_adjusted")})
    for p in progs:
        p.attrs["tile_source"] = source
        if adjusted and hint_attr == "vec_tile":
            p.attrs["hint_adjusted"] = adjusted      # passes/hints.py rounded the request to the alignment


def _ub_fits(prog, machine) -> bool:
    """Whether the memory planner places every tile of the vector program's block within the UB."""
    from .memory import plan_memory
    from .to_blocks import lower_program
    kernel, _, regions = lower_program(prog, machine)
    try:
        for b in kernel.blocks:
            plan_memory(b, machine, regions)
    except CompileError:
        return False
    return True


def _pname(g, grp, scope) -> str:
    last = grp.nodes[-1]
    ops = [g.op(n) for n in grp.nodes if g.op(n) not in ("cast",)] or [g.op(last)]
    base = ops[-1] if len(ops) == 1 else f"{ops[0]}_{ops[-1]}"
    scope.count += 1
    return scope.unique(f"{base}_{scope.count}")


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
        box = a.get("tile_shape")
        if box is not None and len(box) == len(out_shape) and tuple(box) != tuple(out_shape) \
                and all(isinstance(d, int) for d in box) and not all(isinstance(d, int) for d in out_shape):
            # CANN's reshape(x, box, valid_shape=v) with a run-time v (a data scalar's tail): the box
            # reinterprets x, v is its region at the origin (a buffer of v's shape could not be
            # allocated before the control program reads the scalar)
            boxed = _derive_box_reshape(acc, in_shape, tuple(box), g.info(n).dtype, scope)
            if boxed is not None:
                return st.view_access(boxed, (0,) * len(box), out_shape)
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


def _derive_box_reshape(acc, in_shape, box, dtype, scope):
    """The access of ``acc`` reshaped to the static ``box`` (None when it is not one contiguous run)."""
    from .iterspace import is_unit_reshape
    if is_unit_reshape(in_shape, box):
        return st.unit_reshape_access(acc, in_shape, box)
    start = st.contiguous_start(acc)
    if start is None or any(v is None and not (isinstance(d, int) and d == 1) for v, d in zip(acc.vdims, in_shape)):
        return None
    root, off = scope.root(acc.buffer)
    total = start if (isinstance(off, int) and off == 0) else sym.simplify(sympy.sympify(off) + start)
    return st.full_access(scope.add_buffer(f"{root.name}_r", box, dtype, "view", view_of=root.name,
                                           view_offset=total))


__all__ = ["build_tile_graph", "TileLoop"]


def _degree(d, var):
    """d's degree as a polynomial in var; None when it is none (a Min or Max of var, a floor)."""
    try:
        return sympy.Poly(d, var).degree()
    except sympy.PolynomialError:
        return None

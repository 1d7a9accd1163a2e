"""The placed tile program as a TileGraph (pypto.ir.tile_graph): the Tile level's compiled form. What
``dump=`` writes as tile_graph.txt / .json / .dot is what pypto/tile/expand.py lowers to Block IR.

One TileProgram per core type (``..._aic`` the cube side, ``..._aiv`` the vector side); its parallel
axes are the kernel's grid (program ids), its ops the PTO instructions of *one* grid point, destination
first, over tiles named once (``<value><role>``: cube l1 / l0a / l0b / l0c, vector ub; ``h0`` / ``h1``
the row halves of a cube tile computed in two halves) and GM tile views whose offsets are expressions of
the program ids and loop indices. Phases: ``setup`` (the same for every grid point: computed once per
core), ``pre`` / ``post`` (before / after the first ``pt.range`` of the kernel body), ``step`` (in a
loop). A ``pt.range`` is a ``TileRange`` holding its body.

The decisions of the placement are all made here: which instruction runs each op (pypto.tile.optable,
read from the instruction table), which tiles are one (a loop-carried tile has one *state* tile for the
whole loop, written in place when nothing reads the old value afterwards, else a ``TMOV_V`` closes the
iteration; a select under a triangular mask writes its input in place under an ``if``), the valid
shapes (a cluster's vector work split by rows: each vector core holds half of the rows), the handoff
stores and loads (``attrs["handoff"]``; workspace offsets use the symbol ``slot``, the copy's slot), and
how each loop is copied (``unroll``, the software-pipelining stages of skew.py).
"""
from __future__ import annotations

import sympy

from ..dtypes import DataType, float32, int32
from ..errors import CompileError
from ..ir.block import BLOCK_IDX, SUBBLOCK_IDX
from ..ir.execution import Buffer
from ..ir.isa import MemSpace
from ..ir.tile_graph import (GMTile, TileAxis, TileGraph, TileHandoff, TileOp, TileParam, TileProgram, TileRange,
                             TileValue)
from .exprs import smax, smin
from .ir import KernelProgram, Loop, Value
from .items import carry_side, side_items
from .optable import OPS
from .placement import CUBE, VECTOR, Placement

ROLE_SPACE = {"l1": MemSpace.L1, "l0a": MemSpace.L0A, "l0b": MemSpace.L0B, "l0c": MemSpace.L0C, "ub": MemSpace.UB}
SLOT = sympy.Symbol("slot", integer=True, nonnegative=True)     # the handoff slot of a copy (expand.py)


def to_tile_graph(program: KernelProgram, pl: Placement, machine, stages: dict | None = None,
                  unroll: dict | None = None, slots: dict | None = None) -> TileGraph:
    """``stages``: {side: {id(loop): stage per item}} of the skewed loops; ``unroll``: {id(loop): copies}
    (default 2); ``slots``: {channel id: workspace slots per block}."""
    sides = [s for s in (CUBE, VECTOR) if pl.kind in (s, "cluster")]
    stages = stages or {}
    builders = [_SideGraph(s, program, pl, machine, stages.get(s, {}), unroll or {}, slots or {}) for s in sides]
    items = [b.build() for b in builders]
    buffers = {p.name: Buffer(p.name, tuple(p.shape), p.dtype, "output" if p.name in program.outputs else "input")
               for p in program.params}
    for b in builders:
        for q in b.params:
            if q.name not in buffers:
                buffers[q.name] = Buffer(q.name, tuple(q.shape), q.dtype, "workspace")
    return TileGraph(program.name, buffers, [p.name for p in program.params if p.name not in program.outputs],
                     sorted(program.outputs), items, sorted({d for p in program.params for d in p.shape
                                                             if isinstance(d, sympy.Symbol)}, key=str))


def acc_dtype(v: Value) -> DataType:
    return int32 if not v.dtype.is_floating else float32


class _SideGraph:
    """The TileProgram of one side: SSA values (id, role) -> tile names, ops -> TileOps."""

    def __init__(self, side, program: KernelProgram, pl: Placement, machine, stages, unroll, slots):
        self.side, self.program, self.pl, self.machine = side, program, pl, machine
        self.stages, self.unroll, self.slots = stages, unroll, slots
        self.tiles: dict = {}                      # name -> TileValue
        self.names: dict = {}                      # (id(value), role) -> tile name
        self.defined_by: dict = {}                 # tile name -> id(value) it was defined for
        self.params = [TileParam(p.name, p.name, p.dtype, tuple(p.shape),
                                 "out" if p.name in program.outputs else "in") for p in program.params]
        self.reshapes: dict = {}                   # id(reshape op) -> scratch number
        self.scratch: list = []                    # (base, rows, cols, view, rows2, cols2, dtype) per reshape
        self._handoffs = 0
        self._whens = 0
        self._phase = "pre"                        # the phase of the ops being written
        self._copy_after: dict = {}                # item index -> [(state tile, next value)] of the list in work
        self.items = side_items(program.body, side, pl)
        self.cluster = pl.kind == "cluster"
        self.split = pl.split_rows if side == VECTOR and self.cluster else None
        self._values = program_values(program)
        self._uses = _use_counts(program)
        self._users = {}
        for o in _ops_in_order(program.body):
            for a in o.values():
                self._users.setdefault(id(a), []).append(o)
        self._loop_of_carry = {id(c): lp for lp in _loops(program.body) for c in lp.carried}
        self.halves = self._cube_halves()

    # ------------------------------------------------------------------ the program
    def build(self) -> TileProgram:
        once, items = self._grid_invariant(self.items)
        ops = self.emit_items(once, phases=["setup"] * len(once))
        first_loop = next((k for k, it in enumerate(items) if it.kind == "loop"), len(items))
        ops += self.emit_items(items, phases=["step" if it.kind == "loop" else "pre" if k < first_loop else "post"
                                              for k, it in enumerate(items)])
        p = self.program
        axes = [TileAxis(f"grid{k}", g, 1, "parallel", pid) for k, (g, pid) in enumerate(zip(p.grid_sizes, p.pids))]
        attrs = {"split_rows": self.pl.split_rows} if self.pl.split_rows else {}
        if self.scratch:
            attrs["scratch"] = list(self.scratch)       # pt.reshape: (base, rows, cols, view, rows2, cols2, dtype)
        return TileProgram(f"{p.name}_{'aic' if self.side == CUBE else 'aiv'}", "matmul" if self.side == CUBE
                           else "vector", axes, self.params, self.tiles, ops, {s.name: s for s in p.grid_sizes},
                           loc=p.loc, attrs=attrs)

    def _grid_invariant(self, items) -> tuple:
        """Top-level ops that compute the same tile for every program (no program id in their offsets,
        valid shapes or scalars; operands of the same kind; loads of tensors the kernel never stores)."""
        pids = set(self.program.pids)
        stored = set(self.program.outputs)
        hoisted, ids = [], set()

        def free(x):
            return pids & sympy.sympify(x).free_symbols if isinstance(x, (sympy.Basic, int)) else set()
        for it in items:
            if it.kind != "op" or it.op.op in ("store",) or it.op.out is None:
                continue
            op = it.op
            # loads and what is computed from them (a fill is as cheap as keeping it live everywhere)
            ok = not any(free(x) for x in op.out.valid) and (op.op == "load" or bool(op.values()))
            for a in op.args:
                if isinstance(a, Value):
                    ok &= id(a) in ids
                elif hasattr(a, "offsets"):
                    ok &= a.tensor not in stored and not any(free(x) for x in (*a.offsets, *a.valid))
                else:
                    ok &= not free(a) if isinstance(a, sympy.Basic) else True
            if ok and not self.pl.channels.get(id(op.out)):
                hoisted.append(it)
                ids.add(id(op.out))
        return hoisted, [it for it in items if it not in hoisted]

    def _cube_halves(self) -> set:
        """Cube tiles computed in two row halves, one per vector core of the cluster: the row-split left
        operands (Q, P), the products and accumulators they make. Halves line up with what each vector
        core stores and loads (matching GM boxes hit in L2) and double the L0C buffers in flight."""
        R = self.pl.split_rows
        if self.side != CUBE or not R or R % 2:
            return set()
        roles = self.pl.cube_roles
        out = {vid for vid, r in roles.items() if vid in self._values and self._values[vid].shape[0] == R
               and "l0a" in r and "l0b" not in r and (self._values[vid].op is None or
                                                      self._values[vid].op.op != "matmul")}
        carries = [(lp, c) for lp in _loops(self.program.body) for c in lp.carried if id(c) in self.pl.cube_carries]
        changed = True
        while changed:
            changed = False
            for op in _ops_in_order(self.program.body):
                if op.op == "matmul" and id(op.args[0]) in out and id(op.out) not in out:
                    out.add(id(op.out))
                    changed = True
            for lp, c in carries:
                if id(c.next) in out and id(c.phi) not in out:
                    out |= {id(c.phi), id(c.result)}
                    changed = True
        for op in _ops_in_order(self.program.body):          # every use must take halves
            if op.op == "matmul":
                if id(op.args[1]) in out or (len(op.args) == 3 and (id(op.args[2]) in out) != (id(op.out) in out)):
                    return set()
        for vid in out:
            if "l0b" in roles.get(vid, ()):
                return set()
        return out

    def parts(self, v: Value) -> list:
        """Role suffixes of a cube tile: its two halves, or the whole tile."""
        return ["/0", "/1"] if id(v) in self.halves else [""]

    # ------------------------------------------------------------------ tiles
    def _rows(self, v: Value) -> int:
        if self.split and v.shape[0] == self.split:
            return self.split // 2
        return v.shape[0]

    def row_offset(self, v: Value):
        if self.split and v.shape[0] == self.split:
            return SUBBLOCK_IDX * (self.split // 2)
        return 0

    def _valid_rows(self, v: Value, vr):
        if self.side != VECTOR or not self.cluster:
            return vr
        if self.split:
            if v.shape[0] != self.split:
                return vr
            h = self.split // 2
            return smax(0, smin(h, sympy.sympify(vr) - SUBBLOCK_IDX * h))
        return smin(vr, v.shape[0] * (1 - SUBBLOCK_IDX))

    def declare(self, name: str, v: Value, role: str, phase: str, dtype: DataType | None = None) -> str:
        if name in self.tiles:
            return name
        role, _, half = role.partition("/")
        dtype = dtype or (acc_dtype(v) if role == "l0c" else v.dtype)
        if role == "ub":
            per = max(1, self.machine.alignment // dtype.itemsize)
            shape = (self._rows(v), -(-v.shape[1] // per) * per)
        else:
            shape = tuple(v.shape)
        valid = tuple(v.valid)
        if role == "ub":
            valid = (self._valid_rows(v, valid[0]), valid[1])
        if half:                                  # one row half of a tile the cube computes in two halves
            h = v.shape[0] // 2
            shape = (h, shape[1])
            valid = (smax(0, smin(h, sympy.sympify(valid[0]) - int(half) * h)), valid[1])
        self.tiles[name] = TileValue(name, ROLE_SPACE[role], dtype, shape, valid, phase)
        return name

    def name_of(self, v: Value, role: str) -> str:
        n = self.names.get((id(v), role))
        if n is None:
            raise CompileError(f"internal: tile %{v.name} ({role}) used on the {self.side} side before it is "
                               "defined there", loc=v.op.loc if v.op else None)
        return n

    def define(self, v: Value, role: str) -> str:
        n = self.names.get((id(v), role))          # a state tile or an alias: written in place
        if n is not None:
            return n
        tag = '' if role == 'ub' else '_' + role.replace('/', 'h')
        name = f"{v.hint}{v.id}{tag}"
        self.names[(id(v), role)] = name
        self.defined_by[name] = id(v)
        return self.declare(name, v, role, self._phase)

    def op(self, name: str, operands: list, attrs=None, loc=None, **kw) -> TileOp:
        return TileOp(name, operands, "pre", dict(attrs or {}), loc, **kw)

    def when(self, cond, ops: list) -> list:
        """``ops`` under ``if cond`` (one ``if`` for all of them; dropped / unconditional where the
        condition folds in a copy)."""
        self._whens += 1
        for o in ops:
            o.guard = cond
            o.attrs["when"] = self._whens
        return ops

    # ------------------------------------------------------------------ GM regions
    def region(self, view, v: Value, part: str = "") -> GMTile:
        offs = list(view.offsets)
        ro = self.row_offset(v) if self.side == VECTOR else 0
        if part:
            ro = int(part[1:]) * (v.shape[0] // 2)
        if ro != 0 and len(offs) >= 2:
            # the second half of a tail tile may start past the tensor's end (with no valid rows)
            offs[-2] = smin(offs[-2] + ro, self.program.param(view.tensor).shape[-2])
        return GMTile(view.tensor, tuple(offs))

    def ws_region(self, ch, v: Value, sub_rows: bool, part: str = "") -> GMTile:
        rows = v.shape[0]
        if not any(q.name == ch.param for q in self.params):
            wrows = sympy.Symbol(f"{ch.param}_rows", integer=True, positive=True)
            self.params.append(TileParam(ch.param, ch.param, v.dtype, (wrows, v.shape[1]), "workspace"))
        off = (BLOCK_IDX * self.slots.get(ch.id, 2) + SLOT) * rows
        if sub_rows:
            off = off + self.row_offset(v)
        if part:
            off = off + int(part[1:]) * (rows // 2)
        return GMTile(ch.param, (off, 0))

    # ------------------------------------------------------------------ statements
    def emit_items(self, items: list, stage=None, phases=None) -> list:
        """The TileOps of a statement list; ``stage``: the skew stage of each item of a skewed loop's body,
        ``phases``: the phase of each item of the kernel body (else the phase in work)."""
        self.register_states(items)
        out = []
        for k, it in enumerate(items):
            if phases is not None:
                self._phase = phases[k]
            if it.kind == "op":
                ops = self.emit_op(it.op)
            elif it.kind == "send":
                ops = self.emit_send(it)
            elif it.kind == "recv":
                ops = self.emit_recv(it)
            else:
                ops = self.emit_loop(it)
            ops += [self.op("TMOV_V", [state, self.name_of(nxt, "ub")]) for state, nxt in self._copy_after.get(k, ())]
            for o in ops:
                if isinstance(o, TileOp):
                    o.phase = self._phase
                    for alt in o.otherwise:
                        alt.phase = self._phase
                if stage is not None:
                    o.attrs["stage"] = stage[k]
            out += ops
        return out

    # ------------------------------------------------------------------ carried tiles

    def _role(self):
        return "l0c" if self.side == CUBE else "ub"

    def _state_roles(self, c) -> list:
        return [self._role() + part for part in self.parts(c.phi)] if self.side == CUBE else [self._role()]

    def register_states(self, items):
        """The state tiles of the loops of a statement list (declared once per copy of the list)."""
        for it in items:
            if it.kind != "loop":
                continue
            for c in it.loop.carried:
                if carry_side(self.pl, c) != self.side:
                    continue
                for role in self._state_roles(c):
                    if (id(c.result), role) in self.names:
                        continue
                    name = f"{c.phi.hint}{c.phi.id}{role[-2:].replace('/', 'h') if '/' in role else ''}"
                    self.declare(name, c.phi, role, self._phase)
                    self.names[(id(c.result), role)] = name
                    if self._init_aliasable(c, items):
                        self.names[(id(c.init), role)] = name

    def _init_aliasable(self, c, items) -> bool:
        init = c.init
        if init.op is None or self._uses.get(id(init), 0) != 1:
            return False
        if self.side == CUBE:
            return init.op.op == "matmul"
        return any(it.kind == "op" and it.op is init.op for it in items)

    def _next_in_place(self, c, body_items) -> bool:
        nxt = c.next
        if nxt.op is None or self.side == CUBE:
            return self.side == CUBE
        loop = self._loop_of_carry[id(c)]
        if nxt.op not in [it.op for it in body_items if it.kind == "op"] or \
                any(x.next is nxt for x in loop.carried if x is not c):
            return False
        if nxt is c.init:
            return False
        seen = False
        for o in _ops_in_order(loop.body):
            if o is nxt.op:
                seen = True
                continue
            if seen and any(a is c.phi for a in o.values()):
                return False
        return True

    def _phi_reader_in_place(self, c, body_items):
        """The value between the carried tile and its update when the update is in place and the carried
        tile's only reader feeds only the update (``acc = acc * alpha + o``): it can live in the state
        tile too, saving a buffer."""
        if self.side != VECTOR:
            return None
        readers = [it.op for it in body_items if it.kind == "op" and any(a is c.phi for a in it.op.values())]
        if len(readers) != 1 or self._uses.get(id(c.phi), 0) != 1:
            return None
        r = readers[0]
        out = r.out
        if out is None or out is c.next or r.op in ("load", "store") or self._uses.get(id(out), 0) != 1 \
                or not any(a is out for a in c.next.op.values()) or OPS[r.op].family == "reduce":
            return None
        if tuple(out.shape) != tuple(c.phi.shape) or out.dtype.itemsize != c.phi.dtype.itemsize:
            return None
        return out

    # ------------------------------------------------------------------ loops
    def emit_loop(self, it) -> list:
        loop = it.loop
        role = self._role()
        carries = [c for c in loop.carried if carry_side(self.pl, c) == self.side]
        pre, states, copy_after = [], [], {}
        for c in carries:
            state = self.names[(id(c.result), self._state_roles(c)[0])]
            if self.side == VECTOR and self.names.get((id(c.init), role)) != state:
                pre.append(self.op("TMOV_V", [state, self.name_of(c.init, role)], loc=loop.loc))
        for c in carries:
            for r in self._state_roles(c):
                state = self.names[(id(c.result), r)]
                states.append(state)
                self.names[(id(c.phi), r)] = state
                if self._next_in_place(c, it.body):
                    self.names[(id(c.next), r)] = state
                    mid = self._phi_reader_in_place(c, it.body)
                    if mid is not None:                     # acc * alpha, then + o: both in the state tile
                        self.names[(id(mid), r)] = state
                else:
                    last = max([k for k, b in enumerate(it.body) if id(c.next) in b.defs or id(c.phi) in b.uses],
                               default=len(it.body) - 1)
                    copy_after.setdefault(last, []).append((state, c.next))
        stage = self.stages.get(id(loop))
        outer, self._copy_after, phase, self._phase = self._copy_after, copy_after, self._phase, "step"
        body = self.emit_items(it.body, stage=stage)
        self._copy_after, self._phase = outer, phase
        copies = self.unroll.get(id(loop), 2)
        attrs = {"unroll": copies, "skew": 0 if stage is None else copies - 1, "states": states}
        if stage is not None:
            d0 = set().union(*(b.defs for k, b in enumerate(it.body) if stage[k] == 0))
            used1 = set().union(*(b.uses for k, b in enumerate(it.body) if stage[k] == 1))
            attrs["crossing"] = sorted(n for n, vid in self.defined_by.items() if vid in d0 & used1)
        return pre + [TileRange(loop.var, loop.start, loop.stop, loop.step, body, attrs, loop.loc)]

    # ------------------------------------------------------------------ ops
    def emit_op(self, op) -> list:
        if self.side == CUBE:
            return self.emit_cube_op(op)
        return self.emit_vector_op(op)

    def _guarded_mask(self, op) -> bool:
        """select(tril(d), a, b) with the mask and ``a`` read only here: the select only matters where the
        mask has a zero, so it runs under ``if`` and otherwise the result is ``a`` itself (in place)."""
        if op.op != "select":
            return False
        m, a = op.args[0], op.args[1]
        return (m.op is not None and m.op.op == "tril" and self._uses.get(id(m), 0) == 1
                and a.op is not None and self._uses.get(id(a), 0) == 1 and a.loop is op.out.loop
                and self.pl.side.get(id(a.op)) == VECTOR)

    def emit_vector_op(self, op) -> list:
        d = OPS[op.op]
        loc = op.loc
        if op.op == "tril" and self._uses.get(id(op.out), 0) == 1 and \
                any(self._guarded_mask(u) for u in self._users.get(id(op.out), ())):
            return []                                     # emitted by the select it guards
        if op.op == "reshape":
            return self.emit_reshape(op)
        if self._guarded_mask(op):
            m, a, b = op.args
            mask = self.define(m, "ub")
            src = self.name_of(a, "ub")
            self.names[(id(op.out), "ub")] = src
            diag = m.op.args[0]
            ro = self.row_offset(m)
            diag = diag + ro if ro != 0 else diag
            cols = op.out.valid[1]
            body = [self.op("TTRIL", [mask, diag], {}, m.op.loc),
                    self.op("TSEL", [src, mask, src, self.name_of(b, "ub")], {}, loc)]
            return self.when(sympy.Lt(diag, sympy.sympify(cols) - 1), body)
        if op.op == "load":
            view = op.args[0]
            dst = self.define(op.out, "ub")
            return [self.op("TLOAD", [dst, self.region(view, op.out)], {"trans": True} if view.trans else {}, loc)]
        if op.op == "store":
            view, v = op.args
            src = self.name_of(v, "ub")
            out = []
            tdt = self.program.param(view.tensor).dtype
            if tdt != v.dtype:
                tmp = f"{v.hint}{v.id}_st"
                self.declare(tmp, v, "ub", self._phase, tdt)
                out.append(self.op("TCVT", [tmp, src], {}, loc))
                src = tmp
            st = self.op("TSTORE", [self.region(view, v), src], {}, loc)
            if self.split and v.shape[0] != self.split:      # a replicated row: one core stores it
                return out + self.when(sympy.Eq(SUBBLOCK_IDX, 0), [st])
            return out + [st]
        args = [self.name_of(a, "ub") if isinstance(a, Value) else a for a in op.args]
        dst = self.define(op.out, "ub")
        attrs = {}
        if op.op in ("iota", "tril", "triu"):
            ro = self.row_offset(op.out)
            if op.op != "iota" or op.attrs.get("axis", 1) == 0:
                args[0] = args[0] + ro if ro != 0 else args[0]
            if op.op == "iota":
                attrs["axis"] = op.attrs.get("axis", 1)
        elif op.op in ("cmp", "cmps"):
            attrs["cmp"] = op.attrs["cmp"]
        elif op.op == "cast" and op.attrs.get("round"):
            attrs["round"] = op.attrs["round"]
        if d.pto is None:
            raise CompileError(f"pt.{op.op} is not supported on the vector cores yet", loc=loc)
        return [self.op(d.pto, [dst] + args, attrs, loc)]

    def emit_reshape(self, op) -> list:
        """Through a per-core GM scratch: store the tile as [R, C] rows, load them back as [R2, C2]."""
        src, out = op.args[0], op.out
        k = self.reshapes.setdefault(id(op), len(self.reshapes))
        base, view = f"rs{k}", f"rs{k}v"
        (r, c), (r2, c2) = src.shape, out.shape
        if not any(q.name == base for q in self.params):
            rows = sympy.Symbol(f"{base}_rows", integer=True, positive=True)
            rows2 = sympy.Symbol(f"{view}_rows", integer=True, positive=True)
            self.params.append(TileParam(base, base, src.dtype, (rows, c), "workspace"))
            self.params.append(TileParam(view, view, src.dtype, (rows2, c2), "workspace"))
            self.scratch.append((base, r, c, view, r2, c2, src.dtype))
        dst = self.define(out, "ub")
        return [self.op("TSTORE", [GMTile(base, (BLOCK_IDX * r, 0)), self.name_of(src, "ub")], {}, op.loc),
                self.op("TLOAD", [dst, GMTile(view, (BLOCK_IDX * r2, 0))], {}, op.loc)]

    def emit_cube_op(self, op) -> list:
        loc = op.loc
        if op.op == "load":
            view = op.args[0]
            attrs = {"trans": True} if view.trans else {}
            out = []
            for part in self.parts(op.out):
                l1 = self.define(op.out, "l1" + part)
                out.append(self.op("TLOAD", [l1, self.region(view, op.out, part)], attrs, loc))
            return out + self.l0_copies(op.out, loc)
        if op.op == "store":
            view, v = op.args
            return [self.op("TSTORE", [self.region(view, v, part), self.name_of(v, "l0c" + part)], {}, loc)
                    for part in self.parts(v)]
        if op.op != "matmul":
            raise CompileError(f"internal: {op.op} placed on the cube", loc=loc)
        b0 = self.name_of(op.args[1], "l0b")
        kind = self.pl.acc_kind[id(op)]
        out = []
        for part in self.parts(op.out):
            a0 = self.name_of(op.args[0], "l0a" + part)
            if kind == "l0c":
                self.names[(id(op.out), "l0c" + part)] = self.name_of(op.args[2], "l0c" + part)
            dst = self.define(op.out, "l0c" + part)
            if kind in ("none", "zero"):
                out.append(self.op("TMATMUL", [dst, a0, b0], {}, loc))
            elif kind == "l0c":
                out.append(self.op("TMATMUL_ACC", [dst, a0, b0], {}, loc))
            else:                                   # the accumulator's first iteration starts it
                loop = self._loop_of_phi(op.args[2])
                out.append(self.op("TMATMUL", [dst, a0, b0], {"first_iteration": str(loop.var)}, loc,
                                   guard=sympy.Eq(loop.var, loop.start),
                                   otherwise=[self.op("TMATMUL_ACC", [dst, a0, b0], {}, loc)]))
        roles = self.pl.cube_roles.get(id(op.out), set())
        if roles & {"l1", "l0a", "l0b"}:
            for part in self.parts(op.out):
                l1 = self.define(op.out, "l1" + part)
                out.append(self.op("TMOV", [l1, self.name_of(op.out, "l0c" + part)], {}, loc))
            out += self.l0_copies(op.out, loc)
        return out

    def _loop_of_phi(self, phi):
        for lp in _loops(self.program.body):
            if any(c.phi is phi for c in lp.carried):
                return lp
        raise CompileError("internal: accumulator without its loop")

    def l0_copies(self, v: Value, loc) -> list:
        out = []
        roles = self.pl.cube_roles.get(id(v), set())
        for role in ("l0a", "l0b"):
            if role in roles:
                for part in self.parts(v):
                    dst = self.define(v, role + part)
                    out.append(self.op("TMOV", [dst, self.name_of(v, "l1" + part)], {}, loc))
        return out

    # ------------------------------------------------------------------ handoffs
    def _marked(self, ops: list, ch) -> list:
        """Mark the accesses of one handoff as one use of the channel's workspace (passes/cross_core.py
        brackets them: the first waits for the slot, the last signals it)."""
        self._handoffs += 1
        for k, o in enumerate(ops):
            o.attrs["handoff"] = TileHandoff(ch.id, ch.param, self.slots.get(ch.id, 2), self._handoffs, k)
        return ops

    def emit_send(self, it) -> list:
        v, ch = it.value, it.channel
        loc = v.op.loc if v.op is not None else None
        if self.side == CUBE:
            return self._marked([self.op("TSTORE", [self.ws_region(ch, v, False, part), self.name_of(v, "l0c" + part)],
                                         {}, loc) for part in self.parts(v)], ch)
        st = self._marked([self.op("TSTORE", [self.ws_region(ch, v, True), self.name_of(v, "ub")], {}, loc)], ch)
        if self.split and v.shape[0] != self.split:
            return self.when(sympy.Eq(SUBBLOCK_IDX, 0), st)     # both sub-blocks still flag (a2a3 mode 2)
        return st

    def emit_recv(self, it) -> list:
        v, ch = it.value, it.channel
        loc = v.op.loc if v.op is not None else None
        if self.side == CUBE:
            lds = [self.op("TLOAD", [self.define(v, "l1" + part), self.ws_region(ch, v, False, part)], {}, loc)
                   for part in self.parts(v)]
            return self._marked(lds, ch) + self.l0_copies(v, loc)
        dst = self.define(v, "ub")
        return self._marked([self.op("TLOAD", [dst, self.ws_region(ch, v, True)], {}, loc)], ch)


def _loops(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield s
            yield from _loops(s.body)


def _ops_in_order(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield from _ops_in_order(s.body)
        else:
            yield s


def program_values(program) -> dict:
    """id(value) -> value of every tile value of a traced program (op results, loop phis and results)."""
    out = {}
    for s in _ops_in_order(program.body):
        if s.out is not None:
            out[id(s.out)] = s.out
    for lp in _loops(program.body):
        for c in lp.carried:
            out[id(c.phi)], out[id(c.result)] = c.phi, c.result
    return out


def _use_counts(program) -> dict:
    out: dict = {}
    for s in _ops_in_order(program.body):
        for a in s.values():
            out[id(a)] = out.get(id(a), 0) + 1
    for lp in _loops(program.body):
        for c in lp.carried:
            out[id(c.init)] = out.get(id(c.init), 0) + 1
    return out


__all__ = ["to_tile_graph", "program_values", "SLOT", "acc_dtype"]

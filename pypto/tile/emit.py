"""Block IR for one side (cube or vector) of a placed tile program.

The kernel body becomes the body of a loop over the grid points a core takes (``t = block_idx,
block_idx + block_num, ...``; program ids are decoded from ``t``). That loop and every ``pt.range``
loop are unrolled by two: copies A and B have their own tiles, so the loads of one copy overlap the work
of the other (double buffering; the second copy runs under ``if`` for an odd count). Loops that wait for
the other core type are also software-pipelined (skew.py).

Tiles: a value gets one tile per copy that computes it, named ``<value>_<copy path>``, in the space of
its role (cube: l1 / l0a / l0b / l0c; vector: ub). A loop-carried tile has one *state* tile for the
whole loop: the op computing the next value writes it in place when nothing reads the old value
afterwards (else a copy closes the iteration); the initial value is computed straight into it when
nothing else reads it. Valid shapes are the traced ones with the copy's loop indices substituted; in a
cluster kernel whose vector work is split by rows, each vector core holds half of the rows.
"""
from __future__ import annotations

import itertools

import sympy

from ..dtypes import DataType, float32, int32
from ..errors import CompileError
from ..ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, For, GMParam, GMRegion, If,
                        TileDecl, instr, walk_instrs)
from ..ir.isa import MemSpace
from ..passes.cross_core import HANDOFF, HandoffAccess, HandoffBuffer
from .exprs import smax, smin, subs as fast_subs
from .ir import KernelProgram, Loop, Value
from .items import Item, carry_side, side_items
from .optable import OPS
from .placement import CUBE, VECTOR, Placement

ROLE_SPACE = {"l1": MemSpace.L1, "l0a": MemSpace.L0A, "l0b": MemSpace.L0B, "l0c": MemSpace.L0C, "ub": MemSpace.UB}
T = sympy.Symbol("t", integer=True, nonnegative=True)


class Scope:
    """Tile names of one copy of a statement list (a chain: lookups go outwards)."""

    def __init__(self, parent, suffix: str, region: str, slot: int, home=None, crossing=frozenset()):
        self.parent, self.suffix, self.region, self.slot = parent, suffix, region, slot
        self.home, self.crossing = home, crossing
        self.names: dict = {}
        self.copy_after: dict = {}          # item index -> [(state tile, next value)]: carries not updated in place

    def lookup(self, key):
        s = self
        while s is not None:
            if key in s.names:
                return s.names[key]
            s = s.parent
        return None


def acc_dtype(v: Value) -> DataType:
    return int32 if not v.dtype.is_floating else float32


def _sx(e, subs):
    return fast_subs(e, subs)


class SideEmitter:
    def __init__(self, side: str, program: KernelProgram, pl: Placement, machine, stages: dict,
                 unroll: dict | None = None, slots: dict | None = None):
        self.side, self.program, self.pl, self.machine = side, program, pl, machine
        self.unroll = unroll or {}                 # id(loop) -> copies (2, or skew distance + 1)
        self.slots = slots or {}                   # channel id -> workspace slots per block
        self.core = CoreType.AIC if side == CUBE else CoreType.AIV
        self.stages = stages                       # id(loop) -> stage list (skewed loops of this side)
        self.tiles: dict = {}
        self.regions: dict = {}
        self.gm: dict = {}
        self._handoff_uses = itertools.count()
        self.reshapes: dict = {}                   # id(reshape op) -> scratch number
        self.scratch: list = []                    # (base, rows, cols, view, rows2, cols2, dtype) per reshape
        self.items = side_items(program.body, side, pl)
        self.cluster = pl.kind == "cluster"
        self.split = pl.split_rows if side == VECTOR and self.cluster else None
        for p in program.params:
            self.gm[p.name] = GMParam(p.name, p.dtype, tuple(p.shape))
        self._values = _values(program)
        self.halves = self._cube_halves()

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

    def declare(self, name: str, v: Value, role: str, subs: dict, region: str, dtype: DataType | None = None):
        if name in self.tiles:
            return name
        role, _, half = role.partition("/")
        space = ROLE_SPACE[role]
        dtype = dtype or (acc_dtype(v) if role == "l0c" else v.dtype)
        if role == "ub":
            align = self.machine.alignment
            per = max(1, align // dtype.itemsize)
            shape = (self._rows(v), -(-v.shape[1] // per) * per)
        else:
            shape = tuple(v.shape)
        valid = tuple(_sx(x, subs) for x in v.valid)
        if role == "ub":
            valid = (self._valid_rows(v, valid[0]), valid[1])
        if half:                                  # one row half of a tile the cube computes in two halves
            h = v.shape[0] // 2
            shape = (h, shape[1])
            valid = (smax(0, smin(h, sympy.sympify(valid[0]) - int(half) * h)), valid[1])
        decl_valid = None if tuple(valid) == tuple(shape) else valid
        self.tiles[name] = TileDecl(name, space, dtype, shape, None, decl_valid)
        self.regions[name] = region
        return name

    def name_of(self, v: Value, role: str, scope: Scope) -> str:
        n = scope.lookup((id(v), role))
        if n is None:
            raise CompileError(f"internal: tile %{v.name} ({role}) used on the {self.side} side before it is "
                               "defined there", loc=v.op.loc if v.op else None)
        return n

    def define(self, v: Value, role: str, scope: Scope, subs: dict, dtype=None) -> str:
        home = scope.home if (scope.home is not None and id(v) in scope.crossing) else scope
        n = home.names.get((id(v), role))          # registered here: a state tile, an alias, a crossing value
        if n is not None and n in self.tiles:
            return n
        tag = '' if role == 'ub' else '_' + role.replace('/', 'h')
        name = f"{v.hint}{v.id}{tag}{('_' + home.suffix) if home.suffix else ''}"
        home.names[(id(v), role)] = name
        return self.declare(name, v, role, subs, home.region, dtype)

    def ins(self, op: str, operands: list, attrs=None, loc=None):
        return instr(op, operands, self.tiles, attrs, loc)

    # ------------------------------------------------------------------ GM regions
    def region(self, view, v: Value, subs: dict, part: str = "") -> GMRegion:
        offs = [_sx(o, subs) for o in view.offsets]
        ro = self.row_offset(v) if self.side == VECTOR else 0
        if part:
            ro = int(part[1:]) * (v.shape[0] // 2)
        if ro != 0 and len(offs) >= 2:
            # the second half of a tail tile may start past the tensor's end (with no valid rows)
            offs[-2] = smin(offs[-2] + ro, self.program.param(view.tensor).shape[-2])
        return GMRegion(view.tensor, tuple(offs))

    def ws_region(self, ch, v: Value, scope: Scope, sub_rows: bool, part: str = "") -> GMRegion:
        rows = v.shape[0]
        if ch.param not in self.gm:
            wrows = sympy.Symbol(f"{ch.param}_rows", integer=True, positive=True)
            self.gm[ch.param] = GMParam(ch.param, v.dtype, (wrows, v.shape[1]))
        off = (BLOCK_IDX * self.slots.get(ch.id, 2) + scope.slot) * rows
        if sub_rows:
            off = off + self.row_offset(v)
        if part:
            off = off + int(part[1:]) * (rows // 2)
        return GMRegion(ch.param, (off, 0))

    # ------------------------------------------------------------------ statements
    def emit_items(self, items: list, scope: Scope, subs: dict, only=None) -> list:
        self.register_states(items, scope, subs)
        out = []
        for k, it in enumerate(items):
            if only is not None and k not in only:
                continue
            if it.kind == "op":
                out += self.emit_op(it.op, scope, subs)
            elif it.kind == "send":
                out += self.emit_send(it, scope, subs)
            elif it.kind == "recv":
                out += self.emit_recv(it, scope, subs)
            elif it.kind == "loop":
                out += self.emit_loop(it, scope, subs)
            for state, nxt in scope.copy_after.get(k, ()):
                out.append(self.ins("TMOV_V", [state, self.name_of(nxt, "ub", scope)]))
        return out

    # ------------------------------------------------------------------ carried tiles
    def _role(self):
        return "l0c" if self.side == CUBE else "ub"

    def register_states(self, items, scope: Scope, subs: dict):
        for it in items:
            if it.kind != "loop":
                continue
            for c in it.loop.carried:
                if carry_side(self.pl, c) != self.side:
                    continue
                for role in self._state_roles(c):
                    if scope.lookup((id(c.result), role)) is not None:
                        continue
                    name = f"{c.phi.hint}{c.phi.id}{role[-2:].replace('/', 'h') if '/' in role else ''}" \
                           f"{('_' + scope.suffix) if scope.suffix else ''}"
                    self.declare(name, c.phi, role, subs, "state")
                    scope.names[(id(c.result), role)] = name
                    if self._init_aliasable(c, items):
                        scope.names[(id(c.init), role)] = name

    def _state_roles(self, c) -> list:
        return [self._role() + part for part in self.parts(c.phi)] if self.side == CUBE else [self._role()]

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
        ops = [it.op for it in body_items if it.kind == "op"]
        if nxt.op not in ops or any(x.next is nxt for x in c_others(c, self._loop_of_carry[id(c)])):
            return False
        if nxt is c.init:
            return False
        seen = False
        for o in _ops_in_order(self._loop_of_carry[id(c)].body):
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
    def emit_loop(self, it: Item, scope: Scope, subs: dict) -> list:
        loop = it.loop
        role = self._role()
        carries = [c for c in loop.carried if carry_side(self.pl, c) == self.side]
        start, stop, step = _sx(loop.start, subs), _sx(loop.stop, subs), loop.step
        pre = []
        for c in carries:
            self._loop_of_carry[id(c)] = loop
            state = scope.lookup((id(c.result), self._state_roles(c)[0]))
            if self.side == VECTOR and scope.lookup((id(c.init), role)) != state:
                pre.append(self.ins("TMOV_V", [state, self.name_of(c.init, role, scope)], loc=loop.loc))
        var = loop.var
        stage = self.stages.get(id(loop))
        U = self.unroll.get(id(loop), 2)
        D = U - 1 if stage is not None else 0
        letters = "abcdefgh"
        copies = [Scope(scope, scope.suffix + letters[i], f"c{i}", i) for i in range(U)]

        def prepare(X):
            for c in carries:
                for role in self._state_roles(c):
                    state = scope.lookup((id(c.result), role))
                    X.names[(id(c.phi), role)] = state
                    if self._next_in_place(c, it.body):
                        X.names[(id(c.next), role)] = state
                        mid = self._phi_reader_in_place(c, it.body)
                        if mid is not None:                     # acc * alpha, then + o: both in the state tile
                            X.names[(id(mid), role)] = state
                    else:
                        last = max([k for k, b in enumerate(it.body) if id(c.next) in b.defs or id(c.phi) in b.uses],
                                   default=len(it.body) - 1)
                        X.copy_after.setdefault(last, []).append((state, c.next))
            return X

        for X in copies:
            prepare(X)

        def at(i):
            d = dict(subs)
            d[var] = var + i * step if not isinstance(i, sympy.Basic) else i
            return d

        def sub(i, tag, home=False, crossing=frozenset()):
            c = copies[i]
            return prepare(Scope(c, c.suffix + tag, c.region, c.slot, c if home else None, crossing))

        # Unrolled U times and peeled: the loop body runs whole groups of U iterations, unconditionally (a
        # loop-carried set_flag behind a skipped `if` would fire without its producer); the last ones follow.
        if stage is None:
            body = [x for i in range(U) for x in self.emit_items(it.body, copies[i], at(i))]
            loop_stmt = For(var, start, stop - (U - 1) * step, U * step, body, {"pipeline": U}, loop.loc)
            je = _peel_end(start, stop, step, U, U - 1)
            epi = []
            for i in range(U - 1):
                d = dict(subs)
                d[var] = je + i * step
                epi += _when(sympy.Lt(je + i * step, stop), self.emit_items(it.body, sub(i, "e"), d))
            return pre + [loop_stmt] + epi
        s0 = {k for k, s in enumerate(stage) if s == 0}
        s1 = {k for k, s in enumerate(stage) if s == 1}
        crossing = self._crossing(it.body, stage)

        def it_at(base, i):
            d = dict(subs)
            d[var] = base + i * step
            return d
        prologue = []
        for i in range(D):
            P = sub(i, "p", True, crossing)
            prologue += _when(sympy.Lt(start + i * step, stop), self.emit_items(it.body, P, it_at(start, i), s0))
        body = []
        for i in range(U):
            c = (i + D) % U
            body += self.emit_items(it.body, copies[c], at(i + D), s0)
            body += self.emit_items(it.body, copies[i], at(i), s1)
        lead = U + D - 1
        loop_stmt = For(var, start, stop - lead * step, U * step, body, {"pipeline": U, "skewed": D}, loop.loc)
        je = _peel_end(start, stop, step, U, lead)
        epi = []
        e1 = [sub(i, "e", True, crossing) for i in range(U)]
        for i in range(U):
            c = (i + D) % U
            epi += _when(sympy.Lt(je + (i + D) * step, stop), self.emit_items(it.body, e1[c], it_at(je, i + D), s0))
            epi += _when(sympy.Lt(je + i * step, stop), self.emit_items(it.body, e1[i], it_at(je, i), s1))
        for i in range(D):
            epi += _when(sympy.Lt(je + (U + i) * step, stop),
                         self.emit_items(it.body, sub(i, "f"), it_at(je, U + i), s1))
        return pre + prologue + [loop_stmt] + epi

    def _crossing(self, items, stage) -> frozenset:
        d0 = set()
        for k, it in enumerate(items):
            if stage[k] == 0:
                d0 |= it.defs
        used1 = set()
        for k, it in enumerate(items):
            if stage[k] == 1:
                used1 |= it.uses
        return frozenset(d0 & used1)

    # ------------------------------------------------------------------ the kernel body
    def build(self, name: str) -> Block:
        self._values = _values(self.program)
        self._uses = _use_counts(self.program)
        self._users = {}
        for o in _ops_in_order(self.program.body):
            for a in o.values():
                self._users.setdefault(id(a), []).append(o)
        self._loop_of_carry = {}
        for lp in _loops(self.program.body):
            for c in lp.carried:
                self._loop_of_carry[id(c)] = lp
        g = self.program.grid_sizes
        total = g[0]
        for x in g[1:]:
            total = total * x

        def pids(texpr):
            out, stride = {}, 1
            for k in reversed(range(len(g))):
                q = texpr if stride == 1 else sympy.floor(texpr / stride)
                out[self.program.pids[k]] = q if k == 0 else sympy.Mod(q, g[k])
                stride = stride * g[k]
            return out
        root = Scope(None, "", "state", 0)
        A = Scope(root, "a", "c0", 0)
        B = Scope(root, "b", "c1", 1)
        E = Scope(root, "e", "c0", 0)
        once, items = self._grid_invariant(self.items)
        setup = self.emit_items(once, root, {})          # the same for every program: once per core
        body = self.emit_items(items, A, pids(T)) + self.emit_items(items, B, pids(T + BLOCK_NUM))
        loop = For(T, BLOCK_IDX, total - BLOCK_NUM, 2 * BLOCK_NUM, body, {"pipeline": 2}, self.program.loc)
        te = BLOCK_IDX + 2 * BLOCK_NUM * smax(0, sympy.ceiling((total - BLOCK_NUM - BLOCK_IDX) / (2 * BLOCK_NUM)))
        stmts = setup + [loop] + _when(sympy.Lt(te, total), self.emit_items(items, E, pids(te)))
        used = {n for ins in walk_instrs(stmts) for n in ins.tile_operands()}
        self.tiles = {n: t for n, t in self.tiles.items() if n in used}      # copies a folded `if` dropped
        self.regions = {n: r for n, r in self.regions.items() if n in used}
        return Block(f"{name}_{'aic' if self.side == CUBE else 'aiv'}", self.core, list(self.gm.values()),
                     list(g), list(self.tiles.values()), stmts, self.program.loc)

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

    # ------------------------------------------------------------------ ops
    def emit_op(self, op, scope: Scope, subs: dict) -> list:
        if self.side == CUBE:
            return self.emit_cube_op(op, scope, subs)
        return self.emit_vector_op(op, scope, subs)

    def _guarded_mask(self, op) -> bool:
        """select(tril(d), a, b) with the mask and ``a`` read only here: the select only matters where the
        mask has a zero, so it runs under ``if`` and otherwise the result is ``a`` itself (in place)."""
        if op.op != "select":
            return False
        m, a = op.args[0], op.args[1]
        return (m.op is not None and m.op.op == "tril" and self._uses.get(id(m), 0) == 1
                and a.op is not None and self._uses.get(id(a), 0) == 1 and a.loop is op.out.loop
                and self.pl.side.get(id(a.op)) == VECTOR)

    def emit_vector_op(self, op, scope, subs) -> list:
        d = OPS[op.op]
        loc = op.loc
        if op.op == "tril" and self._uses.get(id(op.out), 0) == 1 and \
                any(self._guarded_mask(u) for u in self._users.get(id(op.out), ())):
            return []                                     # emitted by the select it guards
        if op.op == "reshape":
            return self.emit_reshape(op, scope, subs)
        if self._guarded_mask(op):
            m, a, b = op.args
            mask = self.define(m, "ub", scope, subs)
            src = self.name_of(a, "ub", scope)
            scope.names[(id(op.out), "ub")] = src
            diag = _sx(m.op.args[0], subs)
            ro = self.row_offset(m)
            diag = diag + ro if ro != 0 else diag
            cols = _sx(op.out.valid[1], subs)
            body = [self.ins("TTRIL", [mask, diag], {}, m.op.loc),
                    self.ins("TSEL", [src, mask, src, self.name_of(b, "ub", scope)], {}, loc)]
            return _when(sympy.Lt(diag, sympy.sympify(cols) - 1), body)
        if op.op == "load":
            view = op.args[0]
            dst = self.define(op.out, "ub", scope, subs)
            attrs = {"trans": True} if view.trans else {}
            return [self.ins("TLOAD", [dst, self.region(view, op.out, subs)], attrs, loc)]
        if op.op == "store":
            view, v = op.args
            src = self.name_of(v, "ub", scope)
            out = []
            tdt = self.program.param(view.tensor).dtype
            if tdt != v.dtype:
                tmp = f"{v.hint}{v.id}_st{('_' + scope.suffix) if scope.suffix else ''}"
                self.declare(tmp, v, "ub", subs, scope.region, tdt)
                out.append(self.ins("TCVT", [tmp, src], {}, loc))
                src = tmp
            st = self.ins("TSTORE", [self.region(view, v, subs), src], {}, loc)
            if self.split and v.shape[0] != self.split:      # a replicated row: one core stores it
                return out + [If(sympy.Eq(SUBBLOCK_IDX, 0), [st])]
            return out + [st]
        args = []
        for a in op.args:
            if isinstance(a, Value):
                args.append(self.name_of(a, "ub", scope))
            else:
                args.append(_sx(a, subs) if isinstance(a, sympy.Basic) else a)
        dst = self.define(op.out, "ub", scope, subs)
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
        return [self.ins(d.pto, [dst] + args, attrs, loc)]

    def emit_reshape(self, op, scope, subs) -> list:
        """Through a per-core GM scratch: store the tile as [R, C] rows, load them back as [R2, C2]."""
        src, out = op.args[0], op.out
        k = self.reshapes.setdefault(id(op), len(self.reshapes))
        base, view = f"rs{k}", f"rs{k}v"
        (r, c), (r2, c2) = src.shape, out.shape
        if base not in self.gm:
            rows = sympy.Symbol(f"{base}_rows", integer=True, positive=True)
            rows2 = sympy.Symbol(f"{view}_rows", integer=True, positive=True)
            self.gm[base] = GMParam(base, src.dtype, (rows, c))
            self.gm[view] = GMParam(view, src.dtype, (rows2, c2))
            self.scratch.append((base, r, c, view, r2, c2, src.dtype))
        dst = self.define(out, "ub", scope, subs)
        return [self.ins("TSTORE", [GMRegion(base, (BLOCK_IDX * r, 0)), self.name_of(src, "ub", scope)], {}, op.loc),
                self.ins("TLOAD", [dst, GMRegion(view, (BLOCK_IDX * r2, 0))], {}, op.loc)]

    def emit_cube_op(self, op, scope, subs) -> list:
        loc = op.loc
        if op.op == "load":
            view = op.args[0]
            attrs = {"trans": True} if view.trans else {}
            out = []
            for part in self.parts(op.out):
                l1 = self.define(op.out, "l1" + part, scope, subs)
                out.append(self.ins("TLOAD", [l1, self.region(view, op.out, subs, part)], attrs, loc))
            return out + self.l0_copies(op.out, scope, subs, loc)
        if op.op == "store":
            view, v = op.args
            return [self.ins("TSTORE", [self.region(view, v, subs, part), self.name_of(v, "l0c" + part, scope)], {},
                             loc) for part in self.parts(v)]
        if op.op != "matmul":
            raise CompileError(f"internal: {op.op} placed on the cube", loc=loc)
        b0 = self.name_of(op.args[1], "l0b", scope)
        kind = self.pl.acc_kind[id(op)]
        out = []
        for part in self.parts(op.out):
            a0 = self.name_of(op.args[0], "l0a" + part, scope)
            if kind == "l0c":
                scope.names[(id(op.out), "l0c" + part)] = self.name_of(op.args[2], "l0c" + part, scope)
            dst = self.define(op.out, "l0c" + part, scope, subs)
            if kind in ("none", "zero"):
                out.append(self.ins("TMATMUL", [dst, a0, b0], {}, loc))
            elif kind == "l0c":
                out.append(self.ins("TMATMUL_ACC", [dst, a0, b0], {}, loc))
            else:
                loop = self._loop_of_phi(op.args[2])
                it = subs.get(loop.var, loop.var)
                lead = sympy.simplify(it - loop.var)
                acc = self.ins("TMATMUL_ACC", [dst, a0, b0], {}, loc)
                if lead.is_Integer and int(lead) > 0:
                    out.append(acc)
                else:
                    first = self.ins("TMATMUL", [dst, a0, b0], {}, loc)
                    out.append(If(sympy.Eq(it, _sx(loop.start, subs)), [first], [acc]))
        roles = self.pl.cube_roles.get(id(op.out), set())
        if roles & {"l1", "l0a", "l0b"}:
            for part in self.parts(op.out):
                l1 = self.define(op.out, "l1" + part, scope, subs)
                out.append(self.ins("TMOV", [l1, self.name_of(op.out, "l0c" + part, scope)], {}, loc))
            out += self.l0_copies(op.out, scope, subs, loc)
        return out

    def _loop_of_phi(self, phi):
        for lp in _loops(self.program.body):
            if any(c.phi is phi for c in lp.carried):
                return lp
        raise CompileError("internal: accumulator without its loop")

    def l0_copies(self, v: Value, scope, subs, loc) -> list:
        out = []
        roles = self.pl.cube_roles.get(id(v), set())
        for role in ("l0a", "l0b"):
            if role in roles:
                for part in self.parts(v):
                    dst = self.define(v, role + part, scope, subs)
                    out.append(self.ins("TMOV", [dst, self.name_of(v, "l1" + part, scope)], {}, loc))
        return out

    # ------------------------------------------------------------------ handoffs
    def _marked(self, ins_list: list, ch) -> list:
        """Mark the accesses of one handoff as one use of the channel's workspace (passes/cross_core.py
        brackets them: the first waits for the slot, the last signals it)."""
        loc = ch.value.op.loc if ch.value.op is not None else None
        buffer = HandoffBuffer(ch.id, f"workspace {ch.param}", self.slots.get(ch.id, 2), None, loc)
        mark = HandoffAccess(buffer, next(self._handoff_uses))
        for ins in ins_list:
            ins.attrs[HANDOFF] = mark
        return ins_list

    def emit_send(self, it: Item, scope, subs) -> list:
        v, ch = it.value, it.channel
        loc = v.op.loc if v.op is not None else None
        if self.side == CUBE:
            sts = [self.ins("TSTORE", [self.ws_region(ch, v, scope, False, part), self.name_of(v, "l0c" + part, scope)],
                            {}, loc) for part in self.parts(v)]
            return self._marked(sts, ch)
        src = self.name_of(v, "ub", scope)
        st = self.ins("TSTORE", [self.ws_region(ch, v, scope, True), src], {}, loc)
        self._marked([st], ch)
        if self.split and v.shape[0] != self.split:
            return [If(sympy.Eq(SUBBLOCK_IDX, 0), [st])]     # both sub-blocks still flag (a2a3 mode 2)
        return [st]

    def emit_recv(self, it: Item, scope, subs) -> list:
        v, ch = it.value, it.channel
        loc = v.op.loc if v.op is not None else None
        if self.side == CUBE:
            lds = [self.ins("TLOAD", [self.define(v, "l1" + part, scope, subs), self.ws_region(ch, v, scope, False, part)],
                            {}, loc) for part in self.parts(v)]
            return self._marked(lds, ch) + self.l0_copies(v, scope, subs, loc)
        dst = self.define(v, "ub", scope, subs)
        ld = self.ins("TLOAD", [dst, self.ws_region(ch, v, scope, True)], {}, loc)
        return self._marked([ld], ch)


def _when(cond, stmts: list) -> list:
    """``stmts`` under ``if cond`` (dropped / unconditional when sympy decides the condition)."""
    if cond is sympy.true or cond == True:     # noqa: E712
        return stmts
    if cond is sympy.false or cond == False or not stmts:     # noqa: E712
        return []
    return [If(cond, stmts)]


def _peel_end(start, stop, step: int, unroll: int, lead: int):
    """The first index the loop ``for j in range(start, stop - lead*step, unroll*step)`` does not run."""
    group = unroll * step
    return start + group * smax(0, sympy.ceiling((sympy.sympify(stop) - lead * step - start) / group))


def c_others(c, loop):
    return [x for x in loop.carried if x is not c]


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


def _values(program) -> dict:
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

"""TileGraph -> Block IR for the Tile level: the copies of each TileProgram (pypto/tile/tile_graph.py),
every op lowered by the shared pypto.passes.to_blocks.lower_op.

How the Tile level copies its program (the front end's transformation, applied to the TileGraph):

* The kernel body becomes the body of a loop over the grid points a core takes (``t = block_idx,
  block_idx + block_num, ...``; program ids decoded from ``t``, to_blocks' linear tile numbering), unrolled
  by two — copies ``a`` and ``b`` with their own tiles, so the loads of one overlap the work of the other
  — and an ``e`` copy under ``if`` for an odd count. ``setup`` ops run once per core, before that loop.
* A ``TileRange`` is unrolled ``attrs["unroll"]`` times and peeled: the loop runs whole groups of copies,
  unconditionally (a loop-carried set_flag behind a skipped ``if`` would fire without its producer), the
  last iterations follow, each under ``if``. With ``attrs["skew"] = D`` it is software-pipelined: stage
  0 of iteration j + D runs before stage 1 of iteration j (skew.py chose the stages), with a prologue of
  D stage-0 iterations and the matching epilogue.

Tiles: a copy names a tile ``<name>_<copy path>`` (``t12_ab``: grid copy a, loop copy b); a tile is
declared on its first write in a copy, with the copy's indices substituted in its valid shape. A loop's
``states`` are declared in every copy of the list that runs the loop (at that copy's indices); ops
writing a state, or a tile written before, write it in place. Tiles that stage 0 hands to stage 1 (``crossing``) are named after the copy that reads
them. A handoff access gets its HandoffAccess here, one use per copy of the handoff; the workspace slot
(symbol ``slot`` in its offsets) is the copy's.
"""
from __future__ import annotations

import itertools

import sympy

from ..errors import CompileError
from ..ir.block import BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, If, TileDecl, walk_instrs
from ..ir.tile_graph import TileGraph, TileOp, TileProgram, TileRange, walk_tile_ops
from ..passes.cross_core import HandoffAccess, HandoffBuffer
from ..passes.to_blocks import Copy, _linear_indices, lower_op
from .exprs import smax, subs as fast_subs
from .tile_graph import SLOT

T = sympy.Symbol("t", integer=True, nonnegative=True)
LETTERS = "abcdefgh"


def lower_tile_graph(tg: TileGraph) -> list:
    """The Block of every TileProgram of a Tile-level TileGraph, in order (cube side first)."""
    return [_Expander(p).build() for p in tg.programs()]


class Scope:
    """Tile names of one copy of a statement list (a chain: lookups go outwards)."""

    def __init__(self, parent, suffix: str, slot: int, home=None, crossing=frozenset()):
        self.parent, self.suffix, self.slot = parent, suffix, slot
        self.home, self.crossing = home, crossing
        self.names: dict = {}

    def lookup(self, name):
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None


class _TileCopy(Copy):
    """One copy of a Tile-level statement list: scoped tile names, its indices, its handoff uses."""

    def __init__(self, ex: "_Expander", scope: Scope, subs: dict):
        super().__init__(subs, {})
        self.ex, self.scope = ex, scope
        self._mark = None

    def tile(self, name, writer=None):
        if writer is not None and id(writer) in self.ex.fresh:
            return self.define(name)
        n = self.scope.lookup(name)
        if n is None:
            raise CompileError(f"internal: tile {name} used before this copy of the program defines it",
                               loc=self.ex.p.loc)
        return n

    def define(self, name):
        s = self.scope
        home = s.home if (s.home is not None and name in s.crossing) else s
        n = home.names.get(name)
        if n is not None and n in self.ex.tiles:
            return n
        n = f"{name}_{home.suffix}" if home.suffix else name
        home.names[name] = n
        self.ex.declare(n, name, self.subs)
        return n

    def expr(self, e):
        if isinstance(e, sympy.Basic) and SLOT in e.free_symbols:
            e = fast_subs(e, {SLOT: self.scope.slot})
        return fast_subs(e, self.subs)

    def handoff(self, op):
        h = op.attrs["handoff"]
        if h.part == 0 or self._mark is None:
            buffer = HandoffBuffer(h.channel, f"workspace {h.workspace}", h.slots, None, op.loc)
            self._mark = HandoffAccess(buffer, next(self.ex.uses))
        return self._mark


class _Expander:
    def __init__(self, p: TileProgram):
        self.p = p
        self.core = CoreType.AIC if p.kind == "matmul" else CoreType.AIV
        self.tiles: dict = {}
        self.gm = {q.name: GMParam(q.name, q.dtype, tuple(q.shape)) for q in p.params if q.mode != "workspace"}
        self.workspaces = {q.name: q for q in p.params if q.mode == "workspace"}
        self.uses = itertools.count()
        # the ops that define their destination tile: its first writer, unless the tile is a loop's state
        # (declared per copy of the loop's list; every writer writes the copy's state in place)
        states = {st for r in _ranges(p.ops) for st in r.attrs.get("states", ())}
        self.fresh, seen = set(), set(states)
        for op in walk_tile_ops(p.ops):
            dst = op.operands[0] if op.operands and isinstance(op.operands[0], str) else None
            if dst is not None and dst not in seen:
                seen.add(dst)
                self.fresh |= {id(op)} | {id(alt) for alt in op.otherwise}

    def declare(self, name: str, base: str, subs: dict):
        if name in self.tiles:
            return
        tv = self.p.tiles[base]
        valid = tuple(fast_subs(x, subs) for x in tv.valid)
        self.tiles[name] = TileDecl(name, tv.space, tv.dtype, tuple(tv.shape), None,
                                    None if tuple(valid) == tuple(tv.shape) else valid)

    # ------------------------------------------------------------------ the block
    def build(self) -> Block:
        p = self.p
        axes = p.parallel_axes()
        total = axes[0].size
        for a in axes[1:]:
            total = total * a.size
        root = Scope(None, "", 0)
        A, B, E = Scope(root, "a", 0), Scope(root, "b", 1), Scope(root, "e", 0)
        setup = [op for op in p.ops if not isinstance(op, TileRange) and op.phase == "setup"]
        body = [op for op in p.ops if isinstance(op, TileRange) or op.phase != "setup"]
        stmts = self.emit(setup, root, {})
        loop_body = (self.emit(body, A, _linear_indices(axes, T))
                     + self.emit(body, B, _linear_indices(axes, T + BLOCK_NUM)))
        loop = For(T, BLOCK_IDX, total - BLOCK_NUM, 2 * BLOCK_NUM, loop_body, {"pipeline": 2}, p.loc)
        te = BLOCK_IDX + 2 * BLOCK_NUM * smax(0, sympy.ceiling((total - BLOCK_NUM - BLOCK_IDX) / (2 * BLOCK_NUM)))
        stmts = stmts + [loop] + _when(sympy.Lt(te, total), self.emit(body, E, _linear_indices(axes, te)))
        used = {n for ins in walk_instrs(stmts) for n in ins.tile_operands()}
        tiles = [t for n, t in self.tiles.items() if n in used]      # copies a folded `if` dropped
        gm = list(self.gm.values())
        return Block(p.name, self.core, gm, [a.size for a in axes], tiles, stmts, p.loc)

    # ------------------------------------------------------------------ statement lists
    def emit(self, ops: list, scope: Scope, subs: dict, stage=None) -> list:
        # the states of the loops this emission runs: one per copy of the list, valid shapes at its indices
        # (a copy emitted once per stage registers each loop's states with the indices of that loop's stage)
        for r in ops:
            if isinstance(r, TileRange) and (stage is None or r.attrs.get("stage") == stage):
                for st in r.attrs.get("states", ()):
                    if st not in scope.names:
                        n = f"{st}_{scope.suffix}" if scope.suffix else st
                        self.declare(n, st, subs)
                        scope.names[st] = n
        copy = _TileCopy(self, scope, subs)
        out, k = [], 0
        while k < len(ops):
            op = ops[k]
            if stage is not None and op.attrs.get("stage") != stage:
                k += 1
                continue
            if isinstance(op, TileRange):
                out += self.emit_range(op, scope, subs)
            elif "first_iteration" in op.attrs:
                out += self.first_iteration(op, copy)
            elif op.guard is not None:
                group = [op]
                while k + 1 < len(ops) and isinstance(ops[k + 1], TileOp) and ops[k + 1].guard is not None \
                        and ops[k + 1].attrs.get("when") == op.attrs.get("when"):
                    k += 1
                    group.append(ops[k])
                instrs = [self.lower(o, copy) for o in group]
                out += _when(copy.expr(op.guard), instrs)
            else:
                out.append(self.lower(op, copy))
            k += 1
        return out

    def lower(self, op: TileOp, copy: _TileCopy):
        for o in op.operands:
            if hasattr(o, "param") and o.param not in self.gm:
                q = self.workspaces[o.param]
                self.gm[q.name] = GMParam(q.name, q.dtype, tuple(q.shape))
        return lower_op(op, copy, self.tiles)

    def first_iteration(self, op: TileOp, copy: _TileCopy) -> list:
        """An accumulator's first product: ``op`` on the loop's first iteration, ``op.otherwise`` after."""
        var = op.guard.lhs
        it = copy.subs.get(var, var)
        lead = it - var                           # an Integer in the loop's later copies
        acc = [self.lower(o, copy) for o in op.otherwise]
        if lead.is_Integer and int(lead) > 0:
            return acc
        return [If(copy.expr(op.guard), [self.lower(op, copy)], acc)]

    # ------------------------------------------------------------------ loops
    def emit_range(self, r: TileRange, scope: Scope, subs: dict) -> list:
        start, stop, step = fast_subs(r.start, subs), fast_subs(r.stop, subs), r.step
        var = r.var
        U = r.attrs.get("unroll", 2)
        D = r.attrs.get("skew", 0)
        copies = [Scope(scope, scope.suffix + LETTERS[i], i) for i in range(U)]

        def at(i):
            d = dict(subs)
            d[var] = var + i * step
            return d

        def it_at(base, i):
            d = dict(subs)
            d[var] = base + i * step
            return d

        def sub(i, tag, home=False, crossing=frozenset()):
            c = copies[i]
            return Scope(c, c.suffix + tag, c.slot, c if home else None, crossing)

        if not D:
            body = [x for i in range(U) for x in self.emit(r.body, copies[i], at(i))]
            loop = For(var, start, stop - (U - 1) * step, U * step, body, {"pipeline": U}, r.loc)
            je = _peel_end(start, stop, step, U, U - 1)
            epi = []
            for i in range(U - 1):
                epi += _when(sympy.Lt(je + i * step, stop), self.emit(r.body, sub(i, "e"), it_at(je, i)))
            return [loop] + epi
        crossing = frozenset(r.attrs.get("crossing", ()))
        prologue = []
        for i in range(D):
            prologue += _when(sympy.Lt(start + i * step, stop),
                              self.emit(r.body, sub(i, "p", True, crossing), it_at(start, i), 0))
        body = []
        for i in range(U):
            body += self.emit(r.body, copies[(i + D) % U], at(i + D), 0)
            body += self.emit(r.body, copies[i], at(i), 1)
        lead = U + D - 1
        loop = For(var, start, stop - lead * step, U * step, body, {"pipeline": U, "skewed": D}, r.loc)
        je = _peel_end(start, stop, step, U, lead)
        epi = []
        e1 = [sub(i, "e", True, crossing) for i in range(U)]
        for i in range(U):
            c = (i + D) % U
            epi += _when(sympy.Lt(je + (i + D) * step, stop), self.emit(r.body, e1[c], it_at(je, i + D), 0))
            epi += _when(sympy.Lt(je + i * step, stop), self.emit(r.body, e1[i], it_at(je, i), 1))
        for i in range(D):
            epi += _when(sympy.Lt(je + (U + i) * step, stop), self.emit(r.body, sub(i, "f"), it_at(je, U + i), 1))
        return prologue + [loop] + epi


def _ranges(ops):
    for op in ops:
        if isinstance(op, TileRange):
            yield op
            yield from _ranges(op.body)


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


__all__ = ["lower_tile_graph"]

"""TileGraph -> Block IR for the Tile level: each TileProgram (pypto/tile/tile_graph.py) lowered once, every
op by the shared pypto.passes.to_blocks.lower_op, its loops marked for the shared software-pipelining pass
(pypto/passes/software_pipeline.py), which makes the copies.

What the Tile level marks (the front end's choices; the pass builds prologue, copies and tails):

* The kernel body becomes the body of a loop over the grid points a core takes (``t = block_idx,
  block_idx + block_num, ...``; program ids decoded from ``t``, to_blocks' linear tile numbering), marked
  ``unroll=2`` — copies ``a`` and ``b`` with their own tiles, so the loads of one overlap the work of the
  other — and a peeled copy ``e`` under ``if`` for an odd count. ``setup`` ops run once per core, before it.
* A ``TileRange`` becomes a loop marked ``unroll = attrs["unroll"]`` (peeled: the loop runs whole groups of
  copies, unconditionally — a loop-carried set_flag behind a skipped ``if`` would fire without its
  producer); with ``attrs["skew"] = D`` also ``skew=D``, its instructions carrying the stage skew.py chose
  (``attrs["stage"]``): stage 0 of iteration j + D runs before stage 1 of iteration j.
* Every loop's ``slot`` is the symbol ``slot`` of the handoff workspace offsets: each copy uses its own slot.

Tiles: a tile is declared on its first write (a loop's ``states`` with the list that runs the loop), with
the program's indices in its valid shape; ops writing a state, or a tile written before, write it in place.
The pass names the copies' tiles (``t12_ab``: grid copy a, loop copy b). A handoff access gets its
HandoffAccess here (the accesses of one handoff share it); the pass makes one use per copy.
"""
from __future__ import annotations

import itertools

import sympy

from ..errors import CompileError
from ..ir.block import BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, If, TileDecl, walk_instrs
from ..ir.tile_graph import TileGraph, TileOp, TileProgram, TileRange, walk_tile_ops
from ..passes.cross_core import HandoffAccess, HandoffBuffer
from ..passes.software_pipeline import software_pipeline
from ..passes.to_blocks import Copy, _linear_indices, lower_op
from .exprs import subs as fast_subs
from .tile_graph import SLOT

T = sympy.Symbol("t", integer=True, nonnegative=True)


def lower_tile_graph(tg: TileGraph) -> list:
    """The Block of every TileProgram of a Tile-level TileGraph, in order (cube side first)."""
    return [_Expander(p).build() for p in tg.programs()]


class _TileCopy(Copy):
    """The Tile level's one copy of its program: tiles declared on their first write, its indices, its
    handoff uses (the software-pipelining pass makes the other copies)."""

    def __init__(self, ex: "_Expander", subs: dict, slot):
        super().__init__(subs, {})
        self.ex, self.slot = ex, slot
        self._mark = None

    def tile(self, name, writer=None):
        if writer is not None and id(writer) in self.ex.fresh:
            self.ex.declare(name, self.subs)
            return name
        if name not in self.ex.tiles:
            raise CompileError(f"internal: tile {name} used before the program defines it", loc=self.ex.p.loc)
        return name

    def expr(self, e):
        if self.slot is not None and isinstance(e, sympy.Basic) and SLOT in e.free_symbols:
            e = fast_subs(e, {SLOT: self.slot})
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
        # (declared with the list that runs the loop; every writer writes the state in place)
        states = {st for r in _ranges(p.ops) for st in r.attrs.get("states", ())}
        self.fresh, seen = set(), set(states)
        for op in walk_tile_ops(p.ops):
            dst = op.operands[0] if op.operands and isinstance(op.operands[0], str) else None
            if dst is not None and dst not in seen:
                seen.add(dst)
                self.fresh |= {id(op)} | {id(alt) for alt in op.otherwise}

    def declare(self, name: str, subs: dict):
        if name in self.tiles:
            return
        tv = self.p.tiles[name]
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
        setup = [op for op in p.ops if not isinstance(op, TileRange) and op.phase == "setup"]
        body = [op for op in p.ops if isinstance(op, TileRange) or op.phase != "setup"]
        stmts = self.emit(setup, {}, 0)
        # the grid loop: the points a core takes, two copies a step (their own tiles and handoff slots)
        grid = For(T, BLOCK_IDX, total, BLOCK_NUM, self.emit(body, _linear_indices(axes, T), None),
                   {"unroll": 2, "peel_names": ("e",), "slot": SLOT.name}, p.loc)
        tiles = list(self.tiles.values())
        block = Block(p.name, self.core, list(self.gm.values()), [a.size for a in axes], tiles, stmts + [grid], p.loc)
        software_pipeline(block, fast_subs)
        used = {n for ins in walk_instrs(block.body) for n in ins.tile_operands()}
        block.tiles = [t for t in block.tiles if t.name in used]      # copies a folded `if` dropped
        return block

    # ------------------------------------------------------------------ statement lists
    def emit(self, ops: list, subs: dict, slot) -> list:
        # the states of the loops this list runs, declared with it (valid shapes at its indices)
        for r in ops:
            if isinstance(r, TileRange):
                for st in r.attrs.get("states", ()):
                    self.declare(st, subs)
        copy = _TileCopy(self, subs, slot)
        out, k = [], 0
        while k < len(ops):
            op = ops[k]
            if isinstance(op, TileRange):
                out.append(self.emit_range(op, subs, slot))
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
        ins = lower_op(op, copy, self.tiles)
        if "stage" in op.attrs:                   # the software-pipelining pass's stage mark
            ins.attrs["stage"] = op.attrs["stage"]
        return ins

    def first_iteration(self, op: TileOp, copy: _TileCopy) -> list:
        """An accumulator's first product: ``op`` on the loop's first iteration, ``op.otherwise`` after
        (the pipelining pass keeps only the latter in the copies that never run the first iteration)."""
        acc = [self.lower(o, copy) for o in op.otherwise]
        return [If(copy.expr(op.guard), [self.lower(op, copy)], acc)]

    # ------------------------------------------------------------------ loops
    def emit_range(self, r: TileRange, subs: dict, slot) -> For:
        """The loop, marked for the software-pipelining pass: unrolled ``attrs["unroll"]`` times and peeled
        (the loop runs whole groups of copies, unconditionally — a loop-carried set_flag behind a skipped
        ``if`` would fire without its producer), skewed by ``attrs["skew"]`` (skew.py's stages)."""
        attrs = {"unroll": r.attrs.get("unroll", 2), "slot": SLOT.name}
        if r.attrs.get("skew", 0):
            attrs["skew"] = r.attrs["skew"]
        if "stage" in r.attrs:
            attrs["stage"] = r.attrs["stage"]
        return For(r.var, fast_subs(r.start, subs), fast_subs(r.stop, subs), r.step, self.emit(r.body, subs, slot),
                   attrs, r.loc)


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


__all__ = ["lower_tile_graph"]

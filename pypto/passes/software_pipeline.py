"""Software pipelining / multi-buffering of Block IR loops (Block IR -> Block IR, in place).

IR in: a Block whose loops to pipeline carry the mark ``For.attrs["unroll"] = U`` (the buffering depth:
copies of the body per step of the new loop), optionally with

* ``skew = D`` (0 <= D < U): the body is cut in two stages by a mark ``attrs["stage"] = 0 | 1`` on every
  instruction of the body (and on a nested ``For`` of it; an ``If`` takes the stage of the instructions
  inside it, which must agree); stage 0 of iteration j + D runs before stage 1 of iteration j;
* ``skew = (0, D1, ..., D_{S-1})`` (non-decreasing): S stages, stage s running D_s iterations behind stage 0
  (Professional mode's ``pl.stage`` blocks with ``preload=N``: D_s = s*N). Time step T runs stage s of
  iteration T - D_s for s = 0, 1, ... in order; ``skew=D`` is ``skew=(0, D)``. With renamed tiles
  D_{S-1} < U (a tile one stage writes and a later one reads needs a copy per iteration in flight). The
  mark ``stage = all`` puts a statement (Professional mode's preamble) in front of every stage's
  instance, in body order;
* ``tail = "peel"`` (the default: the last iterations follow the loop, each under ``if``) or ``"guard"``
  (the loop runs every iteration: the copies after the first each under ``if`` inside it; with skew, the
  loop runs the last stage of every iteration, each earlier stage's instance under its own ``if``);
* ``slots = {buf: (t0, ..., t_{P-1})}``: per logical buffer ``buf`` (a tile the body names) the P tiles it
  stands for (the front end's own, at its addresses); the copy of iteration k (counted from the loop's
  start) uses ``t_(k mod P)``, in every stage; P divides U, so no tile is chosen by an expression. An
  iteration's later stage thus uses the slot its earlier stage filled. The slot tiles are not renamed and
  the placeholder ``buf`` is dropped from the declarations when nothing uses it. Where the placeholder's
  valid shape differs from the slot's (a tail, possibly following the loop variable), each use gets a
  declaration of its slot, ``<slot>_s<k>`` (the slot's address, ``buffer`` the slot), with the copy's
  iteration substituted in that valid shape, one per distinct valid shape. ``slots = {symbol: (i0, ...,
  i_{P-1})}``: a symbol standing for a GM workspace slot's index (in the offsets of its accesses), iteration
  k's copy substitutes ``i_(k mod P)``;
* ``handoffs = {buffer: (b0, ..., b_{P-1})}``: a placeholder handoff buffer (``cross_core.HandoffBuffer``)
  whose accesses the copy of iteration k marks with ``b_(k mod P)`` (Professional mode's workspace
  groups). A use whose mark has a ``home`` (the list the front end acquired it in) that is the loop's body
  is homed in the list its copy lands in (a guard's body, the new loop's body, the enclosing list);
* ``rename = False``: no per-copy tiles (the front end owns the buffers: Professional mode's tiles at
  the user's addresses); no read-before-write checks (the user's tiles may carry state between
  iterations and stages). A tile of the loop whose valid shape follows the loop variable gets a
  declaration per copy's valid shape, as a slot does (``<tile>_s<k>``); an ``If`` with an else branch
  whose condition a copy decides keeps only that branch, and a loop that runs no iteration for sure
  (a short compile-time trip count) is left out — what the front end's own parser does with code it
  unrolls itself;
* ``names``: the U copy suffixes (default ``a``, ``b``, ...), ``peel_names``: the suffixes of the U - 1
  peeled iterations (default ``<copy>e``);
* ``slot``: the name of a symbol that stands for the workspace slot of the iteration: replaced by the
  copy's index in each copy (the multi-buffered GM workspaces of a cube <-> vector handoff).

Each front end supplies the stages and the depth (the Tile level from ``tile/skew.py``'s plan, Tensor
mode from its phases); the pass is the one place that builds the copies.

IR out: each marked loop replaced by its pipelined form (marks removed, stage marks too):

* not skewed: ``for v in range(start, stop - (U-1)*step, U*step) {pipeline=U}`` whose body is the U
  copies at v, v + step, ...; then the peeled iterations je, je + step, ... (je: the first iteration the
  loop did not run), each under ``if je + i*step < stop``; with ``tail="guard"``: ``range(start, stop,
  U*step)`` and copy i under ``if v + i*step < stop``;
* skewed: a prologue of D stage-0 iterations (each under ``if``), the loop ``range(start, stop - (U+D-1)*step,
  U*step) {pipeline=U, skewed=D}`` running stage 0 of v + (i+D)*step then stage 1 of v + i*step for each
  copy i, and the epilogue that finishes the iterations the loop started and runs the ones it did not.
  With S stages (D = D_{S-1}): the prologue is time steps 0 .. D-1 (stage s of iteration T - D_s where
  that is >= 0, each under ``if``), copy i of the loop runs stage s of v + (i + D - D_s)*step for s = 0 ..
  S-1 (``skewed=(0, D1, ...)``), the epilogue the time steps after the loop; with ``tail=guard`` the loop
  is ``range(start, stop, U*step)``, copy i (after the first under ``if v + i*step < stop``) runs stage s
  of v + (i + D - D_s)*step under ``if v + (i + D - D_s)*step < stop`` (not for the stages D behind), and
  there is no epilogue.

Per-iteration tiles (an analysis of the block, as ir/liveness.py sees it: tiles that no instruction
outside the loop touches) get a name per copy, ``<tile>_<suffix>`` (a copy of a copy extends the
suffix: ``y_ab`` is the outer loop's copy a of the inner loop's copy b), declared with the copy's
iteration substituted in their valid shape: the copies' tiles are distinct buffers, so the memory planner
gives them different bytes (multi-buffering). Other tiles (set before the loop or read after it: the
loop-carried state) stay single. In a skewed loop a tile that stage 0 writes and stage 1 reads crosses
from one iteration's stage 0 to its stage 1: the prologue and epilogue copies name it after the steady
state copy of the same iteration (``<tile>_<copy>``); their other tiles are their own (``_<copy>p``,
``_<copy>e``, ``_<copy>f``).

In each copy the loop variable v becomes v + i*step (or the prologue's / epilogue's iteration) in every
operand, condition and valid shape. An ``If`` without an else branch whose condition the copy decides is
replaced by its body or dropped; an ``If`` with an else branch (an accumulator's first product or its
accumulation) is decided only where the copy is known not to be the loop's first iteration (its test
``Eq(v, start)`` in a steady-state copy after the first: the else branch), elsewhere it keeps both
branches. A handoff access (``attrs[cross_core.HANDOFF]``) becomes one use per copy (the accesses of one
use in a copy share a mark: one mark object, or for marks with a home one (buffer, use, home)) and the uses
of the block are numbered in program order.

Loops are pipelined innermost first. Errors (a CompileError naming the loop's line): a stage mark
missing or mixed inside one statement, a per-iteration tile read in stage 0 that stage 1 writes (its use
would run before its definition), a tile read before any copy of the iteration writes it, a bad mark.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy

from ..errors import CompileError
from ..ir.block import For, GMRegion, If, Instr, TileDecl, walk_instrs
from ..ir.liveness import touched_tiles
from .cross_core import HANDOFF, HandoffAccess, HandoffBuffer
from .exprs import subs as _default_subs

MARKS = ("unroll", "skew", "tail", "names", "peel_names", "slot", "slots", "handoffs", "rename")
ALL = "all"          # the stage mark of a statement every stage instance runs (Professional mode's preamble)
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def software_pipeline(block, subs=None) -> dict:
    """Pipeline every marked loop of ``block`` (in place); ``subs(expr, mapping)``: the front end's
    substitution (its normal form of index expressions; default passes.exprs.subs). -> {new tile name:
    (the front end's tile it copies, the copies' suffix path)} for the tiles the block keeps."""
    p = _Pipeliner(block, subs or _default_subs)
    block.body = p.stmts(block.body)
    if p.tops:
        _rehome(block.body, p.tops)
    if p.made or p.placeholders or p.versions or p.copied_marks:
        _renumber_handoffs(block.body)
        used = {t for ins in walk_instrs(block.body) for t in touched_tiles(ins)}
        tiles = []
        for t in block.tiles:               # a slot's versions follow its declaration
            tiles.append(t)
            tiles += [d for (slot, _), d in p.versions.items() if slot == t.name]
        block.tiles = tiles
        made = set(p.made) | {d.name for d in p.versions.values()}
        block.tiles = [t for t in block.tiles if t.name in used or (t.name not in made
                                                                     and t.name not in p.placeholders)]
    return {n: o for n, o in p.made.items() if any(t.name == n for t in block.tiles)}


def _sx(subs, e, m):
    if not m or not isinstance(e, sympy.Basic):
        return e
    r = subs(e, m)
    if isinstance(r, sympy.Integer):
        return int(r)
    return r


def _smax0(x):
    x = sympy.sympify(x)
    if x.is_Number:
        return max(0, int(x)) if x.is_Integer else max(0, x)
    return sympy.Max(0, x, evaluate=False)


def _touches(stmts, counter: Counter) -> Counter:
    for ins in walk_instrs(stmts):
        for t in touched_tiles(ins):
            counter[t] += 1
    return counter


def _decided(cond):
    if cond is sympy.true or cond is True:
        return True
    if cond is sympy.false or cond is False:
        return False
    return None


class _Piece:
    """One copy of (a stage of) the body: its substitution, its tile names, its handoff marks."""

    def __init__(self, mapping: dict, rename: dict, offset, steady: bool, fold: bool = False):
        self.mapping, self.rename, self.offset, self.steady = mapping, rename, offset, steady
        self.fold = fold               # an if/else whose condition the copy decides keeps only that branch
        self.buffers: dict = {}        # handoff buffer placeholder -> this copy's buffer
        self.home = None               # the loop's body: a handoff use acquired there is homed where the copy lands
        self.lists: dict = {}          # id(a statement list of the body) -> its copy
        self.marks: dict = {}
        self.memo: dict = {}           # expression -> substituted (copies share most expressions)


class _Pipeliner:
    def __init__(self, block, subs):
        self.block, self.subs = block, subs
        self.total = _touches(block.body, Counter())
        self.made: dict = {}         # new tile -> (tile it copies, suffix)
        self.origin: dict = {}       # a name the pass made -> (root name, suffix path)
        self.placeholders: set = set()   # slot buffers' placeholder tiles (dropped when unused)
        self.versions: dict = {}         # (slot tile, valid shape) -> the declaration of that slot's version
        self.tops: dict = {}             # id(a copied top-level statement of a loop's body) -> its piece
        self.copied_marks = False        # a handoff access was copied: its uses need numbers per copy

    # ------------------------------------------------------------------ walking
    def stmts(self, stmts: list) -> list:
        out = []
        for s in stmts:
            if isinstance(s, For):
                inside = _touches(s.body, Counter()) if "unroll" in s.attrs else None
                body = self.stmts(s.body)
                if inside is None:
                    out.append(replace(s, body=body))
                else:
                    out += self.pipeline(replace(s, body=body), inside, s.body)
            elif isinstance(s, If):
                out.append(replace(s, then_body=self.stmts(s.then_body), else_body=self.stmts(s.else_body)))
            else:
                out.append(s)
        return out

    # ------------------------------------------------------------------ one loop
    def _mark(self, loop: For):
        a = loop.attrs
        bad = sorted(k for k in a if k not in MARKS + ("stage",))
        U, skew = a["unroll"], a.get("skew", 0)
        tail = a.get("tail", "peel")
        rename = a.get("rename", True)
        names = tuple(a.get("names", tuple(LETTERS[:U]) if isinstance(U, int) else ()))
        if isinstance(skew, int) and not isinstance(skew, bool) and skew >= 0:
            dists = (0, skew) if skew else None
        elif isinstance(skew, (tuple, list)) and len(skew) >= 2 and all(isinstance(d, int) for d in skew) \
                and skew[0] == 0 and all(x <= y for x, y in zip(skew, skew[1:])) and skew[-1] > 0:
            dists = tuple(skew)
        else:
            dists = ()
        slots, handoffs = a.get("slots", {}), a.get("handoffs", {})
        ok_slots = isinstance(slots, dict) and isinstance(handoffs, dict) and all(
            isinstance(v, (tuple, list)) and v and isinstance(U, int) and U % len(v) == 0
            and (all(isinstance(t, str) for t in v) if isinstance(k, str) else
                 isinstance(k, sympy.Symbol) and all(isinstance(t, int) for t in v))
            for k, v in slots.items()) and all(
            isinstance(v, (tuple, list)) and v and isinstance(U, int) and U % len(v) == 0
            and all(isinstance(b, HandoffBuffer) for b in (k, *v)) for k, v in handoffs.items())
        if bad or not isinstance(U, int) or U < 1 or dists == () or (dists and rename and not dists[-1] < U) \
                or tail not in ("peel", "guard") or len(names) != U or rename not in (True, False) \
                or not ok_slots or not sympy.sympify(loop.step).is_positive:
            raise CompileError(f"software pipelining: bad mark on the loop over {loop.var}: {a} (unroll U >= 1, "
                               f"skew 0 <= D < U or non-decreasing distances (0, D1, ...) (below U with renamed "
                               f"tiles), tail peel | guard, {U} names, slots {{buffer: (P tiles) | symbol: (P ints)}} "
                               f"and handoffs {{buffer: (P buffers)}} with P dividing U, rename True | False, a "
                               f"positive step)", loc=loop.loc)
        peel = tuple(a.get("peel_names", tuple(f"{n}e" for n in names[:U - 1])))
        return U, dists, tail, names, peel, _slot_symbol(loop, a.get("slot")), dict(slots), dict(handoffs), rename

    def pipeline(self, loop: For, inside: Counter, source_body: list) -> list:
        U, dists, tail, names, peel, slot, slots, handoffs, rename = self._mark(loop)
        indices = {k: v for k, v in slots.items() if not isinstance(k, str)}     # GM workspace slot symbols
        slots = {k: v for k, v in slots.items() if isinstance(k, str)}
        D = dists[-1] if dists else 0
        S = len(dists) if dists else 1
        here = _touches(loop.body, Counter())
        fixed = set(slots) | {t for v in slots.values() for t in v}
        local = [t.name for t in self.block.tiles
                 if t.name in here and not (t.name in inside and self.total[t.name] > inside[t.name])]
        local += [t for t in here if t not in set(local) and not (t in inside and self.total[t] > inside[t])]
        local = [t for t in local if t not in fixed] if rename else []
        # the front end's own tiles (rename=False) whose valid shape follows the loop variable: a
        # declaration per copy's valid shape, as for a slot
        own_tails = [] if rename else [t.name for t in self.block.tiles if t.name in here and t.name not in fixed
                                       and t.valid is not None and loop.var in _free(t.valid)]
        local_set = set(local)
        stages = self._stages(loop, local_set, S, rename) if D else None
        crossing = self._crossing(loop, stages, local_set) if D else set()
        if not D and rename:
            self._check_order(loop, local_set, None, 1)
        var, start, stop, step = loop.var, loop.start, loop.stop, loop.step
        self._order_start()
        tops = self.tops

        def piece(i, it, suffix, home_suffix=None, steady=False):
            m = {var: it}
            if slot is not None:
                m[slot] = i
            for sym, values in indices.items():
                m[sym] = values[i % len(values)]
            ren = {}
            for t in local:
                sfx = home_suffix if (home_suffix is not None and t in crossing) else suffix
                ren[t] = self._name(t, sfx)
            for buf, tiles in slots.items():
                ren[buf] = tiles[i % len(tiles)]
            pc = _Piece(m, ren, it - var, steady, fold=not rename)
            pc.buffers = {b: bufs[i % len(bufs)] for b, bufs in handoffs.items()}
            pc.home = source_body
            for buf, tiles in slots.items():
                ren[buf] = self._slot_version(buf, tiles[i % len(tiles)], var, pc)
            for t in own_tails:
                ren[t] = self._slot_version(t, t, var, pc)
            return pc

        def body(pc: _Piece, stage=None) -> list:
            stmts = loop.body if stage is None else \
                [s for s, st in zip(loop.body, stages) if st == stage or st == ALL]
            self._declare(pc, stmts, local)
            out = self.copy(stmts, pc, var, start)
            for s in out:
                tops[id(s)] = pc
            return out

        def when(cond, stmts):
            d = _decided(cond)
            if d is True:
                return stmts
            if d is False or not stmts:
                return []
            return [If(cond, stmts)]

        attrs = {"pipeline": U}
        if not D and tail == "guard":
            out = []
            for i in range(U):
                b = body(piece(i, var + i * step, names[i], steady=True))
                out += b if i == 0 else when(sympy.Lt(var + i * step, stop), b)
            result = [For(var, start, stop, U * step, out, attrs, loop.loc)]
        elif not D:
            steady = []
            for i in range(U):
                steady += body(piece(i, var + i * step, names[i], steady=True))
            new = For(var, start, stop - (U - 1) * step, U * step, steady, attrs, loop.loc)
            je = _peel_end(start, stop, step, U, U - 1)
            epi = []
            for i in range(U - 1):
                epi += when(sympy.Lt(je + i * step, stop), body(piece(i, je + i * step, peel[i])))
            result = self._loop_if_runs(new, not rename) + epi
        else:
            pro = []                           # time steps 0 .. D-1: stage s of iteration t - D_s
            for t in range(D):
                for s in range(S):
                    k = t - dists[s]
                    if k < 0:
                        continue
                    c = k % U
                    pc = piece(c, start + k * step, names[c] + "p", names[c])
                    pro += when(sympy.Lt(start + k * step, stop), body(pc, s))
            attrs["skewed"] = D if S == 2 else dists
            if tail == "guard":
                steady = []
                for i in range(U):
                    copy_i = []
                    for s in range(S):
                        off = i + D - dists[s]
                        c = off % U
                        b = body(piece(c, var + off * step, names[c], steady=True), s)
                        copy_i += b if dists[s] == D else when(sympy.Lt(var + off * step, stop), b)
                    steady += copy_i if i == 0 else when(sympy.Lt(var + i * step, stop), copy_i)
                result = pro + [For(var, start, stop, U * step, steady, attrs, loop.loc)]
            else:
                steady = []
                for i in range(U):
                    for s in range(S):
                        off = i + D - dists[s]
                        c = off % U
                        steady += body(piece(c, var + off * step, names[c], steady=True), s)
                lead = U + D - 1
                new = For(var, start, stop - lead * step, U * step, steady, attrs, loop.loc)
                je = _peel_end(start, stop, step, U, lead)
                epi = []                       # the time steps after the loop, up to the last iteration it
                for u in range(U + D - 1):     # can leave, je + (lead-1)*step (je >= stop - lead*step, so
                    for s in range(S):         # iteration je + lead*step is never run)
                        off = D + u - dists[s]
                        if off >= lead:
                            continue
                        c = off % U
                        pc = piece(c, je + off * step, names[c] + ("e" if u < U else "f"), names[c])
                        epi += when(sympy.Lt(je + off * step, stop), body(pc, s))
                result = pro + self._loop_if_runs(new, not rename) + epi
        self._order_end(local_set)
        self.placeholders |= {b for b in slots if b not in {t for v in slots.values() for t in v}}
        self.placeholders |= set(own_tails)      # their loop-variable declarations, once no copy uses them
        if "stage" in loop.attrs:          # a loop inside a skewed loop: its copies keep the loop's stage
            for ins in walk_instrs(result):
                ins.attrs["stage"] = loop.attrs["stage"]
            for s in result:
                if isinstance(s, For):
                    s.attrs["stage"] = loop.attrs["stage"]
        return result

    @staticmethod
    def _loop_if_runs(loop: For, drop_empty: bool) -> list:
        """[loop], or [] when it runs no iteration for sure and ``drop_empty`` (the front end's own code,
        rename=False: what its parser would not emit)."""
        if drop_empty and sympy.sympify(loop.stop - loop.start).is_nonpositive:
            return []
        return [loop]

    # ------------------------------------------------------------------ stages and checks
    def _stage_of(self, s, loop, n_stages: int):
        ok = tuple(range(n_stages)) + (ALL,)
        if isinstance(s, Instr) or isinstance(s, For):
            st = s.attrs.get("stage")
            if st is None and isinstance(s, For):
                inner = {i.attrs.get("stage") for i in walk_instrs(s.body)}
                st = inner.pop() if len(inner) == 1 else None
            if st not in ok:
                what = s.op if isinstance(s, Instr) else f"the loop over {s.var}"
                marks = "stage=0 or stage=1" if n_stages == 2 else f"stage=0 .. {n_stages - 1}"
                raise CompileError(f"software pipelining: {what} in the skewed loop over {loop.var} has no stage "
                                   f"mark ({marks}, or stage=all)", loc=s.loc or loop.loc)
            return st
        if isinstance(s, If):
            inner = {self._stage_of(i, loop, n_stages) for i in s.then_body + s.else_body}
            if len(inner) != 1:
                raise CompileError(f"software pipelining: an if in the skewed loop over {loop.var} holds "
                                   f"instructions of stages {sorted(inner, key=str)}: one stage a statement",
                                   loc=s.loc or loop.loc)
            return inner.pop()
        raise CompileError(f"software pipelining: {type(s).__name__} in the skewed loop over {loop.var}: "
                           "only instructions, loops and ifs carry stages", loc=loop.loc)

    def _stages(self, loop, local, n_stages: int, check: bool) -> list:
        stages = [self._stage_of(s, loop, n_stages) for s in loop.body]
        if check:
            self._check_order(loop, local, stages, n_stages)
        return stages

    def _check_order(self, loop, local, stages, n_stages: int):
        """A per-iteration tile is written before it is read, in the order one iteration runs: its stage 0
        statements, then its stage 1 statements, ... (each in body order; a ``stage=all`` statement in
        every stage)."""
        def runs_in(k):
            st = stages[k] if stages else 0
            return range(n_stages) if st == ALL else (st,)
        order = [(st, k) for st in range(n_stages) for k in range(len(loop.body)) if st in runs_in(k)]
        writer: dict = {}
        for k, s in enumerate(loop.body):
            for ins in walk_instrs([s]):
                w = _written(ins)
                st = min(runs_in(k))
                if w in local and (w not in writer or st < writer[w][0]):
                    writer[w] = (st, ins)
        first: set = set()
        for st, k in order:
            for ins in walk_instrs([loop.body[k]]):
                for t in _read(ins):
                    if t not in local or t in first:
                        continue
                    if t in writer and writer[t][0] > st:
                        wst, w = writer[t]
                        raise CompileError(f"software pipelining: tile {t} is read by {ins.op} in stage {st} but "
                                           f"written by {w.op} in stage {wst}"
                                           f"{f' (line {w.loc.line})' if w.loc else ''}: stage {st} of an iteration"
                                           f" runs before its stage {wst}, so the use would precede the definition",
                                           loc=ins.loc or loop.loc)
                    raise CompileError(f"software pipelining: tile {t} is read by {ins.op} before the iteration of "
                                       f"the loop over {loop.var} writes it (a tile carried from one iteration to "
                                       "the next must be set before the loop)", loc=ins.loc or loop.loc)
                w = _written(ins)
                if w is not None:
                    first.add(w)

    def _crossing(self, loop, stages, local) -> set:
        """Per-iteration tiles a stage writes and a later stage reads (not those a ``stage=all`` statement
        writes: every stage instance sets them again)."""
        written, read, everywhere = {}, {}, set()
        for s, st in zip(loop.body, stages):
            for ins in walk_instrs([s]):
                w = _written(ins)
                if st == ALL:
                    if w is not None:
                        everywhere.add(w)
                    continue
                if w is not None:
                    written.setdefault(w, set()).add(st)
                for t in _read(ins):
                    read.setdefault(t, set()).add(st)
        return {t for t in local if t in written and t in read and t not in everywhere
                and min(written[t]) < max(read[t])}

    # ------------------------------------------------------------------ tiles
    def _name(self, t: str, suffix: str) -> str:
        root, path = self.origin.get(t, (t, ""))
        n = f"{root}_{suffix}{path}"
        self.origin[n] = (root, suffix + path)
        return n

    def _slot_version(self, buf: str, tile: str, var, pc: _Piece) -> str:
        """The slot tile a copy uses for ``buf``: the slot itself, or, where the placeholder's valid shape
        differs from the slot's (a tail; it may depend on the loop variable), a declaration of the slot
        (same buffer and address) with the copy's iteration substituted in that valid shape, one per
        distinct valid shape."""
        by_name = {t.name: t for t in self.block.tiles}
        ph, slot = by_name.get(buf), by_name.get(tile)
        if ph is None or slot is None or ph.valid is None:
            return tile
        valid = tuple(self.sx(v, pc) for v in ph.valid)
        if valid == tuple(slot.shape):
            valid = None
        if valid == (None if slot.valid is None else tuple(slot.valid)):
            return tile
        key = (tile, valid)
        decl = self.versions.get(key)
        if decl is None:
            taken = set(by_name) | {d.name for d in self.versions.values()}
            k = 1
            while f"{tile}_s{k}" in taken:
                k += 1
            decl = self.versions[key] = TileDecl(f"{tile}_s{k}", slot.space, slot.dtype, tuple(slot.shape),
                                                 slot.addr, valid, slot.layout, slot.buffer_name)
        return decl.name

    def _order_start(self):
        self._new: list = []           # declarations in the order the copies make them
        self._declared: set = set()

    def _declare(self, pc: _Piece, stmts, local):
        touched = _touches(stmts, Counter())
        by_name = {t.name: t for t in self.block.tiles}
        for t in local:
            if t not in touched:
                continue
            n = pc.rename[t]
            if n in self._declared or n in by_name:
                continue
            base = by_name.get(t)
            if base is None:
                raise CompileError(f"software pipelining: tile {t} is not declared", loc=self.block.loc)
            valid = None if base.valid is None else tuple(self.sx(v, pc) for v in base.valid)
            if valid is not None and tuple(valid) == tuple(base.shape):
                valid = None
            buf = pc.rename.get(base.buffer, base.buffer) if base.buffer else None
            self._new.append(TileDecl(n, base.space, base.dtype, tuple(base.shape), base.addr, valid, base.layout, buf))
            self._declared.add(n)
            self.made[n] = self.origin[n]

    def _order_end(self, local: set):
        """The copies' declarations where the loop's own tiles were (they replace them)."""
        tiles, out, placed = self.block.tiles, [], False
        for t in tiles:
            if t.name in local:
                if not placed:
                    out += self._new
                    placed = True
                continue
            out.append(t)
        if not placed:
            out += self._new
        self.block.tiles = out
        for t in local:
            self.made.pop(t, None)

    def sx(self, e, pc: _Piece):
        if not isinstance(e, sympy.Basic):
            return e
        r = pc.memo.get(e)
        if r is None:
            r = pc.memo[e] = _sx(self.subs, e, pc.mapping)
        return r

    # ------------------------------------------------------------------ copying statements
    def copy(self, stmts: list, pc: _Piece, var, start) -> list:
        out = []
        for s in stmts:
            if isinstance(s, Instr):
                out.append(self.copy_instr(s, pc))
            elif isinstance(s, For):
                attrs = {k: v for k, v in s.attrs.items() if k != "stage"}
                body = pc.lists[id(s.body)] = self.copy(s.body, pc, var, start)
                out.append(For(s.var, self.sx(s.start, pc), self.sx(s.stop, pc), self.sx(s.step, pc), body,
                               attrs, s.loc))
            elif isinstance(s, If):
                if s.else_body:
                    if pc.steady and _first_iteration_test(s.cond, var, start) and \
                            sympy.sympify(pc.offset).is_positive:
                        out += self.copy(s.else_body, pc, var, start)
                        continue
                    cond = self.sx(s.cond, pc)
                    d = _decided(cond) if pc.fold else None
                    if d is not None:
                        out += self.copy(s.then_body if d else s.else_body, pc, var, start)
                        continue
                    then = pc.lists[id(s.then_body)] = self.copy(s.then_body, pc, var, start)
                    other = pc.lists[id(s.else_body)] = self.copy(s.else_body, pc, var, start)
                    out.append(If(cond, then, other, s.loc))
                    continue
                cond = self.sx(s.cond, pc)
                d = _decided(cond)
                if d is False:
                    continue
                body = self.copy(s.then_body, pc, var, start)
                if d is True:
                    out += body
                elif body:
                    pc.lists[id(s.then_body)] = body
                    out.append(If(cond, body, [], s.loc))
            else:
                out.append(s)
        return out

    def copy_instr(self, ins: Instr, pc: _Piece) -> Instr:
        ops = []
        for o in ins.operands:
            if isinstance(o, str):
                ops.append(pc.rename.get(o, o))
            elif isinstance(o, GMRegion):
                ops.append(GMRegion(o.param, tuple(self.sx(x, pc) for x in o.offsets), o.clipped))
            else:
                ops.append(self.sx(o, pc))
        attrs = {}
        for k, v in ins.attrs.items():
            if k == "stage":
                continue
            if k == HANDOFF:
                # one use: one mark object, or (a front end's marks with a home) one (buffer, use, home)
                key = id(v) if v.home is None else (v.buffer, v.use, id(v.home))
                new = pc.marks.get(key)
                self.copied_marks = True
                if new is None:
                    home = v.home if v.home is None or v.home is pc.home else pc.lists.get(id(v.home), v.home)
                    new = pc.marks[key] = HandoffAccess(pc.buffers.get(v.buffer, v.buffer), v.use, home)
                v = new
            elif k == "tmp" and isinstance(v, str):
                v = pc.rename.get(v, v)
            attrs[k] = v
        return Instr(ins.op, ops, ins.pipe, attrs, ins.loc)


def _slot_symbol(loop: For, slot):
    """The loop's slot symbol (a Symbol, or the name of one its body's expressions hold)."""
    if slot is None or isinstance(slot, sympy.Symbol):
        return slot
    for ins in walk_instrs(loop.body):
        for o in ins.operands:
            for x in (o.offsets if isinstance(o, GMRegion) else (o,)):
                if isinstance(x, sympy.Basic):
                    for f in x.free_symbols:
                        if f.name == slot:
                            return f
    return None


def _free(exprs) -> set:
    return set().union(*[getattr(v, "free_symbols", set()) for v in exprs])


def _written(ins: Instr):
    """The tile an instruction writes (its destination), None for a store."""
    o = ins.operands[0] if ins.operands else None
    return o if isinstance(o, str) and ins.spec.kind != "store" else None


def _read(ins: Instr) -> list:
    """The tiles an instruction reads: its source tiles and scratch (a destination only when also a source)."""
    tiles = touched_tiles(ins)
    w = _written(ins)
    return [t for t in tiles if t != w or t in ins.operands[1:]]


def _first_iteration_test(cond, var, start) -> bool:
    return isinstance(cond, sympy.Eq) and cond.lhs == var and sympy.sympify(cond.rhs) == sympy.sympify(start)


def _peel_end(start, stop, step: int, unroll: int, lead: int):
    """The first index the loop ``for j in range(start, stop - lead*step, unroll*step)`` does not run."""
    group = unroll * step
    return start + group * _smax0(sympy.ceiling((sympy.sympify(stop) - lead * step - start) / group))


def _rehome(stmts: list, tops: dict) -> None:
    """A handoff use acquired in the loop's body (its mark's home) is homed in the list its copy's
    statements landed in (the loop's new body, a guard's, the prologue's list)."""
    new: dict = {}
    for s in stmts:
        pc = tops.get(id(s))
        if pc is not None:
            for ins in walk_instrs([s]):
                m = ins.attrs.get(HANDOFF)
                if m is not None and m.home is pc.home:
                    if id(m) not in new:
                        new[id(m)] = HandoffAccess(m.buffer, m.use, stmts)
                    ins.attrs[HANDOFF] = new[id(m)]
        if isinstance(s, For):
            _rehome(s.body, tops)
        elif isinstance(s, If):
            _rehome(s.then_body, tops)
            _rehome(s.else_body, tops)


def _renumber_handoffs(stmts) -> None:
    """Uses numbered in program order (one number per distinct mark)."""
    seen: dict = {}
    for ins in walk_instrs(stmts):
        m = ins.attrs.get(HANDOFF)
        if m is None:
            continue
        new = seen.get(id(m))
        if new is None:
            new = seen[id(m)] = (m, HandoffAccess(m.buffer, len(seen), m.home))
        ins.attrs[HANDOFF] = new[1]


__all__ = ["software_pipeline", "MARKS"]

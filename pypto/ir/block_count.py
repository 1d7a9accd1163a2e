"""Which kernels give the same results on any number of cores (a Block IR analysis; reads the IR,
changes nothing). The cpu backend runs such kernels on fewer cores than the task asks for
(pypto/runtime/cpu/core_count.py).

On the device the ``block_dim`` cores of a launch run side by side; on the host they run one
after another on a few threads, and a grid-stride loop ``for t in range(block_idx, n, block_num)``
over 48 cores then walks GM in 48-tile strides (every tile on another page, out of reach of the
prefetchers). A kernel is *block-count free* when each core's work is a set of tiles of such a
loop and no tile's work depends on another's; running it on ``k`` cores does exactly the same
tiles, each with the same inputs, so the outputs are bit for bit the same.

The test is conservative (anything it cannot prove keeps the task's block count):
  - one core type (no cube + vector clusters, no cross-core flags);
  - one top-level loop starts at ``block_idx * c`` and steps ``p * block_num * c`` (p > 1: a
    loop pipelined p deep, whose body does the tiles t, t + c * block_num, ...); its bound and
    the statements before it are free of ``block_idx`` / ``block_num``;
  - in its body every expression (GM offsets, tile valid shapes, conditions) is a function of
    one tile index t + j * c * block_num — its *stage* j — and no stage reads what another
    stage wrote (so each tile's work is the same whichever core does it, and with whatever
    other tile);
  - only flags and barriers follow that loop (no per-core epilogue);
  - no iteration reads local memory an earlier iteration of that core left behind: inside the
    loop's body, every tile range read was written earlier in the same iteration, unless nothing
    in the loop writes it (then it holds what the prologue loaded, the same on every core);
  - no GM tensor is both loaded and stored (iterations cannot talk through GM).
"""
from __future__ import annotations

import sympy

from .block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion,
                         If, Instr, Kernel, PipeBarrier, SetFlag, WaitFlag, walk)

_LAUNCH_SYMBOLS = frozenset({BLOCK_IDX.name, BLOCK_NUM.name, SUBBLOCK_IDX.name})
_READS_DST = frozenset({"TMATMUL_ACC"})       # instructions that read their destination too
_SYNC = (SetFlag, WaitFlag, PipeBarrier)


def _mentions_launch(value) -> bool:
    if isinstance(value, sympy.Basic):
        return any(s.name in _LAUNCH_SYMBOLS for s in value.free_symbols)
    if isinstance(value, (list, tuple)):
        return any(_mentions_launch(v) for v in value)
    if isinstance(value, dict):
        return any(_mentions_launch(v) for v in value.values())
    if isinstance(value, GMRegion):
        return _mentions_launch(value.offsets)
    return False


def _statement_mentions_launch(s) -> bool:
    if isinstance(s, Instr):
        return _mentions_launch(s.operands) or _mentions_launch(s.attrs)
    if isinstance(s, For):
        return (_mentions_launch((s.start, s.stop, s.step))
                or any(_statement_mentions_launch(x) for x in s.body))
    if isinstance(s, If):
        return _mentions_launch(s.cond) or any(_statement_mentions_launch(x) for x in s.then_body + s.else_body)
    return False


def _grid_stride(loop: For):
    """(c, p) when start = block_idx * c and step = p * block_num * c (p > 1: a loop pipelined p
    deep, whose body does the tiles t, t + c * block_num, ...) and stop is free of both; else None."""
    try:
        c = sympy.simplify(sympy.sympify(loop.start) / BLOCK_IDX)
        p = sympy.simplify(sympy.sympify(loop.step) / (c * BLOCK_NUM)) if c != 0 else None
    except (TypeError, ValueError, ZeroDivisionError, sympy.SympifyError):
        return None
    if not (c.is_Integer and c > 0 and p is not None and p.is_Integer and p > 0) or _mentions_launch(loop.stop):
        return None
    return int(c), int(p)


class _Ranges:
    """Byte ranges of local memory, per space: what a tile name occupies, and coverage tests."""

    def __init__(self, block):
        self.of = {t.name: (str(t.space), t.addr or 0, (t.addr or 0) + t.nbytes) for t in block.tiles}
        self.valid = {t.name: t.valid for t in block.tiles}

    @staticmethod
    def covered(r, written) -> bool:
        space, lo, hi = r
        for s, a, b in sorted(w for w in written if w[0] == space):
            if a <= lo < b:
                lo = b
            if lo >= hi:
                return True
        return lo >= hi

    @staticmethod
    def overlaps(r, ranges) -> bool:
        return any(r[0] == s and r[1] < b and a < r[2] for s, a, b in ranges)


def _accesses(ins: Instr, ranges: _Ranges):
    """(tile ranges read, tile range written) of an instruction."""
    tiles = [o for o in ins.operands if isinstance(o, str)]
    if ins.spec.kind == "store":
        return [ranges.of[t] for t in tiles], None
    if not tiles:
        return [], None
    dst, srcs = tiles[0], tiles[1:]
    reads = [ranges.of[t] for t in srcs if t in ranges.of]
    if ins.op in _READS_DST:
        reads.append(ranges.of[dst])
    return reads, ranges.of.get(dst)


def _decide(cond, subst: dict):
    try:
        v = sympy.sympify(cond).subs(subst)
    except (TypeError, ValueError, sympy.SympifyError):
        return None
    return bool(v) if v in (sympy.true, sympy.false) else None


class _Unprovable(Exception):
    pass


def _values(x):
    """The scalar expressions inside an operand / attr value."""
    if isinstance(x, sympy.Basic):
        yield x
    elif isinstance(x, GMRegion):
        yield from _values(x.offsets)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _values(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _values(v)


class _Iteration:
    """One iteration of the grid loop ``for t in range(block_idx * c, n, p * block_num * c)``,
    walked in program order. Each statement belongs to a *stage* j (the tile t + j * c *
    block_num it works on) — read off its expressions, and off the data it reads — and a stage
    may not read what another stage wrote (that would tie tiles to the core count). Reads of
    ranges that the loop writes but this iteration has not written yet are carried state."""

    def __init__(self, loop: For, c: int, p: int, ranges: _Ranges):
        self.t, self.c, self.p, self.ranges = loop.var, c, p, ranges
        self.carried = []               # reads not covered by this iteration's earlier writes
        self.writes = []                # every range written in the loop
        self.tags: dict = {}            # range -> stage of the data last written there

    def stage_of(self, e):
        if isinstance(e, (sympy.logic.boolalg.BooleanFunction, sympy.core.relational.Relational)):
            # a condition (t < n, And(...)): the stage of its sides, which must agree
            parts = e.args if isinstance(e, sympy.logic.boolalg.BooleanFunction) else (e.lhs, e.rhs)
            found = self.stages(parts)
            if len(found) > 1:
                raise _Unprovable
            return next(iter(found), None)
        if not _mentions_launch(e):
            return 0 if self.t in getattr(e, "free_symbols", ()) else None
        for j in range(1, self.p):
            shifted = sympy.expand(sympy.sympify(e).subs(self.t, self.t - j * self.c * BLOCK_NUM))
            if not _mentions_launch(shifted):
                return j
        raise _Unprovable

    def stages(self, values) -> set:
        return {j for j in (self.stage_of(v) for v in values) if j is not None}

    def walk(self, body, written: set, subst: dict, outer: set) -> set:
        written = set(written)
        for s in body:
            if isinstance(s, Instr):
                reads, w = _accesses(s, self.ranges)
                tiles = [o for o in s.operands if isinstance(o, str)]
                stage = outer | self.stages(list(_values(s.operands)) + list(_values(s.attrs)) +
                                            list(_values([self.ranges.valid.get(t) for t in tiles])))
                stage |= {self.tags[r] for r in reads if r in self.tags and self.tags[r] is not None}
                if len(stage) > 1:
                    raise _Unprovable
                self.carried.extend(r for r in reads if not self.ranges.covered(r, written))
                if w is not None:
                    written.add(w)
                    self.writes.append(w)
                    self.tags = {r: j for r, j in self.tags.items() if not self.ranges.overlaps(r, [w])}
                    self.tags[w] = next(iter(stage), None)
            elif isinstance(s, If):
                inner = outer | self.stages(_values(s.cond))
                choice = _decide(s.cond, subst)
                if choice is True:
                    written = self.walk(s.then_body, written, subst, inner)
                elif choice is False:
                    written = self.walk(s.else_body, written, subst, inner)
                else:
                    a = self.walk(s.then_body, written, subst, inner)
                    b = self.walk(s.else_body, written, subst, inner)
                    written = a & b
            elif isinstance(s, For):
                inner = outer | self.stages(_values((s.start, s.stop, s.step)))
                first = self.walk(s.body, written, {**subst, s.var: s.start}, inner)
                later = {k: v for k, v in subst.items() if k != s.var}
                self.walk(s.body, first, later, inner)     # later iterations: the first's writes are there
                written = first       # the loop runs at least once (else its results are undefined)
            elif isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)):
                raise _Unprovable
        return written


def block_count_free(kernel: Kernel) -> bool:
    """True when running the kernel on any number of cores gives the same results (rules above)."""
    if len(kernel.blocks) != 1:
        return False
    block = kernel.blocks[0]
    if any(t.addr is None for t in block.tiles):
        return False
    loads, stores = set(), set()
    for ins in block.instructions():
        for o in ins.operands:
            if isinstance(o, GMRegion):
                (stores if ins.spec.kind == "store" else loads).add(o.param)
        if ins.spec.kind == "store" and ins.attrs.get("atomic"):
            return False
    if loads & stores:
        return False
    grid = [i for i, s in enumerate(block.body) if isinstance(s, For) and _mentions_launch((s.start, s.step))]
    if len(grid) != 1:
        return False
    loop = block.body[grid[0]]
    shape = _grid_stride(loop)
    if shape is None:
        return False
    head, tail = block.body[:grid[0]], block.body[grid[0] + 1:]
    if not all(isinstance(s, _SYNC) for s in tail):
        return False
    for s in head:
        if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)) or _statement_mentions_launch(s):
            return False
    ranges = _Ranges(block)
    head_tiles = {o for s in walk(head) if isinstance(s, Instr) for o in s.operands if isinstance(o, str)}
    if any(_mentions_launch(ranges.valid[t]) for t in head_tiles):
        return False
    iteration = _Iteration(loop, *shape, ranges)
    try:
        iteration.walk(loop.body, set(), {}, set())
    except _Unprovable:
        return False
    return not any(ranges.overlaps(r, iteration.writes) for r in iteration.carried)

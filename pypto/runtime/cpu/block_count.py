"""Which kernels give the same results on any number of cores, so that the cpu backend may run
them on fewer cores than the task asks for.

On the device the ``block_dim`` cores of a launch run side by side; on the host they run one
after another on a few threads, and a grid-stride loop ``for t in range(block_idx, n, block_num)``
over 48 cores then walks GM in 48-tile strides (every tile on another page, out of reach of the
prefetchers). A kernel is *block-count free* when each core's work is a subset of the iterations
of such a loop and no iteration depends on another one; running it on ``k`` cores does exactly
the same iterations, each with the same inputs, so the outputs are bit for bit the same.

The test is conservative (anything it cannot prove keeps the task's block count):
  - one core type (no cube + vector clusters, no cross-core flags);
  - ``block_idx`` / ``block_num`` appear only as the start ``block_idx * c`` and step
    ``block_num * c`` of one top-level loop (and nowhere else: not in its bound, its body, tile
    valid shapes or other statements);
  - only flags and barriers follow that loop (no per-core epilogue);
  - no iteration reads local memory an earlier iteration of that core left behind: inside the
    loop's body, every tile range read was written earlier in the same iteration, unless nothing
    in the loop writes it (then it holds what the prologue loaded, the same on every core);
  - no GM tensor is both loaded and stored (iterations cannot talk through GM).
"""
from __future__ import annotations

import weakref

import sympy

from ...ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion,
                         If, Instr, Kernel, PipeBarrier, SetFlag, WaitFlag)

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


def _grid_stride(loop: For) -> bool:
    """start = block_idx * c and step = block_num * c for one positive integer c; stop free of both."""
    try:
        c = sympy.simplify(sympy.sympify(loop.start) / BLOCK_IDX)
        c2 = sympy.simplify(sympy.sympify(loop.step) / BLOCK_NUM)
    except (TypeError, ValueError, sympy.SympifyError):
        return False
    return (c.is_Integer and c > 0 and c == c2 and not _mentions_launch(loop.stop)
            and not any(_statement_mentions_launch(x) for x in loop.body))


class _Ranges:
    """Byte ranges of local memory, per space: what a tile name occupies, and coverage tests."""

    def __init__(self, block):
        self.of = {t.name: (str(t.space), t.addr or 0, (t.addr or 0) + t.nbytes) for t in block.tiles}

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


def _early_reads(body, ranges: _Ranges, written: set, subst: dict, reads_out: list, writes_out: list) -> set:
    """Walk one iteration: collect reads not covered by ``written`` (ranges written so far this
    iteration), every write, and return the ranges written for sure. An If decided by the
    enclosing loops' first values takes its branch; otherwise both are walked and only what
    both write counts as written. Inner loops are walked for their first iteration (their If
    conditions decided with the start value) and again for the later ones."""
    written = set(written)
    for s in body:
        if isinstance(s, Instr):
            reads, w = _accesses(s, ranges)
            reads_out.extend(r for r in reads if not ranges.covered(r, written))
            if w is not None:
                written.add(w)
                writes_out.append(w)
        elif isinstance(s, If):
            choice = _decide(s.cond, subst)
            if choice is True:
                written = _early_reads(s.then_body, ranges, written, subst, reads_out, writes_out)
            elif choice is False:
                written = _early_reads(s.else_body, ranges, written, subst, reads_out, writes_out)
            else:
                a = _early_reads(s.then_body, ranges, written, subst, reads_out, writes_out)
                b = _early_reads(s.else_body, ranges, written, subst, reads_out, writes_out)
                written = a & b
        elif isinstance(s, For):
            first = _early_reads(s.body, ranges, written, {**subst, s.var: s.start}, reads_out, writes_out)
            # later iterations: what the first wrote is there; If conditions undecided
            later_subst = {k: v for k, v in subst.items() if k != s.var}
            _early_reads(s.body, ranges, first, later_subst, reads_out, writes_out)
            written = first       # the loop runs at least once (else its results are undefined)
    return written


def block_count_free(kernel: Kernel) -> bool:
    if len(kernel.blocks) != 1:
        return False
    block = kernel.blocks[0]
    loads, stores = set(), set()
    for ins in block.instructions():
        for o in ins.operands:
            if isinstance(o, GMRegion):
                (stores if ins.spec.kind == "store" else loads).add(o.param)
        if ins.spec.kind == "store" and ins.attrs.get("atomic"):
            return False
    if loads & stores:
        return False
    if any(_mentions_launch(t.valid) for t in block.tiles):
        return False
    grid = [i for i, s in enumerate(block.body) if isinstance(s, For) and _mentions_launch((s.start, s.step))]
    if len(grid) != 1 or not _grid_stride(block.body[grid[0]]):
        return False
    head, loop, tail = block.body[:grid[0]], block.body[grid[0]], block.body[grid[0] + 1:]
    if not all(isinstance(s, _SYNC) for s in tail):
        return False
    for s in head:
        if isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)) or _statement_mentions_launch(s):
            return False
    if any(isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)) for s in _walk(loop.body)):
        return False
    ranges = _Ranges(block)
    if any(t.addr is None for t in block.tiles):
        return False
    reads, writes = [], []
    _early_reads(loop.body, ranges, set(), {}, reads, writes)
    return not any(ranges.overlaps(r, writes) for r in reads)


def _walk(stmts):
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from _walk(s.body)
        elif isinstance(s, If):
            yield from _walk(s.then_body + s.else_body)


_FREE: dict[int, tuple] = {}     # id(Kernel) -> (weakref to it, block_count_free(kernel))


def _free_cached(kernel: Kernel) -> bool:
    hit = _FREE.get(id(kernel))
    if hit is not None and hit[0]() is kernel:
        return hit[1]
    free = block_count_free(kernel)
    try:
        _FREE[id(kernel)] = (weakref.ref(kernel, lambda _, k=id(kernel): _FREE.pop(k, None)), free)
    except TypeError:
        pass
    return free


def cores_to_run(kernel: Kernel | None, block_dim: int, threads: int, per_thread: int = 4) -> int:
    """How many cores the cpu backend runs a launch of ``block_dim`` cores on: a few per host
    thread when the kernel is block-count free (enough to balance the threads), else all."""
    target = max(1, threads) * per_thread
    if kernel is None or block_dim <= target or not _free_cached(kernel):
        return block_dim
    return target

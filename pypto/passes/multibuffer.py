"""Multi-buffered loop workspaces (ExecutionGraph -> ExecutionGraph, in place).

A GM workspace that the tiling pass made while tiling a loop body holds a value of one iteration
(``Buffer.private_to``). With one buffer, every iteration's writer waits for the previous
iteration's readers (WAR, WAW in runtime/host/deps.py), so independent iterations run one after
another. Here each such workspace gets ``K`` copies in one base buffer ``<name>_copies`` of shape
[K, *shape], and the workspace becomes a view of copy ``n mod K`` for the n-th iteration (in
program order over the enclosing loops). Iterations K apart still share a copy and stay ordered by
the same dependency model, so the result cannot change; only false waits go away. Kernels do not
change: a task's GM param binds the view, whose offset moves with the loop variable (buffers.py).

K per loop (every private workspace of one loop body gets the same K):
    K = min(iterations, 1 + ceil(tasks of the body / S), floor(L2 budget / bytes of one copy))
where S is the largest, over the kinds of cores (AIC, AIV), of the sum over the body's tasks of that
kind of min(1, block_dim / cores of the kind): the share of those cores one iteration occupies. An
iteration's tasks run one after another, so tasks / S iterations in flight keep the busiest cores
full; one more is being dispatched (the AICPU's dispatch cost). The copies of one loop's
workspaces take at most a quarter of L2 (copies that do not stay in L2 cost HBM traffic instead of
waits). Sizes, trip counts and block_dims may be symbolic: K is then an expression the runtime
evaluates with the run's sizes. K sizes buffers, allocated before the control program runs, so a
trip count or block_dim known only while it runs (a data scalar: the MoE grouped matmul's rows per
expert) bounds nothing (a block_dim counts as every core) and weighs 1 in the iteration number.
K = 1 leaves the buffer alone, and so do loops whose every task
waits for the previous iteration through a running state (``_a_chain``: the GDN state recurrence),
where copies would only take L2 from other data — unless an enclosing loop's iterations are
independent (the chunk recurrence of one head inside a loop over heads): the iteration number
counts over the nested loops, so copies let the heads overlap.
"""
from __future__ import annotations

import math

import sympy

from .. import symbolic as sym
from ..ir.block import CoreType
from ..ir.execution import Buffer, ExecutionGraph, Loop

L2_SHARE = 4        # the copies of one loop's workspaces take at most 1/L2_SHARE of the L2


def multibuffer_workspaces(eg: ExecutionGraph, machine) -> ExecutionGraph:
    loops = _loops(eg.program)
    private: dict = {}                     # innermost loop var -> [workspace Buffer]
    for b in eg.buffers.values():
        if b.role == "workspace" and b.view_of is None and b.private_to and b.private_to[-1] in loops:
            private.setdefault(b.private_to[-1], []).append(b)
    for var, bufs in private.items():
        loop, outer = loops[var]
        numbered = _iteration_number(outer + [loop], set(eg.symbols))
        if numbered is None:
            continue
        slot, counted = numbered
        if all(_a_chain(eg, lp) for lp in counted):
            continue
        copies = _copies(eg, loop, counted, bufs, machine, loops)
        if copies is None:
            continue
        slot = sympy.Mod(slot, copies)
        for b in bufs:
            _split(eg, b, copies, slot)
        _record(eg, loop, bufs, copies)
    return eg


def _root(eg, name):
    """(root buffer name, element offset of ``name`` in it)."""
    off = sympy.Integer(0)
    b = eg.buffers[name]
    while b.view_of is not None:
        off = off + sympy.sympify(b.view_offset)
        b = eg.buffers[b.view_of]
    return b.name, off


def _a_chain(eg, loop) -> bool:
    """Whether every task of an iteration waits for the previous iteration anyway, so that copies
    would only take memory (and L2): each task reads or writes a running state (a buffer region that
    does not move with the loop and that the body both reads and writes there), or reads a
    workspace of the iteration that such a task wrote. A task whose regions are not declared counts
    as independent (this is a choice of K only: copies never change a result)."""
    tasks = list(_tasks(loop.body))
    varying = {loop.var} | {it.var for it in _nested_loops(loop.body)}

    def fixed(buffer, region):
        root, off = _root(eg, buffer)
        exprs = [off, *region.offsets, *region.extents]
        if any(sympy.sympify(e).free_symbols & varying for e in exprs):
            return None
        return root

    state_reads, state_writes = set(), set()
    for t in tasks:
        if t.reads is None or t.writes is None:
            return False
        state_reads |= {fixed(r.buffer, r) for r in t.reads} - {None}
        state_writes |= {fixed(r.buffer, r) for r in t.writes} - {None}
    private = {n for n, b in eg.buffers.items() if loop.var in b.private_to}
    state = (state_reads & state_writes) - private
    if not state:
        return False
    chained: set = set()                   # private workspaces written by chained tasks
    for t in tasks:
        touches = {fixed(r.buffer, r) for r in t.reads + t.writes} & state
        reads = {_root(eg, r.buffer)[0] for r in t.reads}
        if not touches and not (reads & chained):
            return False
        chained |= {_root(eg, r.buffer)[0] for r in t.writes} & private
    return True


def _nested_loops(items):
    for it in items:
        if isinstance(it, Loop):
            yield it
            yield from _nested_loops(it.body)


def _loops(items, outer=()) -> dict:
    """Loop var -> (Loop, [enclosing Loops, outermost first])."""
    out = {}
    for it in items:
        if isinstance(it, Loop):
            out[it.var] = (it, list(outer))
            out.update(_loops(it.body, (*outer, it)))
    return out


def _trip(loop):
    trips = sympy.ceiling((sympy.sympify(loop.stop) - loop.start) / loop.step)
    return sympy.sympify(sym.simplify(sympy.Max(0, trips)))


def _iteration_number(chain, sizes=frozenset()):
    """(the number of the current iteration in program order over the nested loops ``chain``
    (outermost first), the loops it counts): counted from the innermost loop out as far as each
    step is a positive integer and each inner trip count does not depend on an outer loop variable;
    None when the innermost loop's step is not a positive integer. An inner trip count known only
    while the program runs (a data scalar: the grouped matmul's rows of one expert) weighs 1, so the
    number is the sum of the indices: a copy's offset must be an expression of sizes and loop indices,
    and consecutive iterations still differ by one (two that share a copy stay ordered by deps.py)."""
    n = sympy.Integer(0)
    weight = sympy.Integer(1)
    loop_vars = {lp.var for lp in chain}
    counted = []
    for lp in reversed(chain):
        step = sympy.sympify(lp.step)
        if not (step.is_Integer and step > 0):
            break
        idx = sympy.floor((lp.var - lp.start) / step) if step != 1 else lp.var - lp.start
        n = n + idx * weight
        counted.insert(0, lp)
        trip = _trip(lp)
        if trip.free_symbols & loop_vars:
            break
        weight = weight * (trip if trip.free_symbols <= sizes else 1)
    if not counted:
        return None
    return sym.simplify(n), counted


def _tasks(items):
    for it in items:
        if isinstance(it, Loop):
            yield from _tasks(it.body)
        else:
            yield it


def _copies(eg, loop, counted, bufs, machine, loops):
    """K for the workspaces ``bufs`` of ``loop`` (an int or a size expression), or None for one copy.
    ``counted``: the loops the iteration number counts (K is at most their iterations together);
    ``loops``: every loop of the program (a block_dim that depends on a loop variable, as a tail's
    does, counts as at the loop's first iteration)."""
    first = {var: lp.start for var, (lp, _) in loops.items()}
    tasks, used, cores = 0, {}, {"AIV": machine.num_aiv, "AIC": machine.num_aic}
    for task in _tasks(loop.body):
        kernel = eg.kernels.get(task.kernel)
        if kernel is None:
            continue
        kind = "AIV" if kernel.block(CoreType.AIC) is None else "AIC"
        block_dim = sympy.sympify(task.block_dim)
        for _ in range(len(loops)):                   # a loop's start may name an outer loop's variable
            if not (block_dim.free_symbols & first.keys()):
                break
            block_dim = block_dim.subs(first)
        if block_dim.free_symbols - set(eg.symbols):      # a loop index's or a data scalar's
            block_dim = sympy.Integer(cores[kind])
        tasks += 1
        used[kind] = used.get(kind, 0) + sympy.Min(cores[kind], sympy.Max(1, block_dim))
    if not tasks:
        return None
    # one iteration's tasks run one after another; the iterations in flight that keep the busiest
    # kind of cores full: tasks / (the share of that kind one iteration takes: used / cores), plus
    # one being dispatched (integer quotients only: K is evaluated by the runtime, int by int)
    in_flight = sympy.Min(*[sympy.ceiling(tasks * cores[kind] / n) for kind, n in used.items()])
    per_copy = sum((_nbytes(b) for b in bufs), sympy.Integer(0))
    budget = machine.memory.get("l2_bytes", 0) // L2_SHARE
    trips = [_trip(lp) for lp in counted]
    # a trip count known only while the program runs bounds nothing here (K sizes buffers)
    iterations = (math.prod(trips, start=sympy.Integer(1))
                  if all(t.free_symbols <= set(eg.symbols) for t in trips) else sympy.oo)
    k = sympy.sympify(sym.simplify(sympy.Min(iterations, 1 + in_flight,
                                             sympy.floor(budget / sympy.Max(1, per_copy)))))
    if k.is_Integer:
        return int(k) if int(k) > 1 else None
    if k.free_symbols - set(eg.symbols):
        # K sizes buffers, so it may name only the run's sizes: a trip count the control program knows
        # only while it runs (a data scalar, a run-time branch, an outer loop's index) keeps one copy
        return None
    return sympy.Max(1, k)


def _nbytes(b: Buffer):
    return math.prod(b.shape, start=sympy.Integer(1)) * b.dtype.itemsize


def _record(eg, loop, bufs, copies) -> None:
    """The report's decisions: per kernel of the loop, its workspaces' copies."""
    names = {b.name for b in bufs}
    for t in _tasks(loop.body):
        for buf in set(t.gm_args.values()) & names:
            eg.kernels[t.kernel].attrs.setdefault("decisions", {}).setdefault("gm_copies", {})[buf] = copies


def _split(eg, b: Buffer, copies, slot) -> None:
    """Workspace ``b`` becomes copy ``slot`` of a new base buffer of ``copies`` copies."""
    name, k = f"{b.name}_copies", 1
    while name in eg.buffers:
        k += 1
        name = f"{b.name}_copies{k}"
    eg.buffers[name] = Buffer(name, (copies, *b.shape), b.dtype, "workspace")
    b.role, b.view_of, b.private_to = "view", name, ()
    b.view_offset = sym.simplify(slot * math.prod(b.shape, start=sympy.Integer(1)))


__all__ = ["multibuffer_workspaces"]

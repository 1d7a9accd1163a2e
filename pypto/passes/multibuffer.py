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
    K = min(trip count, 1 + ceil(tasks of the body / S), floor(L2 budget / bytes of one copy))
where S is the largest, over the kinds of cores (AIC, AIV), of the sum over the body's tasks of that
kind of min(1, block_dim / cores of the kind): the share of those cores one iteration occupies. An
iteration's tasks run one after another, so tasks / S iterations in flight keep the busiest cores
full; one more is being dispatched (the AICPU's dispatch cost). The copies of one loop's
workspaces take at most a quarter of L2 (copies that do not stay in L2 cost HBM traffic instead of
waits). Sizes, trip counts and block_dims may be symbolic: K
is then an expression the runtime evaluates with the run's sizes. K = 1 leaves the buffer alone.
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
        copies = _copies(eg, loop, bufs, machine, loops)
        if copies is None:
            continue
        slot = _iteration_number(outer + [loop])
        if slot is None:
            continue
        slot = sympy.Mod(slot, copies)
        for b in bufs:
            _split(eg, b, copies, slot)
    return eg


def _loops(items, outer=()) -> dict:
    """Loop var -> (Loop, [enclosing Loops, outermost first])."""
    out = {}
    for it in items:
        if isinstance(it, Loop):
            out[it.var] = (it, list(outer))
            out.update(_loops(it.body, (*outer, it)))
    return out


def _trip(loop):
    return sympy.sympify(sym.simplify(sympy.Max(0, sympy.ceiling((sympy.sympify(loop.stop) - loop.start) / loop.step))))


def _iteration_number(chain):
    """The number of the current iteration in program order over the nested loops ``chain``
    (outermost first); None when a step is not a positive integer or an inner trip count depends
    on an outer loop variable (then only the innermost loop's own count is used)."""
    n = sympy.Integer(0)
    weight = sympy.Integer(1)
    loop_vars = {lp.var for lp in chain}
    for k, lp in enumerate(reversed(chain)):
        step = sympy.sympify(lp.step)
        if not (step.is_Integer and step > 0):
            return None if k == 0 else n
        idx = sympy.floor((lp.var - lp.start) / step) if step != 1 else lp.var - lp.start
        n = n + idx * weight
        trip = _trip(lp)
        if trip.free_symbols & loop_vars:
            return sym.simplify(n)
        weight = weight * trip
    return sym.simplify(n)


def _tasks(items):
    for it in items:
        if isinstance(it, Loop):
            yield from _tasks(it.body)
        else:
            yield it


def _copies(eg, loop, bufs, machine, loops):
    """K for the workspaces ``bufs`` of ``loop`` (an int or a size expression), or None for one copy.
    ``loops``: every loop of the program (a block_dim that depends on a loop variable, as a tail's
    does, counts as at the loop's first iteration)."""
    first = {var: lp.start for var, (lp, _) in loops.items()}
    tasks, share = 0, {}
    for task in _tasks(loop.body):
        kernel = eg.kernels.get(task.kernel)
        if kernel is None:
            continue
        kind = "AIV" if kernel.block(CoreType.AIC) is None else "AIC"
        cores = machine.num_aiv if kind == "AIV" else machine.num_aic
        block_dim = sympy.sympify(task.block_dim)
        for _ in range(len(loops)):                   # a loop's start may name an outer loop's variable
            if not (block_dim.free_symbols & first.keys()):
                break
            block_dim = block_dim.subs(first)
        if block_dim.free_symbols & first.keys():
            block_dim = sympy.Integer(cores)
        tasks += 1
        share[kind] = share.get(kind, 0) + sympy.Min(1, block_dim / cores)
    if not tasks:
        return None
    # one iteration's tasks run one after another; the iterations in flight that keep the busiest
    # kind of cores full: tasks / (that kind's share one iteration takes), plus one being dispatched
    in_flight = sympy.ceiling(tasks / sympy.Max(*share.values()))
    per_copy = sum((_nbytes(b) for b in bufs), sympy.Integer(0))
    budget = machine.memory.get("l2_bytes", 0) // L2_SHARE
    k = sympy.sympify(sym.simplify(sympy.Min(_trip(loop), 1 + in_flight,
                                             sympy.floor(budget / sympy.Max(1, per_copy)))))
    if k.is_Integer:
        return int(k) if int(k) > 1 else None
    return sympy.Max(1, k)


def _nbytes(b: Buffer):
    return math.prod(b.shape, start=sympy.Integer(1)) * b.dtype.itemsize


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

"""The work of a run counted from its Block IR, for backends that do not model the machine (cpu):
per task instance and kernel, the GM bytes its loads read and its stores write, its cube FLOPs, its
vector element operations and its PTO instructions. Each core program is walked as that instance
runs it (its scalars, sizes, block index; loops and branches taken as they are taken), by Python
generated once per Block from its scalar expressions (exprs.py); nothing is run.

The definitions are the simulator's (sim/timing.py), so the two backends' reports agree:
  GM bytes       a TLOAD / TSTORE moves its tile's valid rows x cols elements of the GM tensor's dtype
                 (exact bytes: the simulator also rounds each row up to the GM burst);
  cube FLOPs     2 * M * N * K of each cube instruction over the valid shapes of dst (M x N) and a (K);
  vector ops     valid rows x cols of each vector instruction's dst (of its source for row / column
                 reductions);
  instructions   every PTO instruction executed (flags and barriers are not instructions).
A block with both core types runs its AIV block on ``aiv_per_aic`` sub-blocks per cluster, as on the
device. ``minimal_gm_bytes``: inputs read once + outputs written once, the roofline's GM term (both
reports).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from ...ir.block import BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, For, GMRegion, If, Instr
from ...ir.isa import ISA, Pipe
from .exprs import free_names, ident, to_source

_LOCAL_MOVES = (Pipe.MTE1, Pipe.FIX, Pipe.MTE3)
_COUNTS = ("load_bytes", "store_bytes", "cube_flops", "vector_ops", "instructions")


@dataclass
class Work:
    load_bytes: int = 0
    store_bytes: int = 0
    cube_flops: float = 0.0
    vector_ops: float = 0.0
    instructions: int = 0
    launches: int = 0            # task instances

    @property
    def gm_bytes(self) -> int:
        return self.load_bytes + self.store_bytes

    @property
    def flops(self) -> float:
        """Cube FLOPs + vector element operations (the Report's ``flops``)."""
        return self.cube_flops + self.vector_ops

    def add(self, counts, times: int = 1) -> None:
        for name, v in zip(_COUNTS, counts):
            setattr(self, name, getattr(self, name) + v * times)


def _terms(s: Instr, block: Block) -> tuple:
    """What one execution of ``s`` adds: (accumulator index, sympy/int expression) pairs."""
    spec = ISA[s.op]
    tiles = [block.tile(o) for o in s.operands if isinstance(o, str)]
    valid = [t.valid_shape for t in tiles]
    terms = [(4, 1)]
    if s.pipe == Pipe.M:
        (m, n), (_, k) = valid[0], valid[1]
        terms.append((2, 2 * m * n * k))
    elif spec.kind in ("push", "pop"):           # on-chip handoff (a5): no GM traffic
        pass
    elif spec.region in ("load", "store", "gather", "scatter"):
        gm = next(o for o in s.operands if isinstance(o, GMRegion))
        rows, cols = valid[0]
        terms.append((0 if spec.kind == "load" else 1, rows * cols * block.gm(gm.param).dtype.itemsize))
    elif s.pipe not in _LOCAL_MOVES:
        rows, cols = valid[1] if spec.region in ("rowreduce", "colreduce") else valid[0]
        terms.append((3, rows * cols))
    return tuple(terms)


def _names(stmts, block) -> set:
    out: set = set()
    for s in stmts:
        if isinstance(s, Instr):
            out |= free_names([e for _, e in _terms(s, block)])
        elif isinstance(s, For):
            out |= free_names([s.start, s.stop, s.step]) | _names(s.body, block)
        elif isinstance(s, If):
            out |= free_names([s.cond]) | _names(s.then_body, block) | _names(s.else_body, block)
    return out


def _emit(stmts, block, lines, depth, loop_vars) -> None:
    pad = "    " * depth
    for s in stmts:
        if isinstance(s, Instr):
            for acc, expr in _terms(s, block):
                lines.append(f"{pad}a{acc} += {to_source(expr)}")
        elif isinstance(s, For):
            bounds = f"range({to_source(s.start)}, {to_source(s.stop)}, {to_source(s.step)})"
            loop_vars.add(s.var.name)
            if s.var.name in _names(s.body, block):
                lines.append(f"{pad}for {ident(s.var.name)} in {bounds}:")
                n0 = len(lines)
                _emit(s.body, block, lines, depth + 1, loop_vars)
                if len(lines) == n0:
                    lines.append(f"{pad}    pass")
            else:       # the body does the same work every iteration: count it once, times the trip count
                k = len(lines)
                lines.append(f"{pad}_o{k} = (a0, a1, a2, a3, a4); a0 = a1 = a2 = a3 = a4 = 0")
                _emit(s.body, block, lines, depth, loop_vars)
                lines.append(f"{pad}_n{k} = len({bounds})")
                lines.append(f"{pad}a0, a1, a2, a3, a4 = (_o{k}[0] + _n{k} * a0, _o{k}[1] + _n{k} * a1, "
                             f"_o{k}[2] + _n{k} * a2, _o{k}[3] + _n{k} * a3, _o{k}[4] + _n{k} * a4)")
        elif isinstance(s, If):
            lines.append(f"{pad}if {to_source(s.cond)}:")
            n0 = len(lines)
            _emit(s.then_body, block, lines, depth + 1, loop_vars)
            if len(lines) == n0:
                lines.append(f"{pad}    pass")
            if s.else_body:
                lines.append(f"{pad}else:")
                n0 = len(lines)
                _emit(s.else_body, block, lines, depth + 1, loop_vars)
                if len(lines) == n0:
                    lines.append(f"{pad}    pass")


class _Counter:
    """One Block's work as a function of its env (sizes, scalars, block_idx / block_num / subblock_idx)."""

    def __init__(self, block: Block):
        lines: list = []
        loop_vars: set = set()
        _emit(block.body, block, lines, 1, loop_vars)
        self.names = sorted(_names(block.body, block) - loop_vars)
        head = ["def count(e):"] + [f"    {ident(n)} = e[{n!r}]" for n in self.names]
        head.append("    a0 = a1 = a2 = a3 = a4 = 0")
        source = "\n".join(head + lines + ["    return a0, a1, a2, a3, a4"])
        ns: dict = {}
        exec(compile(source, f"<work of block {block.name}>", "exec"), ns)
        self.count = ns["count"]
        self.per_core = not {BLOCK_IDX.name, SUBBLOCK_IDX.name} & set(self.names)


_CACHE: dict = {}     # id(block) -> (weakref to it, _Counter)


def _counter(block: Block) -> _Counter:
    hit = _CACHE.get(id(block))
    if hit is not None and hit[0]() is block:
        return hit[1]
    c = _Counter(block)
    _CACHE[id(block)] = (weakref.ref(block, lambda _, k=id(block): _CACHE.pop(k, None)), c)
    return c


def instance_work(inst, aiv_per_aic: int) -> tuple:
    """The counts of one task instance (``_COUNTS`` order) over its ``block_dim`` block instances."""
    kernel = inst.plan.kernel
    aic, aiv = kernel.block(CoreType.AIC), kernel.block(CoreType.AIV)
    subs = aiv_per_aic if aic is not None and aiv is not None else 1
    env = {**inst.kernel_env(), BLOCK_NUM.name: inst.block_dim}
    total = [0, 0, 0, 0, 0]
    for block, n_sub in ((aic, 1), (aiv, subs)):
        if block is None:
            continue
        c = _counter(block)
        if c.per_core:        # every block instance does the same work
            counts = c.count({**env, BLOCK_IDX.name: 0, SUBBLOCK_IDX.name: 0})
            total = [t + v * inst.block_dim * n_sub for t, v in zip(total, counts)]
            continue
        for k in range(inst.block_dim):
            for sub in range(n_sub):
                counts = c.count({**env, BLOCK_IDX.name: k, SUBBLOCK_IDX.name: sub})
                total = [t + v for t, v in zip(total, counts)]
    return tuple(total)


def count_work(instances, aiv_per_aic: int) -> dict:
    """{kernel name: Work} over the task instances of a run."""
    out: dict = {}
    for inst in instances:
        w = out.setdefault(inst.plan.kernel.name, Work())
        w.add(instance_work(inst, aiv_per_aic))
        w.launches += 1
    return out


def minimal_gm_bytes(graph, shapes: dict) -> int:
    """The bytes a run cannot avoid moving: every input read once and every output written once
    (the roofline's GM term; ``shapes``: the run's buffer shapes)."""
    def nbytes(name):
        return math.prod(shapes[name]) * graph.buffers[name].dtype.itemsize
    return sum(nbytes(n) for n in set(graph.inputs)) + sum(nbytes(n) for n in set(graph.outputs))

"""TileGraph -> BlockGraph: one Kernel per distinct tile program, one Task per program instance.

Kernels are parameterised by scalars, not sizes: every size symbol, loop variable or other
program-level expression a Block mentions becomes a scalar param ``n0, n1, ...`` (in order of
first appearance) that the Task binds. Two programs whose Blocks then print the same (the 24
layers of an MLP, the tiles of every row block...) share one Kernel, so the number of kernels does
not grow with the sizes or the depth of a model.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For,
                        GMParam, GMRegion, If, Instr, Kernel, PipeBarrier, SetFlag, TileDecl, WaitFlag)
from ..ir.execution import ExecutionGraph, Loop, Region, Task
from ..ir.kernel_node import KernelCall
from ..ir.tile_graph import TileGraph, TileLoop
from .kernel_nodes import lower_call
from .exprs import subs as fast_subs
from .flash import lower_flash
from .to_blocks import lower_program

LAUNCH_SYMBOLS = {BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX}


@dataclass
class BlockGraph:
    """Kernels (Block IR) and the ExecutionGraph that launches them, plus the memory regions the
    planner must keep apart per kernel."""
    graph: ExecutionGraph
    regions: dict = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [str(k) for k in self.graph.kernels.values()]
        return "\n\n".join(parts + [str(self.graph)])


# ---------------------------------------------------------------- expression walking
def map_block_exprs(block: Block, fn) -> None:
    """Apply ``fn`` to every scalar expression of a block, in place."""
    def ex(v):
        return fn(v) if isinstance(v, sympy.Basic) else v
    block.gm_params = [GMParam(g.name, g.dtype, tuple(ex(d) for d in g.shape)) for g in block.gm_params]
    for t in block.tiles:
        if t.valid is not None:
            t.valid = tuple(ex(v) for v in t.valid)

    def stmts(body):
        for s in body:
            if isinstance(s, Instr):
                s.operands = [GMRegion(o.param, tuple(ex(x) for x in o.offsets)) if isinstance(o, GMRegion)
                              else ex(o) if not isinstance(o, str) else o for o in s.operands]
            elif isinstance(s, For):
                s.start, s.stop, s.step = ex(s.start), ex(s.stop), ex(s.step)
                stmts(s.body)
            elif isinstance(s, If):
                s.cond = ex(s.cond)
                stmts(s.then_body)
                stmts(s.else_body)
    stmts(block.body)


def block_symbols(block: Block) -> list:
    """Free symbols of a block that are not its own loop variables or launch symbols, in order of
    first appearance."""
    seen, loops = [], set()

    def add(v):
        if isinstance(v, sympy.Basic):
            for s in sorted(v.free_symbols, key=lambda s: s.name):
                if s not in seen:
                    seen.append(s)
    for g in block.gm_params:
        for d in g.shape:
            add(d)
    for t in block.tiles:
        for v in t.valid or ():
            add(v)

    def stmts(body):
        for s in body:
            if isinstance(s, Instr):
                for o in s.operands:
                    if isinstance(o, GMRegion):
                        for x in o.offsets:
                            add(x)
                    elif not isinstance(o, str):
                        add(o)
            elif isinstance(s, For):
                loops.add(s.var)
                add(s.start), add(s.stop), add(s.step)
                stmts(s.body)
            elif isinstance(s, If):
                add(s.cond)
                stmts(s.then_body)
                stmts(s.else_body)
    stmts(block.body)
    return [s for s in seen if s not in loops and s not in LAUNCH_SYMBOLS and not s.name.startswith("i_")]


def _param_symbol(k: int, like: sympy.Symbol) -> sympy.Symbol:
    # plain symbols: sympy cannot then turn floor(n/2) into n/2 by proving n even, which would leave a
    # true division in integer index math
    return sympy.Symbol(f"n{k}")


def integer_form(e):
    """An integer-valued expression without true division: c*x with a fractional c becomes floor(...)."""
    if not isinstance(e, sympy.Basic) or e.is_Atom or isinstance(e, sympy.logic.boolalg.Boolean) and not e.args:
        return e
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        return e                  # a quotient inside floor/ceiling is integer division already
    if isinstance(e, (sympy.Min, sympy.Max, sympy.Mod)) or e.is_Relational \
            or isinstance(e, (sympy.And, sympy.Or, sympy.Not)):
        args = [integer_form(a) for a in e.args]
        return e.func(*args) if args != list(e.args) else e
    if e.is_Add or e.is_Mul:
        if _has_fraction(e):
            num, den = sympy.fraction(sympy.together(e))
            if den.is_Integer and den != 1:
                return sympy.floor(num / den)
        args = [integer_form(a) for a in e.args]
        return e.func(*args) if args != list(e.args) else e
    return e


def _has_fraction(e) -> bool:
    """A fractional coefficient at this level (not inside a function's arguments)."""
    if e.is_Rational:
        return not e.is_Integer
    if e.is_Mul:
        c, _ = e.as_coeff_Mul()
        return c.is_Rational and not c.is_Integer
    if e.is_Add:
        return any(_has_fraction(t) for t in e.args)
    return False


def parameterise(block: Block) -> dict:
    """Replace the block's program symbols by scalar params n0, n1...; returns {param name: symbol}."""
    syms = block_symbols(block)
    mapping = {s: _param_symbol(k, s) for k, s in enumerate(syms)}
    if mapping:
        map_block_exprs(block, lambda v: integer_form(fast_subs(v, mapping)))
    block.scalar_params = list(mapping.values())
    return {p.name: s for s, p in mapping.items()}


def _stmt_key(st):
    if isinstance(st, Instr):
        ops = tuple((o.param, tuple(o.offsets)) if isinstance(o, GMRegion) else o for o in st.operands)
        return ("I", st.op, ops, str(st.pipe), tuple(sorted((k, str(v)) for k, v in st.attrs.items())))
    if isinstance(st, For):
        return ("F", st.var, st.start, st.stop, st.step, tuple(_stmt_key(x) for x in st.body))
    if isinstance(st, If):
        return ("C", st.cond, tuple(_stmt_key(x) for x in st.then_body), tuple(_stmt_key(x) for x in st.else_body))
    return (type(st).__name__, tuple(str(v) for v in vars(st).values()))


def _structure_key(kernel: Kernel):
    """A hashable summary of a kernel's blocks (names of the kernel aside), equal for equal programs."""
    out = []
    for b in kernel.blocks:
        out.append((str(b.core), tuple((g.name, g.dtype.name, tuple(g.shape)) for g in b.gm_params),
                    tuple(b.scalar_params),
                    tuple((t.name, str(t.space), t.dtype.name, tuple(t.shape), t.valid, t.layout) for t in b.tiles),
                    tuple(_stmt_key(x) for x in b.body)))
    return tuple(out)


def _program_key(p):
    """A hashable summary of a tile program, buffers and source lines aside."""
    def opk(op):
        ops = tuple((o.param, tuple(o.offsets)) if hasattr(o, "param") else o for o in op.operands)
        return (op.op, ops, op.phase, tuple(sorted((k, str(v)) for k, v in op.attrs.items())), op.guard,
                tuple(opk(x) for x in op.otherwise))
    return (p.kind, tuple((a.name, a.size, a.tile, a.role) for a in p.axes),
            tuple((q.name, q.dtype.name, tuple(q.shape), q.mode) for q in p.params),
            tuple((t.name, str(t.space), t.dtype.name, tuple(t.shape), tuple(t.valid), t.phase)
                  for t in p.tiles.values()),
            tuple(opk(op) for op in p.ops), tuple(sorted((k, str(v)) for k, v in p.attrs.items())))


# ---------------------------------------------------------------- the pass
def lower_blocks(tg: TileGraph, machine) -> BlockGraph:
    kernels, by_key, regions = {}, {}, {}

    seen_programs = {}

    def task_of(p):
        pkey = _program_key(p)
        if pkey in seen_programs:
            kname, block_dim, binding = seen_programs[pkey]
        else:
            if p.kind == "flash":               # one cube <-> vector cluster kernel (passes/flash.py)
                kernel, block_dim, reg = lower_flash(p, machine)
            else:
                core = CoreType.AIC if p.kind == "matmul" else CoreType.AIV
                kernel, block_dim, reg = lower_program(p, machine, core)
            if "flash" in p.attrs and p.kind != "flash":     # why the attention here is not one flash kernel
                kernel.attrs["decisions"]["flash"] = p.attrs["flash"]
            binding = {}
            for b in kernel.blocks:
                binding.update(parameterise(b))
            key = _structure_key(kernel)
            if key in by_key:
                kname = by_key[key]
            else:
                kname = kernel.name
                by_key[key] = kname
                kernels[kname] = kernel
                regions[kname] = reg
            seen_programs[pkey] = (kname, block_dim, binding)
        gm_args = {q.name: q.buffer for q in p.params}
        reads = [r for q in p.params if q.mode in ("in", "inout") for r in _regions(tg, q)]
        writes = [r for q in p.params if q.mode in ("out", "inout") for r in _regions(tg, q)]
        return Task(kname, gm_args, binding, block_dim, reads, writes, p.loc, p.name)

    def rec(items):
        out = []
        for it in items:
            if isinstance(it, TileLoop):
                out.append(Loop(it.var, it.start, it.stop, it.step, rec(it.body), it.loc))
            elif isinstance(it, KernelCall):
                out.append(lower_call(it, kernels))      # a pl / pt kernel called as a node
            else:
                out.append(task_of(it))
        return out
    program = rec(tg.items)
    eg = ExecutionGraph(kernels, dict(tg.buffers), list(tg.inputs), list(tg.outputs), program, list(tg.symbols))
    return BlockGraph(eg, regions)


def _regions(tg, q) -> list:
    """The boxes a program reads or writes through param q (the whole bound buffer when unknown)."""
    if not q.regions:
        return [_whole(tg, q.buffer)]
    return [Region(buf, tuple(offs), tuple(ext)) for buf, offs, ext in q.regions]


def _whole(tg, name) -> Region:
    b = tg.buffers[name]
    return Region(name, (0,) * len(b.shape), tuple(b.shape))


__all__ = ["BlockGraph", "lower_blocks", "parameterise", "map_block_exprs", "TileDecl", "PipeBarrier", "SetFlag",
           "WaitFlag", "CrossCoreSetFlag", "CrossCoreWaitFlag"]

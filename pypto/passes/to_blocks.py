"""TileProgram -> Block: spread the tiles over cores and double-buffer them.

Choice (documented): one Task per program with ``block_dim = min(tiles, cores)``; core ``b``
takes tiles ``b, b + block_num, b + 2*block_num ...`` (round-robin, so tails balance), so the task
count stays one whatever the size, and a Block's loop over its tiles is where loads of the next
tile overlap work on this one. The loop that streams data is unrolled by two with a second set of
tiles (ping-pong): the tile loop for plain programs, the sequential loop for two-level reductions
and matmul K (whose per-tile state — accumulators, L0C — is single). The second copy runs under
``if`` for an odd count. Setup ops (loop invariant) run once per core, before the loop.

Memory regions for the planner: setup tiles, then one region per copy of the per-tile and the
per-step tiles; copies never share bytes, so the two sets really overlap in time.

``lower_op`` is the one tile op -> instruction step of both the Tensor level (here) and the Tile level
(pypto/tile/expand.py): a ``Copy`` says how one copy of the ops names its tiles, substitutes its indices
and marks its handoff accesses (``attrs[passes.cross_core.HANDOFF]``).
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..ir.block import (BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, If, Kernel, TileDecl,
                        instr)
from ..ir.tile_graph import LOWERING_ATTRS, GMTile, TileOp, TileProgram
from .cross_core import HANDOFF
from .exprs import subs as fast_subs
from .software_pipeline import software_pipeline


def _sx(v, m):
    if isinstance(v, sympy.Basic) and m:
        r = sympy.sympify(fast_subs(v, m))
        return int(r) if r.is_Integer else r
    return v


class Copy:
    """One copy of a phase's ops: index substitution and tile renaming."""

    def __init__(self, subs: dict, rename: dict):
        self.subs, self.rename = subs, rename

    def tile(self, name: str, writer: TileOp | None = None) -> str:
        """The tile this copy means by ``name`` (``writer``: the op when it is that op's destination)."""
        return self.rename.get(name, name)

    def expr(self, e):
        return _sx(e, self.subs)

    def handoff(self, op: TileOp):
        """The passes.cross_core.HandoffAccess of a handoff store / load in this copy."""
        raise NotImplementedError(f"{op.op}: this lowering has no cube <-> vector handoffs")


def lower_op(op: TileOp, copy: Copy, tiles: dict):
    """One tile op of ``copy`` as its instruction (guards aside); ``tiles`` holds the declared tiles."""
    operands = []
    for k, o in enumerate(op.operands):
        if isinstance(o, str):
            operands.append(copy.tile(o, op if k == 0 else None))
        elif isinstance(o, GMTile):
            operands.append(GMRegion(o.param, tuple(copy.expr(x) for x in o.offsets)))
        else:
            operands.append(copy.expr(o))
    attrs = {k: v for k, v in op.attrs.items() if k not in LOWERING_ATTRS}
    if "handoff" in op.attrs:
        attrs[HANDOFF] = copy.handoff(op)
    return instr(op.op, operands, tiles, attrs, op.loc)


def _linear_indices(axes, t):
    """Tile index of each parallel axis from the linear tile number ``t`` (last axis fastest)."""
    out, stride = {}, 1
    counts = [a.count for a in axes]
    for k in reversed(range(len(axes))):
        c = counts[k]
        if isinstance(c, int) and c == 1:
            out[axes[k].index] = 0
            continue
        q = t if stride == 1 else sympy.floor(t / stride)
        out[axes[k].index] = q if k == 0 else sympy.Mod(q, c)
        stride = stride * c
    return out


def _total(axes):
    n = 1
    for a in axes:
        n = n * a.count
    return sym.simplify(n) if not isinstance(n, int) else n


def _ping_pong(block: Block, made: dict, regions: dict) -> None:
    """The ping-pong copies' memory regions (``outer<copy>`` / ``inner<copy>``: copies never share bytes) and
    the declaration order the planner has always seen: setup, per-tile, per-step tiles, the second copy's
    before the first's."""
    for name, (root, path) in made.items():
        regions[name] = f"inner{path[1:]}" if path.startswith("s") else f"outer{path}"
        regions.pop(root, None)
    rank = {"setup": 0}
    order = {t.name: k for k, t in enumerate(block.tiles)}

    def key(t):
        root, path = made.get(t.name, (t.name, ""))
        reg = regions.get(t.name, "")
        return (rank.get(reg, 1 if reg.startswith("outer") else 2), -int(path[-1]) if path else 0, order[t.name])
    block.tiles.sort(key=key)


def _fits_twice(p: TileProgram, machine) -> bool:
    """Whether a second copy of every per-tile tile fits beside the first in each space (summed, no reuse:
    conservative). A one-step matmul's L0C accumulator of 128 x 256 fp32 fills L0C: it runs single-buffered."""
    need: dict = {}
    for tv in p.tiles.values():
        copies = 1 if tv.phase == "setup" else 2
        key = tv.space.capacity_key
        need[key] = need.get(key, 0) + copies * tv.dtype.itemsize * tv.shape[0] * tv.shape[1]
    return all(n <= machine.capacity[k] for k, n in need.items())


def lower_program(p: TileProgram, machine, core: CoreType = CoreType.AIV):
    """-> (Kernel, block_dim expr, regions {tile: region}) for one tile program."""
    par = p.parallel_axes()
    seq = p.sequential_axis()
    cores = machine.num_aiv if core == CoreType.AIV else machine.num_aic
    n_par = _total(par)
    block_dim = sympy.Max(1, sympy.Min(n_par, cores)) if not isinstance(n_par, int) else max(1, min(n_par, cores))
    one_each = isinstance(n_par, int) and n_par <= cores
    # a program whose smallest tiles leave no room for a second copy runs single-buffered
    double = p.attrs.get("pingpong", True)
    # a sequential axis of one step (a matmul whose K fits one tile) runs inline: the tile loop ping-pongs
    seq_once = seq is not None and isinstance(seq.count, int) and seq.count == 1 and _fits_twice(p, machine)
    pingpong_outer = double and (seq is None or seq_once) and not one_each
    pingpong_inner = double and seq is not None and not seq_once

    tiles, regions = {}, {}
    by_phase = {"setup": [], "pre": [], "step": [], "post": []}
    for op in p.ops:
        by_phase[op.phase].append(op)

    def declare(copy: Copy, region_of):
        for tv in p.tiles.values():
            if tv.phase != "setup":
                continue
            name = copy.rename.get(tv.name, tv.name)
            if name in tiles:
                continue
            valid = tuple(_sx(v, copy.subs) for v in tv.valid)
            decl_valid = None if tuple(valid) == tuple(tv.shape) else valid
            tiles[name] = TileDecl(name, tv.space, tv.dtype, tuple(tv.shape), None, decl_valid)
            regions[name] = region_of(tv)

    def emit_ops(ops, copy: Copy):
        out = []
        for op in ops:
            ins = lower_op(op, copy, tiles)
            if op.guard is not None:
                cond = fast_subs(op.guard, copy.subs) if copy.subs else op.guard
                alt = emit_ops(op.otherwise, copy)
                if cond is sympy.false:
                    out.extend(alt)
                elif cond is sympy.true:
                    out.append(ins)
                else:
                    out.append(If(cond, [ins], alt))
            else:
                out.append(ins)
        return out


    # setup: once per core
    setup_copy = Copy({a.index: 0 for a in p.axes if isinstance(a.count, int) and a.count == 1}, {})
    declare(setup_copy, lambda tv: "setup")
    t_var = sympy.Symbol("t", integer=True, nonnegative=True)

    def declare_phase(phases, subs, region):
        for tv in p.tiles.values():
            if tv.phase in phases and tv.name not in tiles:
                valid = tuple(_sx(v, subs) for v in tv.valid)
                tiles[tv.name] = TileDecl(tv.name, tv.space, tv.dtype, tuple(tv.shape), None,
                                          None if valid == tuple(tv.shape) else valid)
                regions[tv.name] = region

    def tile_body(t_expr):
        """The per-tile body, once: the software-pipelining pass makes the ping-pong copies."""
        subs = _linear_indices(par, t_expr)
        copy = Copy(subs, {})
        declare_phase(("pre", "post"), subs, "outer")
        stmts = emit_ops(by_phase["pre"], copy)
        if seq_once:
            sub2 = dict(subs)
            sub2[seq.index] = sympy.Integer(0)
            declare_phase(("step",), sub2, "outer")
            stmts += emit_ops(by_phase["step"], Copy(sub2, {}))
        elif seq is not None:
            k_var = sympy.Symbol("k", integer=True, nonnegative=True)
            sub2 = dict(subs)
            sub2[seq.index] = k_var
            declare_phase(("step",), sub2, "inner0")
            mark = {"unroll": 2, "tail": "guard", "names": ("s0", "s1")} if pingpong_inner else {}
            stmts.append(For(k_var, 0, _sx(seq.count, subs), 1, emit_ops(by_phase["step"], Copy(sub2, {})), mark))
        stmts += emit_ops(by_phase["post"], copy)
        return stmts

    if one_each:
        loop = tile_body(BLOCK_IDX if n_par != 1 else sympy.Integer(0))
    else:
        mark = {"unroll": 2, "tail": "guard", "names": ("0", "1")} if pingpong_outer else {}
        loop = [For(t_var, BLOCK_IDX, n_par, BLOCK_NUM, tile_body(t_var), mark)]
    body = emit_ops(by_phase["setup"], setup_copy) + loop
    gm = [GMParam(q.name, q.dtype, tuple(q.shape)) for q in p.params]
    block = Block(p.name, core, gm, [], list(tiles.values()), body, p.loc)
    _ping_pong(block, software_pipeline(block), regions)
    kernel = Kernel(p.name, [block], p.loc)
    kernel.attrs["decisions"] = {
        "kind": p.kind, "tile_source": p.attrs.get("tile_source", "chooser"),
        "tile": {a.name: a.tile for a in p.axes}, "sizes": {a.name: a.size for a in p.axes},
        "pipelining": 2 if (pingpong_outer or pingpong_inner) else 1, "block_dim": block_dim}
    if p.attrs.get("hint_adjusted"):
        kernel.attrs["decisions"]["hint_adjusted"] = p.attrs["hint_adjusted"]
    return kernel, block_dim, regions

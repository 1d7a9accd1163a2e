"""Compiling a traced tile program: clean-ups, placement, Block IR per core type (with unrolling and
software pipelining), on-chip memory planning, pipe synchronisation and cross-core flags — the same
Block IR passes the Tensor level uses (pypto.passes.memory / sync, pypto.ir.block_verify).

    traced KernelProgram --prepare--> --place--> Placement --emit--> Blocks --plan_memory--> addresses
        --insert_sync--> set/wait flags --insert_cross_core--> Kernel (AIV, AIC or AIC + AIV cluster)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from ..errors import CompileError, TilingError
from ..ir.block import Kernel
from ..ir.block_verify import verify_kernel
from ..passes.memory import plan_memory
from ..passes.sync import insert_sync
from . import skew
from .sync import synchronize
from .emit import SideEmitter
from .handoff import insert_cross_core
from .ir import KernelProgram, Loop
from .items import side_items
from .placement import CUBE, VECTOR, Placement, place
from .prepare import prepare


@dataclass
class Workspace:
    param: str
    rows_per_block: int
    cols: int
    dtype: object


@dataclass
class CompiledTile:
    program: KernelProgram
    kernel: Kernel | None = None
    placement: Placement | None = None
    workspaces: list = field(default_factory=list)
    skewed: list = field(default_factory=list)        # loop variables software-pipelined
    double_buffered: dict = field(default_factory=dict)   # space -> bool

    @property
    def kind(self) -> str:
        return self.placement.kind if self.placement else "reference"


def _loop_items(items, out):
    for it in items:
        if it.kind == "loop":
            out[id(it.loop)] = it
            _loop_items(it.body, out)
    return out


def _values(program):
    from .emit import _values as vals
    return vals(program)


def plan_stages(program: KernelProgram, pl: Placement, sides) -> tuple:
    """-> ({side: {id(loop): stages}}, {id(loop): copies}): the software-pipelined loops of each side and
    how many times every loop is unrolled (both sides of a loop unroll it alike: the handoff slots
    follow the iteration number)."""
    values = _values(program)
    per_side = {s: _loop_items(side_items(program.body, s, pl), {}) for s in sides}
    stages = {s: {} for s in sides}
    unroll = {}
    loops = set().union(*(set(d) for d in per_side.values())) if per_side else set()
    for lid in loops:
        plans = {}
        for s in sides:
            it = per_side[s].get(lid)
            if it is not None:
                plans[s] = skew.plan(it.body, it.loop, s, pl, values)
        if not any(p is not None for p in plans.values()):
            continue
        seqs = [skew.handoff_events(per_side[s][lid].body, plans[s], 8, skew.SKEW) for s in plans]
        if not skew.deadlock_free(seqs, skew.SKEW + 1):
            continue
        unroll[lid] = skew.SKEW + 1
        for s, p in plans.items():
            if p is not None:
                stages[s][lid] = p
    return stages, unroll


def channel_slots(program: KernelProgram, pl: Placement, unroll: dict) -> dict:
    """Workspace slots per channel: the unroll factor of the innermost loop where the tile is handed over."""
    owner = {}
    for lp in _all_loops(program.body):
        for c in lp.carried:
            owner[id(c.phi)] = lp
            owner[id(c.result)] = lp.parent
    out = {}
    for vid, ch in pl.channels.items():
        lp = owner.get(vid, ch.value.loop) if vid in owner else ch.value.loop
        out[ch.id] = unroll.get(id(lp), 2) if lp is not None else 2
    return out


def _plan(block, machine, regions, tile_loc):
    big = SimpleNamespace(alignment=machine.alignment, capacity={k: 1 << 40 for k in machine.capacity})
    used = plan_memory(block, big, regions)
    over = {sp for sp, n in used.items() if n > machine.capacity[sp.capacity_key]}
    kept = {}
    if over:
        regions = {t: r for t, r in regions.items() if block.tile(t).space not in over}
        used = plan_memory(block, big, regions)
    for sp, n in used.items():
        cap = machine.capacity[sp.capacity_key]
        if n > cap:
            tiles = sorted((t for t in block.tiles if t.space == sp), key=lambda t: -t.nbytes)[:4]
            listing = ", ".join(f"{t.name} {t.dtype}[{t.shape[0]}, {t.shape[1]}] ({t.nbytes} B"
                                f"{', ' + str(tile_loc[t.name]) if tile_loc.get(t.name) else ''})" for t in tiles)
            loc = next((tile_loc[t.name] for t in tiles if tile_loc.get(t.name)), block.loc)
            raise TilingError(f"the {sp} tiles of the {block.core} program need {n} bytes at once, over the "
                              f"{cap}-byte {sp}; largest: {listing}", loc=loc,
                              hint="pick smaller tile shapes (the compiler keeps two copies of loop tiles)")
    plan_memory(block, machine, regions)
    for sp in used:
        kept[str(sp)] = sp not in over
    return kept


class _TooManyEvents(Exception):
    pass


def _build(program, pl, machine, sides, stages, unroll):
    """Block IR of every side: emission, memory plan and pipe sync. Copies of loop tiles get their own
    memory regions (true double buffering) unless that needs more set/wait events than the machine
    has, then the vector buffer, then every space, is planned by liveness alone."""
    from ..ir.isa import MemSpace
    slots = channel_slots(program, pl, unroll)
    blocks, double = [], {}
    for s in sides:
        for mode in ("copies", "shared-ub", "shared"):
            em = SideEmitter(s, program, pl, machine, stages[s], unroll, slots)
            block = em.build(program.name)
            regions = dict(em.regions)
            if mode != "copies":
                regions = {t: r for t, r in regions.items()
                           if mode == "shared-ub" and em.tiles[t].space != MemSpace.UB}
            kept = _plan(block, machine, regions, _tile_locs(em, program))
            try:
                synchronize(block, machine)
                break
            except CompileError as e:
                if "event" not in str(e):
                    raise
        else:
            raise _TooManyEvents()
        double.update({k: v and mode == "copies" for k, v in kept.items()})
        insert_cross_core(block, pl.channel_list(), s, slots)
        blocks.append(block)
    return blocks, double, slots


def compile_program(program: KernelProgram, backend: str, machine, options: dict) -> CompiledTile:
    prepare(program)
    _dump(program, options, "tile_program.txt", str(program))
    if backend == "reference":
        return CompiledTile(program)
    pl = place(program)
    sides = [s for s in (CUBE, VECTOR) if pl.kind in (s, "cluster")]
    stages, unroll = plan_stages(program, pl, sides)
    try:
        blocks, double, slots = _build(program, pl, machine, sides, stages, unroll)
    except _TooManyEvents:
        # deeper pipelining needs more set/wait events than a pipe pair has: fall back to double buffering
        stages, unroll = {s: {} for s in sides}, {}
        blocks, double, slots = _build(program, pl, machine, sides, stages, unroll)
    skewed = sorted({str(lp.var) for s in sides for lp in _all_loops(program.body) if id(lp) in stages[s]})
    kernel = Kernel(program.name, blocks, program.loc)
    if os.environ.get("PYPTO_VERIFY", "") not in ("", "0") or options.get("verify"):
        verify_kernel(kernel, machine)
    workspaces = [Workspace(c.param, slots[c.id] * c.value.shape[0], c.value.shape[1], c.value.dtype)
                  for c in pl.channel_list()]
    _dump(program, options, "kernel.pto", str(kernel))
    return CompiledTile(program, kernel, pl, workspaces, skewed, double)


def _all_loops(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield s
            yield from _all_loops(s.body)


def _tile_locs(em, program) -> dict:
    locs = {}
    vals = {v.name: v for v in _values(program).values()}
    for name in em.tiles:
        base = name.split("_")[0]
        v = vals.get(base)
        if v is not None and v.op is not None:
            locs[name] = v.op.loc
    return locs


def _dump(program, options, fname, text):
    root = options.get("dump") or os.environ.get("PYPTO_DUMP")
    if not root:
        return
    d = Path(root) / f"tile_{program.name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / fname).write_text(text + "\n")


__all__ = ["compile_program", "CompiledTile", "CompileError"]

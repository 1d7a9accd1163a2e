"""Compiling a traced tile program: clean-ups, placement, the TileGraph (the compiled form, what
``dump=`` writes), Block IR per core type lowered from it (with unrolling and software pipelining,
expand.py over the shared pypto.passes.to_blocks.lower_op), on-chip memory planning, pipe
synchronisation and cross-core flags — the same Block IR the Tensor level uses; memory planning is the
shared pass pypto.passes.memory (its "pools" strategy), pipe sync the shared passes
pypto.passes.pipe_sync and pypto.passes.vector_barriers, the verifier is pypto.ir.block_verify.

    traced KernelProgram --prepare--> --place--> Placement --to_tile_graph--> TileGraph --lower_tile_graph-->
        Blocks --plan_memory--> addresses --synchronize--> set/wait flags --insert_barriers--> pipe_barrier(V)
        --insert_handoff_flags--> Kernel
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import CompileError, SyncError
from ..ir.block import Kernel
from ..ir.block_verify import verify_kernel
from ..passes.cross_core import insert_handoff_flags
from ..passes.memory import plan_memory
from ..passes.pipe_sync import block_resources, synchronize
from ..passes.vector_barriers import insert_barriers
from . import skew
from .dump import dump_kernel, dump_stage
from .expand import lower_tile_graph
from .tile_graph import program_values, to_tile_graph
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
    scratch: list = field(default_factory=list)       # GM scratch of pt.reshape: (base, rows, cols, view, ...)
    peak_bytes: dict = field(default_factory=dict)    # "side.space" -> bytes of on-chip memory used
    tile_graph: object = None                         # the placed program as a pypto.ir.tile_graph.TileGraph

    @property
    def kind(self) -> str:
        return self.placement.kind if self.placement else "reference"


def _loop_items(items, out):
    for it in items:
        if it.kind == "loop":
            out[id(it.loop)] = it
            _loop_items(it.body, out)
    return out


def plan_stages(program: KernelProgram, pl: Placement, sides) -> tuple:
    """-> ({side: {id(loop): stages}}, {id(loop): copies}): the software-pipelined loops of each side and
    how many times every loop is unrolled (both sides of a loop unroll it alike: the handoff slots
    follow the iteration number)."""
    values = program_values(program)
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


class _TooManyEvents(Exception):
    pass


def _build(program, pl, machine, stages, unroll, max_pool=4):
    """The TileGraph and the Block IR lowered from it: memory plan (least recently freed bytes first, so
    the copies of loop tiles land on different bytes when they fit) and pipe sync of every side."""
    slots = channel_slots(program, pl, unroll)
    tg = to_tile_graph(program, pl, machine, stages, unroll, slots)
    for p in tg.programs():
        p.attrs["max_pool"] = max_pool
    blocks = lower_tile_graph(tg)
    peaks = block_passes(tg, blocks, machine, _tile_locs(program, blocks))
    return tg, blocks, peaks, slots


def block_passes(tg, blocks, machine, tile_loc=None) -> dict:
    """The shared Block IR passes over the blocks lowered from a Tile-level TileGraph (lower_tile_graph),
    in place: memory plan (buffer pools of at most the programs' ``max_pool``), pipe sync, vector
    barriers, cross-core handoff flags; -> peak bytes per "side.space"."""
    peaks = {}
    for p, block in zip(tg.programs(), blocks):
        used = plan_memory(block, machine, strategy="pools", tile_loc=tile_loc or {},
                           max_pool=p.attrs.get("max_pool", 4))
        side = CUBE if p.kind == "matmul" else VECTOR
        peaks.update({f"{side}.{sp}": n for sp, n in used.items()})
        gm_alias = {v: b for b, _, _, v, _, _, _ in p.attrs.get("scratch", ())}   # pt.reshape: views of one tensor
        try:
            synchronize(block, machine, block_resources(block, gm_alias))
        except SyncError as e:
            raise _TooManyEvents() from e
        insert_barriers(block)
    insert_handoff_flags(blocks, machine)
    return peaks


def compile_program(program: KernelProgram, backend: str, machine, options: dict) -> CompiledTile:
    prepare(program)
    dump_stage(program, options, "traced", text=str(program))
    if backend == "reference":
        return CompiledTile(program)
    pl = place(program)
    sides = [s for s in (CUBE, VECTOR) if pl.kind in (s, "cluster")]
    stages, unroll = plan_stages(program, pl, sides)
    # more buffers and deeper pipelining need more set/wait events; when a pipe pair runs out of them,
    # fall back to fewer buffers per tile size, then to plain double buffering
    attempts = [(stages, unroll, 4), (stages, unroll, 2), ({s: {} for s in sides}, {}, 2)]
    for k, (stages, unroll, pool) in enumerate(attempts):
        try:
            tg, blocks, peaks, slots = _build(program, pl, machine, stages, unroll, pool)
            break
        except _TooManyEvents as e:
            if k == len(attempts) - 1:
                raise e.__cause__ from None
    dump_stage(program, options, "placed", tg)
    skewed = sorted({str(lp.var) for s in sides for lp in _all_loops(program.body) if id(lp) in stages[s]})
    kernel = Kernel(program.name, blocks, program.loc)
    if os.environ.get("PYPTO_VERIFY", "") not in ("", "0") or options.get("verify"):
        verify_kernel(kernel, machine)
    workspaces = [Workspace(c.param, slots[c.id] * c.value.shape[0], c.value.shape[1], c.value.dtype)
                  for c in pl.channel_list()]
    scratch = [s for p in tg.programs() for s in p.attrs.get("scratch", ())]
    dump_kernel(program, options, kernel, machine)
    return CompiledTile(program, kernel, pl, workspaces, skewed, scratch, peaks, tg)


def _all_loops(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield s
            yield from _all_loops(s.body)


def _tile_locs(program, blocks) -> dict:
    locs = {}
    vals = {v.name: v for v in program_values(program).values()}
    for b in blocks:
        for t in b.tiles:
            v = vals.get(t.name.split("_")[0])
            if v is not None and v.op is not None:
                locs[t.name] = v.op.loc
    return locs



__all__ = ["compile_program", "block_passes", "CompiledTile", "CompileError"]

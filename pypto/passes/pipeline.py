"""``lower(graph)``: the pass pipeline from a traced TensorGraph to an ExecutionGraph of Block IR kernels.

    decompose      composites -> primitive ops                       TensorGraph -> TensorGraph
    canonicalize   fold casts, split reductions, drop dead nodes     TensorGraph -> TensorGraph
    autocast       bf16 vector math through fp32                      TensorGraph -> TensorGraph
    tile           row chunks, fusion plan, tile choice, tile programs TensorGraph -> TileGraph
    blocks         cores, ping-pong, one Kernel per distinct program  TileGraph   -> BlockGraph
    memory         on-chip addresses                                  BlockGraph  -> BlockGraph
    sync           set/wait flags between pipes, vector barriers      BlockGraph  -> BlockGraph
    final          the ExecutionGraph; loop workspaces multi-buffered  BlockGraph  -> ExecutionGraph
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import ShapeError
from ..ir.block_verify import verify_kernel
from ..ir.graph_verify import verify_graph
from ..machine import machine_spec
from ..ops.registry import REGISTRY
from ..ops.shape_rules import fmt_shape
from .autocast import autocast
from .canonicalize import canonicalize
from .cross_core import insert_handoff_flags
from .decompose import decompose
from .hints import check_hints
from .index_checks import CHECK_KIND
from .kernel_nodes import is_prebuilt
from .kernels import BlockGraph, lower_blocks
from .manager import PassManager
from .memory import plan_memory
from .multibuffer import multibuffer_workspaces
from .pipe_sync import synchronize
from .rewrite import live_nodes
from .row_chunks import chunk_rows, drop_fills
from .tiling import build_tile_graph
from .vector_barriers import insert_barriers

_last = {"manager": None}


def _memory(bg: BlockGraph, spec) -> BlockGraph:
    for name, k in bg.graph.kernels.items():
        if is_prebuilt(k):                    # a pl / pt kernel called as a node: placed by its front end
            continue
        used = {str(b.core): plan_memory(b, spec, bg.regions.get(name)) for b in k.blocks}
        k.attrs.setdefault("decisions", {})["memory"] = used        # the report's decisions
    return bg


def _sync(bg: BlockGraph, spec) -> BlockGraph:
    for k in bg.graph.kernels.values():
        if is_prebuilt(k):
            continue
        for b in k.blocks:
            synchronize(b, spec)
            insert_barriers(b)
        on_chip = insert_handoff_flags(k.blocks, spec)    # cluster kernels (passes/flash.py); no-op for one core type
        if on_chip:                                         # a5: the handoffs that went on chip (the report's decisions)
            k.attrs.setdefault("decisions", {})["handoff"] = on_chip
    return bg


def _tile(g, spec, notes: list, row_chunks=True, **options):
    """A row-parallel program as a loop over row chunks (row_chunks.py; its note added to ``notes``), then the
    TileGraph."""
    forced = None if row_chunks is True else int(row_chunks)
    known = len(g.notes)
    g, fills = chunk_rows(g, spec, forced) if row_chunks is not False else (g, set())
    notes.extend(g.notes[known:])
    tg = build_tile_graph(g, spec, **options)
    drop_fills(tg, fills)
    return tg


def _verify_blocks(bg) -> None:
    graph = getattr(bg, "graph", bg)
    for k in graph.kernels.values():
        verify_kernel(k, _verify_blocks.spec)


def _verify_graph(g) -> None:
    verify_graph(g, REGISTRY)


def refuse_zero_size(g) -> None:
    """Tiles cannot be sized for a zero-length dim: an op that reads or makes a tensor with a static
    size 0 is refused at its line (reductions over such a dim fold at trace time, see api_reduce)."""
    for nid in sorted(live_nodes(g)):
        node = g.node(nid)
        if node["op"] == "input":
            continue
        if node["op"] == "loop":
            refuse_zero_size(node["attrs"]["body"])
        for v in [nid, *node["inputs"]]:
            info = g.info(v)                  # a loop node has one ValueInfo per result
            for shape in ([i.shape for i in info] if isinstance(info, (list, tuple)) else [info.shape]):
                if any(isinstance(d, int) and d == 0 for d in shape):
                    raise ShapeError(f"{node['op']} on a zero-size tensor {fmt_shape(shape)}: the lowered "
                                     "backends (sim, cpu, npu) do not compile zero-size tensors (the reference "
                                     "backend runs them)", loc=node["loc"])


# the whole-program choices a caller may override (pypto.jit(lowering={...})), each a keyword of lower()
LOWERING_OPTIONS = ("fuse", "multibuffer", "static_masks", "flash", "row_chunks")


def lower(graph, *, machine=None, dump=None, verify: bool = False, fuse: bool = True, multibuffer: bool = True,
          static_masks: bool = True, flash: bool = True, row_chunks: bool | int = True):
    """Lower a TensorGraph to an ExecutionGraph (kernels in Block IR, tasks, buffers, loops).
    ``multibuffer=False`` keeps one copy of each loop workspace (passes/multibuffer.py), ``static_masks=False``
    computes the tiles a compile-time mask discards (passes/static_masks.py), ``flash=False`` keeps attention as
    separate cube and vector tasks instead of one cluster kernel (passes/flash.py), ``row_chunks=False`` keeps
    a row-parallel program's ops over all rows at once instead of a loop over row chunks (passes/row_chunks.py;
    a number: that many chunks where the rows divide), for comparisons."""
    refuse_zero_size(graph)
    spec = machine_spec(machine)
    pm = PassManager(graph.name, dump, verify)
    _last["manager"] = pm
    _verify_blocks.spec = spec
    pm.write("traced", graph)
    check_hints(graph, spec)                  # the user's ops, at their lines
    g = pm.run("decompose", decompose, graph, verifier=_verify_graph)
    g = pm.run("canonicalize", canonicalize, g, verifier=_verify_graph)
    g = pm.run("autocast", autocast, g, verifier=_verify_graph)
    check_hints(g, spec)                      # the ops the rewrites re-traced with their hints
    notes = list(graph.notes)                 # what the trace chose, then what the passes decided
    chosen = zip(LOWERING_OPTIONS, (fuse, multibuffer, static_masks, flash, row_chunks))
    overrides = {k: v for k, v in chosen if v is not True}
    if overrides:
        notes.append("lowering options set by the caller: " + ", ".join(f"{k}={v!r}" for k, v in overrides.items()))
    tg = pm.run("tile", _tile, g, spec, notes, fuse=fuse, static_masks=static_masks, flash=flash, row_chunks=row_chunks)
    bg = pm.run("blocks", lower_blocks, tg, spec)
    bg = pm.run("memory", _memory, bg, spec)
    bg = pm.run("sync", _sync, bg, spec, verifier=_verify_blocks)

    def final(b):
        eg = multibuffer_workspaces(b.graph, spec) if multibuffer else b.graph
        # data scalars: read by the control program (runtime/host); a computed tensor's from its output buffer
        eg.scalar_reads = {n: r if r.source is None else replace(r, buffer=eg.outputs[r.source])
                           for n, r in graph.scalar_reads.items()}
        eg.notes = notes                               # for each run's report
        return eg
    eg = pm.run("final", final, bg)
    eg.index_checks = [(name, o.check) for name, o in zip(eg.outputs, g.outputs) if o.kind == CHECK_KIND]
    return eg


def last_timings() -> dict:
    """Seconds per pass of the most recent ``lower`` call."""
    pm = _last["manager"]
    return pm.timings() if pm else {}

"""The placed tile program as a TileGraph (pypto.ir.tile_graph), the form the Tensor level's tiling pass
produces: one TileProgram per core type (``matmul`` = the cube side, ``vector``), whose parallel axes are
the grid and whose ops are PTO instructions over tile values with a memory space and a symbolic valid
shape, and GM tile views. Ops before / in / after the kernel's ``pt.range`` loops have the phases
``pre`` / ``step`` / ``post`` (``attrs["loop"]`` names the loop). Handoffs appear as the workspace
stores and loads they become. It is what ``dump=`` writes as tile_graph.txt / .json / .dot; the Block IR
is then built from the same placement (emit.py)."""
from __future__ import annotations

import sympy

from ..ir.execution import Buffer
from ..ir.isa import MemSpace
from ..ir.tile_graph import GMTile, TileAxis, TileGraph, TileOp, TileParam, TileProgram, TileValue
from .ir import KernelProgram, Loop, Value
from .items import side_items
from .optable import OPS
from .placement import CUBE, VECTOR, Placement

_SPACE = {"l1": MemSpace.L1, "l0a": MemSpace.L0A, "l0b": MemSpace.L0B, "l0c": MemSpace.L0C, "ub": MemSpace.UB}


def to_tile_graph(program: KernelProgram, pl: Placement) -> TileGraph:
    buffers = {p.name: Buffer(p.name, tuple(p.shape), p.dtype, "output" if p.name in program.outputs else "input")
               for p in program.params}
    for ch in pl.channel_list():
        rows = sympy.Symbol(f"{ch.param}_rows", integer=True, positive=True)
        buffers[ch.param] = Buffer(ch.param, (rows, ch.value.shape[1]), ch.value.dtype, "workspace")
    sides = [s for s in (CUBE, VECTOR) if pl.kind in (s, "cluster")]
    items = [_program(program, pl, s, buffers) for s in sides]
    return TileGraph(program.name, buffers, [p.name for p in program.params if p.name not in program.outputs],
                     sorted(program.outputs), items, sorted({d for p in program.params for d in p.shape
                                                             if isinstance(d, sympy.Symbol)}, key=str))


def _program(program: KernelProgram, pl: Placement, side: str, buffers) -> TileProgram:
    axes = [TileAxis(f"grid{k}", g, 1, "parallel", pid) for k, (g, pid) in
            enumerate(zip(program.grid_sizes, program.pids))]
    params = [TileParam(name, name, b.dtype, tuple(b.shape),
                        "out" if name in program.outputs else "in") for name, b in buffers.items()]
    tiles, ops = {}, []

    def tile(v: Value, role: str, phase: str) -> str:
        name = f"{v.name}" if role == "ub" else f"{v.name}_{role}"
        if name not in tiles:
            tiles[name] = TileValue(name, _SPACE[role], v.dtype, tuple(v.shape), tuple(v.valid), phase)
        return name

    def emit(op, operands, phase, loop, loc, attrs=None):
        a = dict(attrs or {})
        if loop is not None:
            a["loop"] = str(loop.var)
        ops.append(TileOp(op, operands, phase, a, loc))

    def cube_roles(v):
        return pl.cube_roles.get(id(v), set())

    def walk(items, phase, loop):
        for it in items:
            if it.kind == "loop":
                lp = it.loop
                walk(it.body, "step", lp)
                continue
            if it.kind in ("send", "recv"):
                v, ch = it.value, it.channel
                ws = GMTile(ch.param, (0, 0))
                role = ("l0c" if side == CUBE else "ub") if it.kind == "send" else ("l1" if side == CUBE else "ub")
                t = tile(v, role, phase)
                emit("TSTORE" if it.kind == "send" else "TLOAD", [ws, t] if it.kind == "send" else [t, ws],
                     phase, loop, v.op.loc if v.op else None, {"handoff": f"{ch.src}->{ch.dst}"})
                for r in ("l0a", "l0b"):
                    if side == CUBE and it.kind == "recv" and r in cube_roles(v):
                        emit("TMOV", [tile(v, r, phase), t], phase, loop, v.op.loc if v.op else None)
                continue
            op = it.op
            if op.op == "load":
                view = op.args[0]
                t = tile(op.out, "l1" if side == CUBE else "ub", phase)
                emit("TLOAD", [t, GMTile(view.tensor, tuple(view.offsets))], phase, loop, op.loc,
                     {"trans": True} if view.trans else None)
                for r in ("l0a", "l0b"):
                    if side == CUBE and r in cube_roles(op.out):
                        emit("TMOV", [tile(op.out, r, phase), t], phase, loop, op.loc)
            elif op.op == "store":
                view, v = op.args
                emit("TSTORE", [GMTile(view.tensor, tuple(view.offsets)), tile(v, "l0c" if side == CUBE else "ub",
                                                                                  phase)], phase, loop, op.loc)
            elif op.op == "matmul":
                a, b = op.args[:2]
                dst = tile(op.out, "l0c", phase)
                name = "TMATMUL" if pl.acc_kind.get(id(op)) in ("none", "zero") else "TMATMUL_ACC"
                emit(name, [dst, tile(a, "l0a", phase), tile(b, "l0b", phase)], phase, loop, op.loc)
            else:
                args = [tile(a, "ub", phase) if isinstance(a, Value) else a for a in op.args]
                emit(OPS[op.op].pto or op.op.upper(), [tile(op.out, "ub", phase)] + args, phase, loop, op.loc,
                     {k: v for k, v in op.attrs.items() if k != "acc_dtype"})

    top = side_items(program.body, side, pl)
    seen_loop = False
    for it in top:
        walk([it], "post" if seen_loop and it.kind != "loop" else "pre", None)
        seen_loop |= it.kind == "loop"
    kind = "matmul" if side == CUBE else "vector"
    return TileProgram(f"{program.name}_{'aic' if side == CUBE else 'aiv'}", kind, axes, params, tiles, ops,
                       {s.name: s for s in program.grid_sizes}, loc=program.loc,
                       attrs={"split_rows": pl.split_rows} if pl.split_rows else {})


__all__ = ["to_tile_graph", "Loop"]

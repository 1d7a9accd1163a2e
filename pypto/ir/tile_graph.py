"""TileGraph: the program as tile programs over tile views, before it is cut into per-core Blocks.

A ``TileProgram`` is one fused group of the TensorGraph: an iteration space of tiles (``axes``:
parallel axes spread over cores, at most one sequential axis looped inside a core for long
reductions or matmul K), the GM tensors it reads and writes (``params``, each a view of an
ExecutionGraph buffer), and one representative tile's work: tile ops (PTO instructions,
destination first) over tile values with a memory space, a static shape and a symbolic valid
shape (tails), and GM tile views ``GMTile(param, offsets)`` whose extent is the tile's valid shape.
Offsets and valid shapes are expressions of the axes' tile index symbols and of the program's
scalar params, so one TileProgram stands for every tile of its group whatever the sizes.

Each op has a ``phase``: ``setup`` (loop-invariant: once per core), ``pre`` / ``post`` (per
parallel tile, before / after the sequential loop) and ``step`` (per sequential step; programs
without a sequential axis put their whole tile work in ``pre``). ``TileLoop`` is a ``pypto.loop``
kept with its symbolic bounds.

The Tile level (pypto/tile) writes one TileProgram per core type of a ``@pt.kernel`` (its grid as the
parallel axes) and keeps the kernel's ``pt.range`` loops inside it: ``TileRange`` is such a loop with
its body (ops and nested ranges) and how the front end copies it (``attrs``: ``unroll`` copies per
step, ``skew`` iterations stage 0 runs ahead of stage 1, ``states`` the tiles carried round it,
``crossing`` the tiles stage 0 hands to stage 1); ops there carry ``attrs["stage"]`` in a skewed loop.
A handoff store / load carries ``attrs["handoff"] = TileHandoff(...)``. ``LOWERING_ATTRS`` are such
attributes of the lowering, never of the instruction.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Union

import sympy

from ..dtypes import DataType, to_dtype
from ..errors import SourceLoc
from ..symbolic import ceildiv
from .isa import MemSpace

PHASES = ("setup", "pre", "step", "post")


@dataclass
class TileAxis:
    name: str
    size: object              # extent of the iteration dim (int or sympy expr)
    tile: int                 # tile extent along it
    role: str = "parallel"    # parallel | sequential
    index: sympy.Symbol = None   # tile index symbol (0 .. count-1)

    def __post_init__(self):
        if self.index is None:
            self.index = sympy.Symbol(f"i_{self.name}", integer=True, nonnegative=True)

    @property
    def count(self):
        return ceildiv(self.size, self.tile)


@dataclass
class TileParam:
    """A GM tensor of a tile program: a (reshaped) view of an ExecutionGraph buffer."""
    name: str
    buffer: str
    dtype: DataType
    shape: tuple
    mode: str = "in"          # in | out | inout
    regions: list = field(default_factory=list)   # (buffer, offsets, extents) boxes the program touches


@dataclass
class GMTile:
    """A tile view of a GM param: offsets in every dim of the param; extent = the tile's valid shape."""
    param: str
    offsets: tuple


@dataclass
class TileValue:
    name: str
    space: MemSpace
    dtype: DataType
    shape: tuple              # static (rows, cols)
    valid: tuple              # symbolic (rows, cols)
    phase: str = "pre"        # the loop level that owns the tile (setup | pre | step)


@dataclass
class TileOp:
    op: str
    operands: list            # destination first: tile names, GMTile, scalars
    phase: str = "pre"
    attrs: dict = field(default_factory=dict)
    loc: SourceLoc | None = None
    guard: object = None      # sympy condition: run only where it holds (None: always)
    otherwise: list = field(default_factory=list)   # ops to run where the guard does not hold


@dataclass
class TileRange:
    """A loop inside one tile program (the Tile level's ``pt.range``), with its body of TileOps and
    nested TileRanges; ``attrs`` say how the front end copies it (see the module docstring)."""
    var: sympy.Symbol
    start: object
    stop: object
    step: int
    body: list
    attrs: dict = field(default_factory=dict)
    loc: SourceLoc | None = None


@dataclass(frozen=True)
class TileHandoff:
    """Marks a store / load of a cube <-> vector handoff: the channel, its GM workspace, the slots it
    rotates through, and which handoff of the program it is (``part`` > 0: a further access of the same
    handoff, e.g. the second row half)."""
    channel: int
    workspace: str
    slots: int
    item: int
    part: int = 0


# op attributes that tell the lowering what to do and are not the instruction's
LOWERING_ATTRS = frozenset({"stage", "when", "first_iteration", "handoff"})


@dataclass
class TileProgram:
    name: str
    kind: str                 # vector | matmul
    axes: list
    params: list
    tiles: dict
    ops: list
    scalars: dict = field(default_factory=dict)   # scalar param name -> binding (program symbols, loop vars)
    nodes: list = field(default_factory=list)     # TensorGraph node ids computed here
    attrs: dict = field(default_factory=dict)
    loc: SourceLoc | None = None

    def param(self, name: str) -> TileParam:
        return next(p for p in self.params if p.name == name)

    def parallel_axes(self):
        return [a for a in self.axes if a.role == "parallel"]

    def sequential_axis(self):
        return next((a for a in self.axes if a.role == "sequential"), None)


@dataclass
class TileLoop:
    var: sympy.Symbol
    start: object
    stop: object
    step: object
    body: list
    loc: SourceLoc | None = None


TileItem = Union[TileProgram, TileLoop]


def walk_tile_ops(ops):
    """Every TileOp of a program's ops, those in TileRanges included, in order."""
    for op in ops:
        if isinstance(op, TileRange):
            yield from walk_tile_ops(op.body)
        else:
            yield op


@dataclass
class TileGraph:
    name: str
    buffers: dict             # name -> pypto.ir.execution.Buffer
    inputs: list
    outputs: list
    items: list
    symbols: list = field(default_factory=list)

    def programs(self):
        """The TilePrograms, loop bodies included (not the prebuilt kernels' calls: ir/kernel_node.KernelCall)."""
        def rec(items):
            for it in items:
                if isinstance(it, TileLoop):
                    yield from rec(it.body)
                elif not _is_call(it):
                    yield it
        yield from rec(self.items)

    def __str__(self) -> str:
        return print_tile_graph(self)

    def to_json(self) -> dict:
        return tile_graph_to_json(self)

    def to_dot(self) -> str:
        return tile_graph_to_dot(self)


# ---------------------------------------------------------------- printer
def _fmt(v) -> str:
    if isinstance(v, GMTile):
        return f"{v.param}[{', '.join(str(o) for o in v.offsets)}]"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def print_program(p: TileProgram, indent: int = 0) -> str:
    pad = "  " * indent
    axes = ", ".join(f"{a.name}: {a.size}/{a.tile} {a.role}" for a in p.axes)
    params = ", ".join(f"{q.name}: {q.mode} {q.dtype}[{', '.join(map(str, q.shape))}]={q.buffer}" for q in p.params)
    out = [f"{pad}tile_program {p.name} ({p.kind})  axes({axes})",
           f"{pad}  params({params})"]
    if p.scalars:
        out.append(f"{pad}  scalars({', '.join(f'{k}={v}' for k, v in p.scalars.items())})")
    for t in p.tiles.values():
        out.append(f"{pad}  tile {t.name}: {t.space} {t.dtype}[{t.shape[0]}, {t.shape[1]}] valid "
                   f"[{t.valid[0]}, {t.valid[1]}] ({t.phase})")
    _print_ops(p.ops, pad, out)
    return "\n".join(out)


def _print_ops(ops, pad, out):
    for op in ops:
        if isinstance(op, TileRange):
            attrs = ", ".join(f"{k}={v}" for k, v in op.attrs.items())
            out.append(f"{pad}  range {op.var} in ({op.start}, {op.stop}, {op.step}) {{{attrs}}}:")
            _print_ops(op.body, pad + "  ", out)
            continue
        attrs = {k: v for k, v in op.attrs.items() if not k.startswith("_")}
        a = (" {" + ", ".join(f"{k}={v}" for k, v in attrs.items()) + "}") if attrs else ""
        g = f"  if {op.guard}" if op.guard is not None else ""
        text = f"{pad}  {op.phase:<5} {op.op:<14} {', '.join(_fmt(o) for o in op.operands)}{a}{g}"
        out.append(f"{text:<80} # {op.loc}" if op.loc else text)
        for alt in op.otherwise:
            out.append(f"{pad}        else {alt.op:<9} {', '.join(_fmt(o) for o in alt.operands)}")


def _is_call(it) -> bool:
    """A KernelCall (ir/kernel_node.py: a pl / pt kernel called as a node), told by its fields."""
    return hasattr(it, "gm_args") and hasattr(it, "build")


def _print_call(it, indent: int) -> str:
    args = ", ".join(f"{p}={b}" for p, b in it.gm_args.items())
    loc = f"  # {it.loc}" if it.loc else ""
    return f"{'  ' * indent}kernel_call {it.name} ({it.level}, prebuilt)  args({args}){loc}"


def print_tile_graph(g: TileGraph) -> str:
    lines = [f"tile_graph {g.name}  inputs({', '.join(g.inputs)})  outputs({', '.join(g.outputs)})"]
    for b in g.buffers.values():
        view = f"  view of {b.view_of}+{b.view_offset}" if b.view_of else ""
        lines.append(f"  buffer {b.name}: {b.role} {b.dtype}[{', '.join(map(str, b.shape))}]{view}")

    def rec(items, depth):
        for it in items:
            if isinstance(it, TileLoop):
                lines.append(f"{'  ' * depth}loop {it.var} in range({it.start}, {it.stop}, {it.step}):")
                rec(it.body, depth + 1)
            elif _is_call(it):
                lines.append(_print_call(it, depth))
            else:
                lines.append(print_program(it, depth))
    rec(g.items, 1)
    return "\n".join(lines)


# ---------------------------------------------------------------- JSON
def _enc(v):
    if _is_call(v):             # its kernel is the front end's: the JSON names the call, its Block IR is not kept
        return {"$KernelCall": {"name": v.name, "level": v.level, "gm_args": _enc(dict(v.gm_args)),
                                "loc": _enc(v.loc), "build": None}}
    if isinstance(v, sympy.Basic):
        return {"$sym": sympy.srepr(v)}
    if isinstance(v, DataType):
        return {"$dtype": v.name}
    if isinstance(v, MemSpace):
        return {"$space": v.value}
    if isinstance(v, SourceLoc):
        return {"$loc": v.to_json()}
    if isinstance(v, GMTile):
        return {"$gm": [v.param, _enc(list(v.offsets))]}
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {"$dict": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {"$float": str(v)}
    if hasattr(v, "__dataclass_fields__"):
        return {"$" + type(v).__name__: {k: _enc(getattr(v, k)) for k in v.__dataclass_fields__}}
    return v


_CLASSES = {}
# Min / Max as written: lowering builds them without sympy's case analysis, which would rewrite them
_SYMPY_NAMES = {**vars(sympy), "Min": lambda *a: sympy.Min(*a, evaluate=False),
                "Max": lambda *a: sympy.Max(*a, evaluate=False)}


def _dec(v):
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    (tag, val), = v.items()
    if tag == "$sym":
        return eval(val, _SYMPY_NAMES)             # srepr output: sympy constructor calls only
    if tag == "$dtype":
        return to_dtype(val)
    if tag == "$space":
        return MemSpace(val)
    if tag == "$loc":
        return SourceLoc.from_json(val)
    if tag == "$gm":
        return GMTile(val[0], tuple(_dec(val[1])))
    if tag == "$tuple":
        return tuple(_dec(x) for x in val)
    if tag == "$dict":
        return {_dec(k): _dec(x) for k, x in val}
    if tag == "$float":
        return float(val)
    cls = _classes()[tag[1:]]
    return cls(**{k: _dec(x) for k, x in val.items()})


def _classes():
    if not _CLASSES:
        from .execution import Buffer
        from .kernel_node import KernelCall
        for c in (TileAxis, TileParam, TileValue, TileOp, TileProgram, TileLoop, TileRange, TileHandoff, Buffer,
                  KernelCall):
            _CLASSES[c.__name__] = c
    return _CLASSES


def tile_graph_to_json(g: TileGraph) -> dict:
    return {"name": g.name, "buffers": _enc(list(g.buffers.values())), "inputs": g.inputs, "outputs": g.outputs,
            "items": _enc(g.items), "symbols": _enc(list(g.symbols))}


def tile_graph_from_json(data: dict) -> TileGraph:
    bufs = _dec(data["buffers"])
    return TileGraph(data["name"], {b.name: b for b in bufs}, list(data["inputs"]), list(data["outputs"]),
                     _dec(data["items"]), _dec(data["symbols"]))


def dumps(g: TileGraph) -> str:
    return json.dumps(tile_graph_to_json(g), indent=1)


# ---------------------------------------------------------------- DOT
def tile_graph_to_dot(g: TileGraph) -> str:
    """Programs as boxes, GM buffers as ellipses, edges by the params each program reads/writes."""
    lines = [f'digraph "{g.name}" {{', "  node [fontname=monospace];"]
    for b in g.buffers.values():
        lines.append(f'  "b:{b.name}" [shape=ellipse, label="{b.name}\\n{b.dtype}[{", ".join(map(str, b.shape))}]"];')
    for k, p in enumerate(g.programs()):
        axes = ", ".join(f"{a.name}/{a.tile}" for a in p.axes)
        lines.append(f'  "p{k}" [shape=box, label="{p.name} ({p.kind})\\n{axes}\\n{len(p.ops)} tile ops"];')
        for q in p.params:
            if q.mode in ("in", "inout"):
                lines.append(f'  "b:{q.buffer}" -> "p{k}";')
            if q.mode in ("out", "inout"):
                lines.append(f'  "p{k}" -> "b:{q.buffer}";')

    def calls(items):
        for it in items:
            if isinstance(it, TileLoop):
                yield from calls(it.body)
            elif _is_call(it):
                yield it
    for k, c in enumerate(calls(g.items)):       # a prebuilt kernel's call: its bound buffers, either way
        lines.append(f'  "c{k}" [shape=box, style=dashed, label="{c.name} ({c.level} kernel)"];')
        for b in dict.fromkeys(c.gm_args.values()):
            lines.append(f'  "b:{b}" -> "c{k}" [dir=both];')
    lines.append("}")
    return "\n".join(lines)

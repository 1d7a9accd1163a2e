"""Block IR: per-core programs of PTO instructions over placed tiles — the backends' shared IR.

A ``Block`` is the program of one core type (AIC cube or AIV vector). It declares tiles (memory
space, shape, dtype, on-chip address, valid shape), takes GM tensors and scalar parameters, and
has a body of statements: PTO instructions in destination-first form bound to a pipe, ``For`` /
``If`` over sympy scalar expressions, and synchronisation (set/wait flags, pipe barriers,
cross-core flags). A ``Kernel`` links the blocks of one launch (a cube part, a vector part, or
both) and is launched over ``block_dim`` cores. Tensor mode lowers into this IR; Professional
mode parses into it; ``sim`` runs it; ``codegen`` prints it as PTO C++.

Scalar expressions are sympy expressions over the block's scalar params, loop variables and the
launch symbols ``BLOCK_IDX``, ``BLOCK_NUM``, ``SUBBLOCK_IDX``; GM shapes may use the size symbols
of the GM params' dims.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union

import sympy

from ..dtypes import DataType
from ..errors import SourceLoc
from .isa import ISA, MemSpace, Pipe, pipe_of

BLOCK_IDX = sympy.Symbol("block_idx", integer=True, nonnegative=True)
BLOCK_NUM = sympy.Symbol("block_num", integer=True, positive=True)
SUBBLOCK_IDX = sympy.Symbol("subblock_idx", integer=True, nonnegative=True)


class CoreType(str, Enum):
    AIC = "AIC"   # cube core
    AIV = "AIV"   # vector core

    def __str__(self) -> str:
        return self.value


Scalar = Union[int, float, sympy.Expr]


@dataclass
class GMParam:
    """A global-memory tensor argument. ``shape`` entries are ints or sympy size symbols/expressions."""
    name: str
    dtype: DataType
    shape: tuple


@dataclass
class TileDecl:
    """An on-chip tile: ``shape`` is static (rows, cols); ``valid`` is an optional pair of scalar
    expressions (evaluated where the tile is used) for tails; ``addr`` is the byte offset in its
    memory space (None until memory planning). ``buffer`` names the buffer the tile is a view of when
    several declarations are one buffer (Professional mode declares a slot once per valid shape): what
    is written through one of them is read through the others. Tiles that merely share bytes at
    different times are different buffers (None: the tile is a buffer of its own), and the simulator
    reports reading a tile whose bytes another buffer wrote since."""
    name: str
    space: MemSpace
    dtype: DataType
    shape: tuple[int, int]
    addr: int | None = None
    valid: tuple | None = None
    layout: str = "ND"     # ND (row major), NZ (cube fractal), DN (column major)
    buffer: str | None = None

    @property
    def buffer_name(self) -> str:
        return self.buffer or self.name

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def valid_shape(self) -> tuple:
        return self.valid if self.valid is not None else self.shape


@dataclass
class GMRegion:
    """The part of a GM tensor that a TLOAD reads or a TSTORE writes: offsets in every dim of the
    tensor; the extent is the tile's valid shape over the tensor's last two dims (extent 1 in the
    leading dims; a 1-D tensor maps to the tile's columns with one valid row). ``clipped``: the front
    end clipped the tile's valid shape to what is left of the tensor (a tail), so the box must keep
    at least one element in every dim (pypto.ir.gm_bounds states the bounds rule)."""
    param: str
    offsets: tuple
    clipped: bool = False


@dataclass
class Instr:
    """One PTO instruction, destination first. ``operands`` are tile names (str), GMRegion or scalars."""
    op: str
    operands: list
    pipe: Pipe
    attrs: dict = field(default_factory=dict)
    loc: SourceLoc | None = None

    @property
    def spec(self):
        return ISA[self.op]

    def tile_operands(self) -> list[str]:
        return [o for o in self.operands if isinstance(o, str)]

    def dst(self):
        return self.operands[0]

    def srcs(self) -> list:
        return self.operands[1:]


@dataclass
class For:
    var: sympy.Symbol
    start: Scalar
    stop: Scalar
    step: Scalar
    body: list
    attrs: dict = field(default_factory=dict)   # e.g. {"pipeline": 2}
    loc: SourceLoc | None = None


@dataclass
class If:
    cond: sympy.Basic       # a sympy relational / boolean over scalars
    then_body: list
    else_body: list = field(default_factory=list)
    loc: SourceLoc | None = None


@dataclass
class SetFlag:
    src: Pipe
    dst: Pipe
    event: int
    loc: SourceLoc | None = None


@dataclass
class WaitFlag:
    src: Pipe
    dst: Pipe
    event: int
    loc: SourceLoc | None = None


@dataclass
class PipeBarrier:
    pipe: Pipe
    loc: SourceLoc | None = None


@dataclass
class CrossCoreSetFlag:
    """Signal the partner core(s) of the cluster (cube <-> vector) after ``pipe`` drains."""
    pipe: Pipe
    flag: int
    loc: SourceLoc | None = None


@dataclass
class CrossCoreWaitFlag:
    pipe: Pipe
    flag: int
    loc: SourceLoc | None = None


Stmt = Union[Instr, For, If, SetFlag, WaitFlag, PipeBarrier, CrossCoreSetFlag, CrossCoreWaitFlag]


@dataclass
class Block:
    name: str
    core: CoreType
    gm_params: list[GMParam]
    scalar_params: list[sympy.Symbol]
    tiles: list[TileDecl]
    body: list
    loc: SourceLoc | None = None

    def tile(self, name: str) -> TileDecl:
        for t in self.tiles:
            if t.name == name:
                return t
        raise KeyError(f"block {self.name}: no tile named {name}")

    def gm(self, name: str) -> GMParam:
        for g in self.gm_params:
            if g.name == name:
                return g
        raise KeyError(f"block {self.name}: no GM param named {name}")

    def instructions(self):
        """Every Instr in the body, in program order (loops and branches walked once)."""
        yield from walk_instrs(self.body)

    def __str__(self) -> str:
        from .block_printer import print_block
        return print_block(self)


@dataclass
class Kernel:
    """One launch: the blocks that run together (at most one AIC block and one AIV block; the AIV
    block runs on ``aiv_per_aic`` sub-blocks per cluster when both are present). ``attrs["decisions"]``:
    what the compiler chose for it, recorded by the pass that chose it (runtime/report.py reads them). The
    attrs are a record for the report, not part of the program: the Block IR text does not carry them and two
    kernels that differ only in them are equal."""
    name: str
    blocks: list[Block]
    loc: SourceLoc | None = None
    attrs: dict = field(default_factory=dict, compare=False)

    def block(self, core: CoreType) -> Block | None:
        return next((b for b in self.blocks if b.core == core), None)

    def __str__(self) -> str:
        from .block_printer import print_kernel
        return print_kernel(self)


def walk_instrs(stmts):
    for s in stmts:
        if isinstance(s, Instr):
            yield s
        elif isinstance(s, For):
            yield from walk_instrs(s.body)
        elif isinstance(s, If):
            yield from walk_instrs(s.then_body)
            yield from walk_instrs(s.else_body)


def walk(stmts):
    """Every statement, nested ones included, in program order."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then_body)
            yield from walk(s.else_body)


def instr(op: str, operands: list, tiles: dict[str, TileDecl], attrs: dict | None = None,
          loc: SourceLoc | None = None) -> Instr:
    """Build an instruction, deriving its pipe from the ISA table and the operands' memory spaces."""
    spec = ISA[op]
    def space(o):
        return MemSpace.GM if isinstance(o, GMRegion) else tiles[o].space
    dst_space = space(operands[0])
    src_space = space(operands[1]) if len(operands) > 1 and isinstance(operands[1], (str, GMRegion)) else None
    if spec.kind == "store":
        dst_space, src_space = MemSpace.GM, space(operands[1])
    return Instr(op, list(operands), pipe_of(op, dst_space, src_space), dict(attrs or {}), loc)

"""The traced tile program of one ``@pt.kernel``: what the kernel body did, op by op, before any
placement decision.

A ``KernelProgram`` is the body of one grid point (program): a list of ``Op`` and ``Loop`` statements
over SSA tile ``Value``s. A value has a static logical shape (rows, cols), a dtype and a symbolic valid
shape (tails). Scalars (program ids, loop indices, tensor sizes, offsets) are sympy expressions; float
constants are Python floats. ``GMView`` is a tile view of a GM tensor argument: element offsets in
every dim of the tensor, a tile shape over its last two dims and the valid part of that tile.

A ``Loop`` (``pt.range``) is traced once with a symbolic index. Tiles rebound or updated in its body
are loop-carried (``Carry``: the value at iteration start ``phi``, the initial value ``init`` from
before the loop, the value at iteration end ``next`` and the value after the loop ``result``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import sympy

from ..dtypes import DataType
from ..errors import SourceLoc

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """An SSA tile value. ``loop`` is the innermost loop whose body defines it (None: the kernel body)."""
    shape: tuple
    dtype: DataType
    valid: tuple
    op: "Op | None" = None
    loop: "Loop | None" = None
    hint: str = "t"
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def name(self) -> str:
        return f"{self.hint}{self.id}"

    def __repr__(self) -> str:
        return f"%{self.name}:{self.dtype}[{self.shape[0]}, {self.shape[1]}]"


@dataclass(frozen=True)
class GMTensor:
    """A tensor argument of the kernel (GM): its shape entries are ints or sympy size symbols."""
    name: str
    dtype: DataType
    shape: tuple


@dataclass(frozen=True)
class GMView:
    tensor: str
    offsets: tuple         # element offsets, one per dim of the tensor
    shape: tuple           # (rows, cols) of the tile
    valid: tuple           # (rows, cols) valid part (tails), symbolic
    trans: bool = False    # read transposed: the box is [cols, rows] of the tensor

    def __str__(self) -> str:
        t = "^T" if self.trans else ""
        return f"{self.tensor}[{', '.join(str(o) for o in self.offsets)}]{t}<{self.valid[0]}, {self.valid[1]}>"


@dataclass(eq=False)
class Op:
    op: str                # a name of pypto.tile.optable.OPS
    args: list             # Value | GMView | scalar (int, float, sympy)
    attrs: dict
    out: Value | None
    loc: SourceLoc | None = None

    def values(self) -> list:
        return [a for a in self.args if isinstance(a, Value)]

    def __repr__(self) -> str:
        lhs = f"{self.out!r} = " if self.out is not None else ""
        attrs = (" {" + ", ".join(f"{k}={v}" for k, v in self.attrs.items()) + "}") if self.attrs else ""
        return f"{lhs}{self.op}({', '.join(_fmt(a) for a in self.args)}){attrs}"


@dataclass(eq=False)
class Carry:
    phi: Value
    init: Value
    next: Value
    result: Value


@dataclass(eq=False)
class Loop:
    var: sympy.Symbol
    start: object
    stop: object
    step: object
    body: list
    carried: list = field(default_factory=list)
    loc: SourceLoc | None = None
    parent: "Loop | None" = None


@dataclass
class KernelProgram:
    name: str
    params: list           # GMTensor, in argument order
    grid_rank: int
    pids: list             # program id symbols, one per grid axis
    grid_sizes: list       # symbols standing for the grid extents (bound at launch)
    body: list
    outputs: set = field(default_factory=set)      # names of the tensors the kernel stores to
    loc: SourceLoc | None = None

    def param(self, name: str) -> GMTensor:
        return next(p for p in self.params if p.name == name)

    def __str__(self) -> str:
        return print_program(self)


def _fmt(a) -> str:
    if isinstance(a, Value):
        return f"%{a.name}"
    return str(a)


def walk_ops(stmts):
    """Every Op, nested loops included, in program order."""
    for s in stmts:
        if isinstance(s, Loop):
            yield from walk_ops(s.body)
        else:
            yield s


def print_program(p: KernelProgram) -> str:
    params = ", ".join(f"{t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]" for t in p.params)
    lines = [f"tile_kernel {p.name}({params})  grid({', '.join(str(s) for s in p.grid_sizes)})  "
             f"pids({', '.join(str(s) for s in p.pids)})"]

    def rec(stmts, depth):
        pad = "  " * depth
        for s in stmts:
            if isinstance(s, Loop):
                carried = ", ".join(f"%{c.phi.name}=%{c.init.name} -> %{c.next.name}" for c in s.carried)
                lines.append(f"{pad}for {s.var} in range({s.start}, {s.stop}, {s.step})"
                             + (f" carry({carried})" if carried else "") + ":")
                rec(s.body, depth + 1)
                for c in s.carried:
                    lines.append(f"{pad}%{c.result.name} = final %{c.phi.name}")
            else:
                text = f"{pad}{s!r}"
                lines.append(f"{text:<90} # {s.loc}" if s.loc else text)
    rec(p.body, 1)
    return "\n".join(lines)

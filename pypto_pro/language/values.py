"""Compile-time values the parser manipulates: buffer slots, tile views, tile groups, GM tensors.

A *slot* is one physical buffer (space, address, size); a tile group is N slots with a cursor per
section; a ``TileValue`` is a slot seen with a valid shape (tails); a ``TensorValue`` is a GM tensor
parameter or a box of one (a workspace slot).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import sympy

from pypto.dtypes import DataType

from .errors import Span
from .types import MemorySpace, TileType

_ids = itertools.count()


@dataclass(eq=False)
class Slot:
    name: str
    ttype: TileType
    addr: int | None
    mutex_id: object
    span: Span | None
    group: "TileGroup | None" = None
    index: int = 0
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def space(self) -> MemorySpace:
        return self.ttype.target_memory

    @property
    def nbytes(self) -> int:
        return self.ttype.nbytes

    def __repr__(self) -> str:
        return f"<slot {self.name} {self.space} @{self.addr:#x}>" if self.addr is not None else f"<slot {self.name}>"


@dataclass(frozen=True, eq=False)
class TileValue:
    """A slot seen with a valid shape (None: the tile type's valid shape, else the full shape)."""
    slot: Slot
    valid: tuple | None = None

    @property
    def shape(self) -> tuple:
        return self.slot.ttype.shape

    @property
    def dtype(self) -> DataType:
        return self.slot.ttype.dtype

    @property
    def space(self) -> MemorySpace:
        return self.slot.space

    @property
    def valid_shape(self) -> tuple:
        return self.valid if self.valid is not None else (self.slot.ttype.valid_shape or self.shape)

    def with_valid(self, valid) -> "TileValue":
        return replace(self, valid=tuple(valid) if valid is not None else None)

    def __repr__(self) -> str:
        return f"<tile {self.slot.name}>"


@dataclass(eq=False)
class Cursor:
    pos: int = -1          # index of the slot last returned by next(); -1 before the first next()
    known: bool = True     # False after a run-time loop or branch made the position data-dependent


@dataclass(eq=False)
class TileGroup:
    """N slots of one tile type; ``next()`` advances a per-section cursor round-robin."""
    name: str
    ttype: TileType
    slots: list
    span: Span | None = None
    workspace: "Workspace | None" = None
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def depth(self) -> int:
        return len(self.slots)

    def __repr__(self) -> str:
        return f"<tile group {self.name} x{self.depth}>"


@dataclass(eq=False)
class Workspace:
    """A GM scratch tensor the launcher allocates: ``rows_per_block`` rows per cluster (block_idx)."""
    param: str
    dtype: DataType
    rows_per_block: int
    cols: int


@dataclass(frozen=True, eq=False)
class TensorValue:
    """A GM tensor parameter, or a box of one: ``base`` offsets (per dim) and ``shape`` of the box."""
    param: str
    dtype: DataType
    shape: tuple
    base: tuple | None = None
    slot: Slot | None = None        # set for workspace slots (cross-core handoff buffers)
    use: int | None = None          # acquisition number of that slot (cross-core sync)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def offsets(self, rel) -> tuple:
        base = self.base or (0,) * len(self.shape)
        return tuple(sympy.sympify(b) + r if not (isinstance(b, int) and b == 0) else r for b, r in zip(base, rel))

    def __repr__(self) -> str:
        return f"<tensor {self.param}{list(self.shape)}>"


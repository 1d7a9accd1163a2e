"""ExecutionGraph: the tasks of one compiled program, their GM buffers and the control program.

The control program (run by the AICPU side) is a list of ``Task`` and ``Loop`` items in program
order. A ``Loop`` has a run-time trip count and is expanded into tasks when the program runs; a
run-time branch (``if`` on a loop index or a data scalar, ``pypto.cond``) is a ``Loop`` whose trip
count is 1 when its condition holds and 0 otherwise.
``scalar_reads`` are the program's data scalars (``pypto.item``): a symbol whose value the control
program reads from an element of an integer tensor (an argument, or one the program computes: read
once its writers are done) when an expression first needs it.
Dependencies are data: each task states the GM regions it reads and writes (sympy expressions
over the program's size symbols and enclosing loop variables); the scheduler orders two tasks
when one writes a region the other touches (RAW, WAR, WAW), in control-program order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import sympy

from ..dtypes import DataType
from ..errors import SourceLoc
from .block import Kernel


@dataclass
class Buffer:
    """A GM tensor of the program. role: input | output | workspace | constant.
    ``view_of`` names a buffer whose (contiguous) memory this one reinterprets with another shape."""
    name: str
    shape: tuple
    dtype: DataType
    role: str
    view_of: str | None = None
    view_offset: object = 0       # element offset into the base buffer (sympy expr allowed)
    data: object = None           # role "constant": the torch tensor holding its value
    # role "workspace": index symbols of the loops (outermost first) one iteration of which the buffer
    # serves: every iteration writes what it reads there, so iterations may each use a copy of their own
    private_to: tuple = ()


@dataclass
class Region:
    """A box of a buffer: per-dim offsets and extents (sympy expressions allowed)."""
    buffer: str
    offsets: tuple
    extents: tuple


@dataclass
class Task:
    kernel: str
    gm_args: dict[str, str]                         # kernel GM param name -> buffer name
    scalars: dict[str, object] = field(default_factory=dict)   # scalar param name -> expr
    block_dim: object = 1                           # cores this task occupies (each sees block_idx)
    reads: list[Region] | None = None               # None: the whole of every bound buffer
    writes: list[Region] | None = None
    loc: SourceLoc | None = None
    name: str = ""


@dataclass
class Loop:
    var: sympy.Symbol
    start: object
    stop: object
    step: object
    body: list
    loc: SourceLoc | None = None


@dataclass(frozen=True)
class ScalarRead:
    """A data scalar: ``symbol`` is element ``index`` (sympy expressions over sizes, loop variables and
    other data scalars) of the integer argument ``buffer``, read by the control program on the AICPU.
    ``source``: for a tensor the program computes, its position in the program's outputs (the traced
    graph makes it an output of kind "scalar_source" unless it is one already; the lowering names
    ``buffer`` after that output), read once the tasks writing the element are done."""
    symbol: sympy.Symbol
    buffer: str
    index: tuple
    loc: SourceLoc | None = None
    source: int | None = None


ControlItem = Union[Task, Loop]


@dataclass
class ExecutionGraph:
    kernels: dict[str, Kernel]
    buffers: dict[str, Buffer]
    inputs: list[str]
    outputs: list[str]
    program: list                                    # Task | Loop, in program order
    symbols: list[sympy.Symbol] = field(default_factory=list)   # run-time sizes bound from inputs
    index_checks: list = field(default_factory=list)  # (output name, IndexRangeCheck): read after a run
    scalar_reads: dict = field(default_factory=dict)  # symbol name -> ScalarRead (data scalars)
    notes: list = field(default_factory=list)        # the traced graph's report notes (TensorGraph.notes)

    def tasks(self):
        """Every task of the control program, loop bodies walked once."""
        def rec(items):
            for it in items:
                if isinstance(it, Loop):
                    yield from rec(it.body)
                else:
                    yield it
        yield from rec(self.program)

    def __str__(self) -> str:
        from .execution_printer import print_execution_graph
        return print_execution_graph(self)

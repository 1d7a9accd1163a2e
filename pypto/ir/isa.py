"""The PTO instruction set used by Block IR, as data: one ``InstrSpec`` entry per instruction.

An entry is everything pypto knows about an instruction; every other module reads it from here:
  - operand form and region: how many tiles/scalars it takes and over which part of each tile it
    works (the region kinds of pypto/ir/isa_semantics.py);
  - pipe and kind: the unit that runs it (block.instr, the verifier, the simulator) and its timing
    class (runtime/sim/timing.py);
  - semantics: the torch function the simulator and the Tile interpreter run (isa_semantics.py);
  - C++ spelling: the callee and argument pattern codegen prints (codegen/kernel.py);
  - constraints of the public PTO-ISA (hw-native-sys/pto-isa) that codegen checks when it emits:
    the element types allowed and the tile operands that must be RowMajor.
Names follow the public PTO-ISA (TLOAD, TADD, TROWSUM, TMATMUL, ...). Instructions marked
``ext=True`` are not in pto-isa: pypto's CPU header and simulator implement them (pypto::NAME), and
on the NPU they map to a composition.

Adding an instruction is one entry in ``ISA`` below (plus, for ``ext=True``, its C++ body in
pypto/runtime/cpu/include/pypto/kernel_support.hpp), e.g.
    _add(InstrSpec("TLOG2", "t,t", "transcendental", sem.elementwise(torch.log2), dtypes="float", ext=True))
The cpu-vs-sim test (tests/runtime/test_every_instruction.py, kernels from pypto/testing/instructions.py)
covers it from that entry alone.

InstrSpec fields (all but the first four have defaults):
  name       the PTO-ISA name
  form       operands, destination first:
               "t,t,t"  dst tile, src0 tile, src1 tile        "t,t"  dst tile, src tile
               "t,t,s"  dst tile, src tile, scalar            "t,s"  dst tile, scalar
               "t,g"    dst tile, GM region (load)            "g,t"  GM region, src tile (store)
               "t,t,t,t" dst, mask, a, b (select)
               "t,g,t"  dst tile, GM region, index tile (MGATHER)  "g,t,t"  GM region, src tile, index tile
  kind       timing class: elementwise | transcendental | reduce | scan | expand | cast | move |
             load | store | push | pop (on-chip handoff) | matmul | fill | compare | select
  semantics  f(dst, srcs, attrs) of isa_semantics (None only for the GM moves TLOAD / TSTORE / TPUSH /
             TPOP / MGATHER / MSCATTER: the simulator moves the GM box or rows itself)
  region     region kind (isa_semantics.REGIONS), default "same"
  pipe       Pipe.V (default), Pipe.M, or None: from the data path of its operands (``pipe_of``)
  cpp        Spelling(callee, pattern) where pto-isa differs from "the name, operands in Block IR
             order" (pattern letters: d dst; a, b, c tile sources; s the scalar; tmp a scratch tile;
             cmp / round / axis from attrs)
  ext        not a pto-isa instruction (see above)
  dtypes     element types of the tiles: "all" | "float" | "int" (integers and bool)
  row_major  tile operand positions (0 = dst, 1.. = sources) pto-isa requires in BLayout::RowMajor
  result     destination element type: "same" (as src0) | "mask" (0/1 elements) | "index" (int32) |
             "convert" (any other type: TCVT)
  domain     per source operand (tiles, then the scalar) the values it is defined on: "any" |
             "positive" | "nonzero" | "mask" | "int" (an integer scalar); missing ones are "any"
  attrs      attribute name -> allowed values (e.g. {"cmp": CMP_MODES}); the first is the default
  commutative  its two tile sources may be swapped (the vector lowering puts a broadcast operand second)
  scalar_forms (tile-op-scalar, scalar-op-tile): the "t,t,s" instructions computing it with one scalar
             source (TSUB: TSUBS, TRSUBS); empty when there are none
  expand_forms (row-expand, col-expand): the instructions computing it with src1 a column [R, 1] or a
             row [1, C] broadcast against a full src0 (TADD: TROWEXPANDADD, TCOLEXPANDADD); empty if none
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

import torch

from . import isa_semantics as sem


class Pipe(str, Enum):
    MTE2 = "MTE2"   # GM -> L1 / UB
    MTE1 = "MTE1"   # L1 -> L0A / L0B
    M = "M"         # cube
    V = "V"         # vector
    MTE3 = "MTE3"   # UB -> GM
    FIX = "FIX"     # L0C -> GM / UB / L1
    S = "S"         # scalar

    def __str__(self) -> str:
        return self.value


class MemSpace(str, Enum):
    GM = "gm"
    UB = "ub"     # vector unified buffer (pro mode: Vec)
    L1 = "l1"     # cube L1 (pro mode: Mat)
    L0A = "l0a"   # cube left operand (pro mode: Left)
    L0B = "l0b"   # cube right operand (pro mode: Right)
    L0C = "l0c"   # cube accumulator (pro mode: Acc)

    def __str__(self) -> str:
        return self.value

    @property
    def capacity_key(self) -> str:
        return self.name


CMP_MODES = ("eq", "ne", "lt", "le", "gt", "ge")
ROUND_MODES = tuple(sem.ROUND_MODES)


@dataclass(frozen=True)
class Spelling:
    callee: str
    pattern: tuple[str, ...]


_DEFAULT_PATTERN = {
    "t,t,t": ("d", "a", "b"), "t,t,s": ("d", "a", "s"), "t,t": ("d", "a"), "t,s": ("d", "s"),
    "t,t,t,t": ("d", "a", "b", "c"), "t,g": ("d", "a"), "g,t": ("d", "a"), "t,g,t": ("d", "a", "b"),
    "g,t,t": ("d", "a", "b"),
}
DTYPE_CLASSES = ("all", "float", "int")
RESULTS = ("same", "mask", "index", "convert")
DOMAINS = ("any", "positive", "nonzero", "mask", "int")


@dataclass(frozen=True)
class InstrSpec:
    name: str
    form: str
    kind: str
    semantics: Callable | None
    region: str = "same"
    pipe: Pipe | None = Pipe.V
    cpp: Spelling | None = None
    ext: bool = False
    dtypes: str = "all"
    row_major: tuple[int, ...] = ()
    result: str = "same"
    domain: tuple[str, ...] = ()
    attrs: dict = field(default_factory=dict)
    commutative: bool = False
    scalar_forms: tuple[str, str] | tuple[()] = ()
    expand_forms: tuple[str, str] | tuple[()] = ()

    def __post_init__(self):
        if self.cpp is None:
            callee = f"pypto::{self.name}" if self.ext else self.name
            object.__setattr__(self, "cpp", Spelling(callee, _DEFAULT_PATTERN[self.form]))

    @property
    def needs_scratch(self) -> bool:
        """pto-isa's form takes a scratch tile (reductions, select, transpose, pow)."""
        return "tmp" in self.cpp.pattern

    @property
    def n_tiles(self) -> int:
        return self.form.split(",").count("t")

    @property
    def has_scalar(self) -> bool:
        return self.form.endswith(",s")


ISA: dict[str, InstrSpec] = {}


def _add(*specs: InstrSpec) -> None:
    for s in specs:
        if s.name in ISA:
            raise ValueError(f"instruction {s.name} is defined twice")
        ISA[s.name] = s


_ew, _ts = sem.elementwise, sem.tile_scalar
_S_ROW = (0, 1)                  # pto-isa's TBinSOps (TADDS, TMULS, ...) wants dst and src RowMajor
_NZ, _P = ("any", "nonzero"), ("positive",)

# binary elementwise
def _expands(n: str) -> tuple[str, str]:
    return f"TROWEXPAND{n}", f"TCOLEXPAND{n}"


_add(InstrSpec("TADD", "t,t,t", "elementwise", _ew(torch.add), commutative=True, scalar_forms=("TADDS", "TADDS"),
               expand_forms=_expands("ADD")),
     InstrSpec("TSUB", "t,t,t", "elementwise", _ew(torch.sub), scalar_forms=("TSUBS", "TRSUBS"),
               expand_forms=_expands("SUB")),
     InstrSpec("TMUL", "t,t,t", "elementwise", _ew(torch.mul), commutative=True, scalar_forms=("TMULS", "TMULS"),
               expand_forms=_expands("MUL")),
     InstrSpec("TMAX", "t,t,t", "elementwise", _ew(torch.maximum), commutative=True,
               scalar_forms=("TMAXS", "TMAXS"), expand_forms=_expands("MAX")),
     InstrSpec("TMIN", "t,t,t", "elementwise", _ew(torch.minimum), commutative=True,
               scalar_forms=("TMINS", "TMINS"), expand_forms=_expands("MIN")),
     InstrSpec("TAND", "t,t,t", "elementwise", sem.bitwise(torch.bitwise_and), dtypes="int", commutative=True),
     InstrSpec("TOR", "t,t,t", "elementwise", sem.bitwise(torch.bitwise_or), dtypes="int", commutative=True),
     InstrSpec("TDIV", "t,t,t", "transcendental", _ew(torch.div), domain=_NZ, scalar_forms=("TDIVS", "TRDIVS"),
               expand_forms=_expands("DIV")),
     InstrSpec("TPOW", "t,t,t", "transcendental", _ew(torch.pow), dtypes="float", domain=("positive",),
               cpp=Spelling("TPOW", ("d", "a", "b", "tmp")), scalar_forms=("TPOWS", "TRPOWS")),
     InstrSpec("TREM", "t,t,t", "elementwise", _ew(sem.remainder), domain=_NZ, ext=True))
# tile-scalar
_add(InstrSpec("TADDS", "t,t,s", "elementwise", _ts(lambda x, s: x + s), row_major=_S_ROW),
     InstrSpec("TSUBS", "t,t,s", "elementwise", _ts(lambda x, s: x - s)),
     InstrSpec("TMULS", "t,t,s", "elementwise", _ts(lambda x, s: x * s), row_major=_S_ROW),
     InstrSpec("TDIVS", "t,t,s", "elementwise", _ts(lambda x, s: x / s), row_major=_S_ROW),
     InstrSpec("TMAXS", "t,t,s", "elementwise", _ts(lambda x, s: torch.clamp(x, min=s)), row_major=_S_ROW),
     InstrSpec("TMINS", "t,t,s", "elementwise", _ts(lambda x, s: torch.clamp(x, max=s))),
     InstrSpec("TRSUBS", "t,t,s", "elementwise", _ts(lambda x, s: s - x), ext=True),
     InstrSpec("TRDIVS", "t,t,s", "elementwise", _ts(lambda x, s: s / x), domain=("nonzero",), row_major=_S_ROW,
               cpp=Spelling("TDIVS", ("d", "s", "a"))),          # pto-isa: TDIVS(dst, scalar, src)
     InstrSpec("TPOWS", "t,t,s", "transcendental", _ts(lambda x, s: torch.pow(x, s)), dtypes="float",
               domain=("positive",), ext=True),
     InstrSpec("TRPOWS", "t,t,s", "transcendental", _ts(sem.rpow), dtypes="float", ext=True))
# unary
_add(InstrSpec("TABS", "t,t", "elementwise", _ew(torch.abs)),
     InstrSpec("TNEG", "t,t", "elementwise", _ew(torch.neg)),
     InstrSpec("TRELU", "t,t", "elementwise", _ew(torch.relu)),
     InstrSpec("TNOT", "t,t", "elementwise", sem.bitwise(torch.bitwise_not), dtypes="int"),
     InstrSpec("TMOV_V", "t,t", "elementwise", sem.copy, cpp=Spelling("TMOV", ("d", "a"))),
     InstrSpec("TEXP", "t,t", "transcendental", _ew(torch.exp), dtypes="float"),
     InstrSpec("TLOG", "t,t", "transcendental", _ew(torch.log), dtypes="float", domain=_P),
     InstrSpec("TSQRT", "t,t", "transcendental", _ew(torch.sqrt), dtypes="float", domain=_P),
     InstrSpec("TRSQRT", "t,t", "transcendental", _ew(torch.rsqrt), dtypes="float", domain=_P),
     InstrSpec("TRECIP", "t,t", "transcendental", _ew(torch.reciprocal), dtypes="float", domain=("nonzero",)),
     InstrSpec("TSIN", "t,t", "transcendental", _ew(torch.sin), dtypes="float", ext=True),
     InstrSpec("TCOS", "t,t", "transcendental", _ew(torch.cos), dtypes="float", ext=True),
     InstrSpec("TTANH", "t,t", "transcendental", _ew(torch.tanh), dtypes="float", ext=True),
     InstrSpec("TSIGMOID", "t,t", "transcendental", _ew(torch.sigmoid), dtypes="float", ext=True),
     InstrSpec("TERF", "t,t", "transcendental", _ew(torch.erf), dtypes="float", ext=True),
     InstrSpec("TLOG1P", "t,t", "transcendental", _ew(torch.log1p), dtypes="float", domain=_P, ext=True),
     InstrSpec("TEXPM1", "t,t", "transcendental", _ew(torch.expm1), dtypes="float", ext=True),
     InstrSpec("TERFC", "t,t", "transcendental", _ew(torch.erfc), dtypes="float", ext=True),
     InstrSpec("TFLOOR", "t,t", "elementwise", _ew(torch.floor), dtypes="float", ext=True),
     InstrSpec("TCEIL", "t,t", "elementwise", _ew(torch.ceil), dtypes="float", ext=True),
     InstrSpec("TROUND", "t,t", "elementwise", _ew(torch.round), dtypes="float", ext=True),
     InstrSpec("TSIGN", "t,t", "elementwise", _ew(torch.sign), dtypes="float", ext=True),
     InstrSpec("TISFINITE", "t,t", "elementwise", _ew(sem.isfinite), dtypes="float", result="mask", ext=True),
     InstrSpec("TCVT", "t,t", "cast", sem.convert, result="convert", attrs={"round": ROUND_MODES},
               cpp=Spelling("TCVT", ("d", "a", "round"))))
# reductions (dst column 0 / row 0) and scans
_red, _tmp = sem.reduce, ("d", "a", "tmp")
_add(InstrSpec("TROWSUM", "t,t", "reduce", _red(sem.total, 1), region="rowreduce", cpp=Spelling("TROWSUM", _tmp)),
     InstrSpec("TROWMAX", "t,t", "reduce", _red(sem.maximum, 1), region="rowreduce", cpp=Spelling("TROWMAX", _tmp)),
     InstrSpec("TROWMIN", "t,t", "reduce", _red(sem.minimum, 1), region="rowreduce", cpp=Spelling("TROWMIN", _tmp)),
     InstrSpec("TCOLSUM", "t,t", "reduce", _red(sem.total, 0), region="colreduce"),
     InstrSpec("TCOLMAX", "t,t", "reduce", _red(sem.maximum, 0), region="colreduce"),
     InstrSpec("TCOLMIN", "t,t", "reduce", _red(sem.minimum, 0), region="colreduce"),
     InstrSpec("TROWPROD", "t,t", "reduce", _red(sem.product, 1), region="rowreduce", dtypes="float", domain=_P,
               ext=True),
     InstrSpec("TCOLPROD", "t,t", "reduce", _red(sem.product, 0), region="colreduce", dtypes="float", domain=_P,
               ext=True),
     InstrSpec("TROWARGMAX", "t,t", "reduce", _red(sem.argmax, 1), region="rowreduce", dtypes="float",
               result="index", ext=True),
     InstrSpec("TCOLARGMAX", "t,t", "reduce", _red(sem.argmax, 0), region="colreduce", dtypes="float",
               result="index", ext=True),
     InstrSpec("TROWCUMSUM", "t,t", "scan", sem.cumsum(1), ext=True),
     InstrSpec("TCOLCUMSUM", "t,t", "scan", sem.cumsum(0), ext=True))
# broadcast of a column (row-expand) or a row (col-expand); pto-isa wants the destination RowMajor
# (row-expand) or every operand RowMajor (col-expand)
_BINARY = {"ADD": torch.add, "SUB": torch.sub, "MUL": torch.mul, "DIV": torch.div, "MAX": torch.maximum,
           "MIN": torch.minimum}
for _n, _fn in _BINARY.items():
    _add(InstrSpec(f"TROWEXPAND{_n}", "t,t,t", "expand", _ew(_fn), region="rowexpand", row_major=(0,),
                   domain=_NZ if _n == "DIV" else ()))
for _n, _fn in _BINARY.items():
    _add(InstrSpec(f"TCOLEXPAND{_n}", "t,t,t", "expand", _ew(_fn), region="colexpand", row_major=(0, 1, 2),
                   domain=_NZ if _n == "DIV" else ()))
_add(InstrSpec("TROWEXPAND", "t,t", "expand", _ew(lambda x: x), region="rowbcast"),
     InstrSpec("TCOLEXPAND", "t,t", "expand", _ew(lambda x: x), region="colbcast"))
# generators
_add(InstrSpec("TEXPANDS", "t,s", "fill", sem.fill, region="fill"),
     InstrSpec("TARANGE", "t,s", "fill", sem.arange, region="fill", dtypes="float", ext=True,
               attrs={"axis": (1, 0)}, cpp=Spelling("pypto::TARANGE", ("d", "s", "axis"))),
     InstrSpec("TTRIL", "t,s", "fill", sem.triangle(True), region="fill", dtypes="float", domain=("int",),
               ext=True),
     InstrSpec("TTRIU", "t,s", "fill", sem.triangle(False), region="fill", dtypes="float", domain=("int",),
               ext=True))
# compare / select (masks: one 0/1 element per element)
_add(InstrSpec("TCMP", "t,t,t", "compare", sem.compare, result="mask", attrs={"cmp": CMP_MODES},
               cpp=Spelling("TCMP", ("d", "a", "b", "cmp"))),
     InstrSpec("TCMPS", "t,t,s", "compare", sem.compare, result="mask", attrs={"cmp": CMP_MODES},
               cpp=Spelling("TCMPS", ("d", "a", "s", "cmp"))),
     InstrSpec("TSEL", "t,t,t,t", "select", sem.select, domain=("mask",),
               cpp=Spelling("TSEL", ("d", "a", "b", "c", "tmp"))))
# moves (the pipe follows the data path)
_add(InstrSpec("TTRANS", "t,t", "move", sem.transpose, region="trans", pipe=None,
               cpp=Spelling("TTRANS", ("d", "a", "tmp"))),
     InstrSpec("TMOV", "t,t", "move", sem.copy, pipe=None),
     InstrSpec("TLOAD", "t,g", "load", None, region="load", pipe=None),
     InstrSpec("TSTORE", "g,t", "store", None, region="store", pipe=None))
# indexed row moves, pto-isa's MGATHER / MSCATTER in row mode: row i of the tile is row idx[i] of the GM
# tensor (plus the region's row offset; the region's column offset and the tile's valid cols pick the
# columns), idx an int32 tile [rows, 1] in UB. One DMA descriptor per row (runtime/sim/timing.py). Each
# index is bounds-checked (sim, cpu): an index outside the tensor is an error, never an access outside it.
# Duplicate indices in an MSCATTER: the last row written wins (rows move in order).
_add(InstrSpec("MGATHER", "t,g,t", "load", None, region="gather", pipe=None, ext=True),
     InstrSpec("MSCATTER", "g,t,t", "store", None, region="scatter", pipe=None, ext=True))
# on-chip cube <-> vector exchange (a5, machine [cross_core] on_chip): the producer pushes a tile into a FIFO
# slot in the consumer's buffer (L0C -> UB on FIX, UB -> L1 on MTE3), the consumer pops it (its tile is the
# slot: no transfer). pto-isa's TPUSH / TPOP carry their flags in a TPipe object; in Block IR the flags are
# passes/cross_core.py's statements and the GM region names the slot (its backing store on sim and cpu).
_add(InstrSpec("TPUSH", "g,t", "push", None, region="store", pipe=None, ext=True),
     InstrSpec("TPOP", "t,g", "pop", None, region="load", pipe=None, ext=True))
# cube
_add(InstrSpec("TMATMUL", "t,t,t", "matmul", sem.matmul, region="matmul", pipe=Pipe.M),
     InstrSpec("TMATMUL_ACC", "t,t,t", "matmul", sem.matmul_acc, region="matmul", pipe=Pipe.M,
               cpp=Spelling("TMATMUL_ACC", ("d", "d", "a", "b"))))


# Which pipe runs a data move, from the memory spaces of its operands.
_MOVE_PIPES = {
    ("gm", "ub"): Pipe.MTE2, ("gm", "l1"): Pipe.MTE2,
    ("ub", "gm"): Pipe.MTE3, ("l0c", "gm"): Pipe.FIX,
    ("l1", "l0a"): Pipe.MTE1, ("l1", "l0b"): Pipe.MTE1,
    ("l0c", "ub"): Pipe.FIX, ("l0c", "l1"): Pipe.FIX,
    ("ub", "ub"): Pipe.V, ("ub", "l1"): Pipe.MTE3,   # a5: UB->L1 handoff
    ("l1", "l1"): Pipe.MTE1,
}


def pipe_of(op: str, dst_space: MemSpace | str, src_space: MemSpace | str | None = None) -> Pipe:
    spec = ISA[op]
    if spec.pipe is not None:
        return spec.pipe
    key = (MemSpace(src_space).value, MemSpace(dst_space).value)
    if key not in _MOVE_PIPES:
        raise ValueError(f"{op}: no data path from {key[0]} to {key[1]}")
    return _MOVE_PIPES[key]

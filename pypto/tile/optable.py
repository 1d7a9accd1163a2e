"""The tile ops a kernel body can record, as data: which PTO instruction runs each (its meaning is that
instruction's semantics, pypto/ir/isa.py; reshape is no instruction: the backends go through GM). The
elementwise ops the op registry has run its entry's instruction (OpDef.pto, as in Tensor mode); their
broadcast and scalar forms are that instruction's (InstrSpec.expand_forms / scalar_forms).

families
  load / store      GM tile view <-> tile                     TLOAD / TSTORE
  matmul            a @ b (+ acc), fp32 accumulation           TMATMUL / TMATMUL_ACC (cube)
  binary            tile op tile, same shape                   TADD ...
  rowexp / colexp   [R, C] op [R, 1] / [R, C] op [1, C]        TROWEXPAND* / TCOLEXPAND*
  scalar            tile op scalar                             TADDS ...
  unary             f(tile)                                    TEXP ...
  reduce            [R, C] -> [R, 1] (row) or [1, C] (col)     TROWSUM ... / TCOLSUM ...
  expand            [R, 1] or [1, C] -> [R, C]                 TROWEXPAND / TCOLEXPAND
  fill / iota / tri scalar -> tile                             TEXPANDS / TARANGE / TTRIL, TTRIU
  cmp / cmps        tile cmp tile / scalar -> bool tile        TCMP / TCMPS
  select            where(mask, a, b)                          TSEL
  cast / transpose / copy / reshape
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.isa import CMP_MODES, ISA
from ..ops import REGISTRY       # importing pypto.ops registers every op
from ..ops.registry import ops_of_form


@dataclass(frozen=True)
class TileOpDef:
    name: str
    family: str
    pto: str | None = None        # the instruction (pypto/ir/isa.py) whose semantics the op has
    commutative: bool = False


# The elementwise ops are read from the op registry (its one-instruction ops, OpDef.pto): the binary and
# unary ones under the registry's names, each running its entry's instruction; the comparisons (TCMP) are
# the registry's eq / ne / lt / le / gt / ge. The registry's logical_and / logical_or (TAND / TOR) are left
# out: the Tile level has no integer-mask ops (bool tiles combine through pt.where).
_BINARY = {op.name: op.pto for op in ops_of_form("binary") if op.pto}
# [R, C] op [R, 1] and [R, C] op [1, C]: the binary instruction's broadcast forms (its ISA entry)
_ROW = {n: ISA[pto].expand_forms[0] for n, pto in _BINARY.items() if ISA[pto].expand_forms}
_COL = {n: ISA[pto].expand_forms[1] for n, pto in _BINARY.items() if ISA[pto].expand_forms}
# tile op scalar / scalar op tile: the scalar forms of the binary op's instruction (its ISA entry), named
# <op>s and r<op>s (maximums ...) after the binary op
SCALAR_OPS = {n: (f"{n}s", f"r{n}s" if ISA[pto].scalar_forms[1] != ISA[pto].scalar_forms[0] else f"{n}s")
              for n, pto in _BINARY.items() if ISA[pto].scalar_forms}
_SCALAR = {names[k]: ISA[_BINARY[n]].scalar_forms[k] for n, names in SCALAR_OPS.items() for k in (0, 1)}
_UNARY = {op.name: op.pto for op in ops_of_form("unary") if op.pto}
COMPARES = tuple(op.name for op in ops_of_form("comparison") if op.pto == "TCMP")
# the reductions: registry op -> the instruction over the columns (dim=-1: one value per row, [R, 1]) and
# over the rows (dim=0: one value per column, [1, C]); the Tile program's op is the instruction's name
REDUCTIONS = {"sum": ("TROWSUM", "TCOLSUM"), "amax": ("TROWMAX", "TCOLMAX"), "amin": ("TROWMIN", "TCOLMIN"),
              "prod": ("TROWPROD", "TCOLPROD")}
_REDUCE = {pto[1:].lower(): pto for both in REDUCTIONS.values() for pto in both}
ROW_REDUCTIONS = {pto[1:].lower() for pto, _ in REDUCTIONS.values()}
if any(n not in REGISTRY for n in (*REDUCTIONS, *COMPARES)) or set(COMPARES) != set(CMP_MODES):
    raise ImportError("the Tile level's op names are out of step with pypto.ops.registry")


def _defs(family, table):
    return {n: TileOpDef(n, family, pto) for n, pto in table.items()}


OPS: dict[str, TileOpDef] = {}
OPS |= {n: TileOpDef(n, "binary", pto, ISA[pto].commutative) for n, pto in _BINARY.items()}
OPS |= {f"{n}_row": TileOpDef(f"{n}_row", "rowexp", _ROW[n]) for n in _ROW}
OPS |= {f"{n}_col": TileOpDef(f"{n}_col", "colexp", _COL[n]) for n in _COL}
OPS |= _defs("scalar", _SCALAR)
OPS |= _defs("unary", _UNARY)
OPS |= _defs("reduce", _REDUCE)
OPS |= _defs("misc", {
    "load": "TLOAD", "store": "TSTORE", "matmul": "TMATMUL", "cast": "TCVT", "transpose": "TTRANS",
    "copy": "TMOV_V", "reshape": None, "full": "TEXPANDS", "iota": "TARANGE", "tril": "TTRIL", "triu": "TTRIU",
    "cmp": "TCMP", "cmps": "TCMPS", "select": "TSEL", "rowexpand": "TROWEXPAND", "colexpand": "TCOLEXPAND",
})

# ops whose rows are independent of each other: a vector tile split by rows between the two vector
# cores of a cluster computes each half on its own (column reductions, transposes, reshapes are not)
ROW_LOCAL_FAMILIES = {"binary", "rowexp", "colexp", "scalar", "unary", "load", "store"}
ROW_LOCAL_OPS = {"load", "store", *ROW_REDUCTIONS, "cast", "copy", "full", "iota", "tril", "triu", "cmp", "cmps",
                 "select", "rowexpand", "colexpand"}


def is_row_local(op: str) -> bool:
    d = OPS[op]
    return d.family in ROW_LOCAL_FAMILIES or op in ROW_LOCAL_OPS

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

from ..ir.isa import ISA
from ..ops import get_op       # importing pypto.ops registers every op


@dataclass(frozen=True)
class TileOpDef:
    name: str
    family: str
    pto: str | None = None        # the instruction (pypto/ir/isa.py) whose semantics the op has
    commutative: bool = False


# elementwise ops named as in the op registry run the instruction of their registry entry (OpDef.pto)
_BINARY = {n: get_op(n).pto for n in ("add", "sub", "mul", "div", "maximum", "minimum", "pow")}
# [R, C] op [R, 1] and [R, C] op [1, C]: the binary instruction's broadcast forms (its ISA entry)
_ROW = {n: ISA[pto].expand_forms[0] for n, pto in _BINARY.items() if ISA[pto].expand_forms}
_COL = {n: ISA[pto].expand_forms[1] for n, pto in _BINARY.items() if ISA[pto].expand_forms}
# tile op scalar / scalar op tile: a scalar form of the binary op's instruction (its ISA entry)
_SCALAR_OF = {"adds": ("add", 0), "subs": ("sub", 0), "rsubs": ("sub", 1), "muls": ("mul", 0), "divs": ("div", 0),
              "rdivs": ("div", 1), "maxs": ("maximum", 0), "mins": ("minimum", 0), "pows": ("pow", 0),
              "rpows": ("pow", 1)}
_SCALAR = {n: ISA[_BINARY[op]].scalar_forms[k] for n, (op, k) in _SCALAR_OF.items()}
_UNARY = {n: get_op(n).pto for n in ("exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "relu", "tanh",
                                     "sigmoid", "erf", "sin", "cos", "log1p", "floor", "ceil")}
_UNARY["expm1"] = "TEXPM1"              # a Tile-level op the registry does not have
_REDUCE = {"rowsum": "TROWSUM", "rowmax": "TROWMAX", "rowmin": "TROWMIN",
           "colsum": "TCOLSUM", "colmax": "TCOLMAX", "colmin": "TCOLMIN"}
ROW_REDUCTIONS = {"rowsum", "rowmax", "rowmin"}
COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")


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
ROW_LOCAL_OPS = {"load", "store", "rowsum", "rowmax", "rowmin", "cast", "copy", "full", "iota", "tril", "triu", "cmp", "cmps",
                 "select", "rowexpand", "colexpand"}


def is_row_local(op: str) -> bool:
    d = OPS[op]
    return d.family in ROW_LOCAL_FAMILIES or op in ROW_LOCAL_OPS

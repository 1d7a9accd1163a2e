"""The tile ops a kernel body can record, as data: what each computes (torch, for the reference
interpreter), which PTO instruction runs it, and on which unit.

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

import torch


@dataclass(frozen=True)
class TileOpDef:
    name: str
    family: str
    pto: str | None = None
    ref: object = None            # torch function of the (fp32-upcast) operands
    commutative: bool = False


def _defs(family, table, **kw):
    return {n: TileOpDef(n, family, pto, ref, **kw) for n, (pto, ref) in table.items()}


_BINARY = {
    "add": ("TADD", torch.add), "sub": ("TSUB", torch.sub), "mul": ("TMUL", torch.mul),
    "div": ("TDIV", torch.div), "maximum": ("TMAX", torch.maximum), "minimum": ("TMIN", torch.minimum),
    "pow": ("TPOW", torch.pow),
}
_COMMUTATIVE = {"add", "mul", "maximum", "minimum"}
_ROW = {"add": "TROWEXPANDADD", "sub": "TROWEXPANDSUB", "mul": "TROWEXPANDMUL", "div": "TROWEXPANDDIV",
        "maximum": "TROWEXPANDMAX", "minimum": "TROWEXPANDMIN"}
_COL = {"add": "TCOLEXPANDADD", "sub": "TCOLEXPANDSUB", "mul": "TCOLEXPANDMUL", "div": "TCOLEXPANDDIV",
        "maximum": "TCOLEXPANDMAX", "minimum": "TCOLEXPANDMIN"}
_SCALAR = {
    "adds": ("TADDS", lambda x, s: x + s), "subs": ("TSUBS", lambda x, s: x - s),
    "rsubs": ("TRSUBS", lambda x, s: s - x), "muls": ("TMULS", lambda x, s: x * s),
    "divs": ("TDIVS", lambda x, s: x / s), "rdivs": ("TRDIVS", lambda x, s: s / x),
    "maxs": ("TMAXS", lambda x, s: torch.clamp(x, min=s)), "mins": ("TMINS", lambda x, s: torch.clamp(x, max=s)),
    "pows": ("TPOWS", lambda x, s: torch.pow(x, s)), "rpows": ("TRPOWS", lambda x, s: torch.pow(torch.tensor(s), x)),
}
_UNARY = {
    "exp": ("TEXP", torch.exp), "log": ("TLOG", torch.log), "sqrt": ("TSQRT", torch.sqrt),
    "rsqrt": ("TRSQRT", torch.rsqrt), "recip": ("TRECIP", torch.reciprocal), "abs": ("TABS", torch.abs),
    "neg": ("TNEG", torch.neg), "relu": ("TRELU", torch.relu), "tanh": ("TTANH", torch.tanh),
    "sigmoid": ("TSIGMOID", torch.sigmoid), "erf": ("TERF", torch.erf), "sin": ("TSIN", torch.sin),
    "cos": ("TCOS", torch.cos), "log1p": ("TLOG1P", torch.log1p), "expm1": ("TEXPM1", torch.expm1),
    "floor": ("TFLOOR", torch.floor), "ceil": ("TCEIL", torch.ceil),
}
_REDUCE = {
    "rowsum": ("TROWSUM", lambda x: x.sum(1, keepdim=True)), "rowmax": ("TROWMAX", lambda x: x.amax(1, keepdim=True)),
    "rowmin": ("TROWMIN", lambda x: x.amin(1, keepdim=True)),
    "colsum": ("TCOLSUM", lambda x: x.sum(0, keepdim=True)), "colmax": ("TCOLMAX", lambda x: x.amax(0, keepdim=True)),
    "colmin": ("TCOLMIN", lambda x: x.amin(0, keepdim=True)),
}
ROW_REDUCTIONS = {"rowsum", "rowmax", "rowmin"}
COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")

OPS: dict[str, TileOpDef] = {}
OPS |= {n: TileOpDef(n, "binary", pto, ref, n in _COMMUTATIVE) for n, (pto, ref) in _BINARY.items()}
OPS |= {f"{n}_row": TileOpDef(f"{n}_row", "rowexp", _ROW[n], _BINARY[n][1]) for n in _ROW}
OPS |= {f"{n}_col": TileOpDef(f"{n}_col", "colexp", _COL[n], _BINARY[n][1]) for n in _COL}
OPS |= _defs("scalar", _SCALAR)
OPS |= _defs("unary", _UNARY)
OPS |= _defs("reduce", _REDUCE)
OPS |= _defs("misc", {
    "load": ("TLOAD", None), "store": ("TSTORE", None), "matmul": ("TMATMUL", None),
    "cast": ("TCVT", None), "transpose": ("TTRANS", None), "copy": ("TMOV_V", None),
    "reshape": (None, None), "full": ("TEXPANDS", None), "iota": ("TARANGE", None),
    "tril": ("TTRIL", None), "triu": ("TTRIU", None), "cmp": ("TCMP", None), "cmps": ("TCMPS", None),
    "select": ("TSEL", None), "rowexpand": ("TROWEXPAND", None), "colexpand": ("TCOLEXPAND", None),
})

# ops whose rows are independent of each other: a vector tile split by rows between the two vector
# cores of a cluster computes each half on its own (column reductions, transposes, reshapes are not)
ROW_LOCAL_FAMILIES = {"binary", "rowexp", "colexp", "scalar", "unary", "load", "store"}
ROW_LOCAL_OPS = {"load", "store", "rowsum", "rowmax", "rowmin", "cast", "copy", "full", "iota", "tril", "triu", "cmp", "cmps",
                 "select", "rowexpand", "colexpand"}


def is_row_local(op: str) -> bool:
    d = OPS[op]
    return d.family in ROW_LOCAL_FAMILIES or op in ROW_LOCAL_OPS

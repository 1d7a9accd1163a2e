"""How each Block IR instruction is spelled in PTO-ISA C++, as data.

An entry gives the callee and its argument pattern. Pattern letters:
  d  the destination tile        a, b, c  source operands 1..3 (tiles, in Block IR order)
  s  the scalar operand          tmp      a scratch tile (pto-isa's reductions/select/transpose take one)
  cmp  the CmpMode from attrs["cmp"]     round  the RoundMode from attrs["round"]
  axis  attrs.get("axis", 1)
Instructions the ISA marks ext=True are pypto helpers (pypto/kernel_support.hpp) with their
operands in Block IR order; everything else follows pto-isa's signatures.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.isa import ISA


@dataclass(frozen=True)
class Spelling:
    callee: str
    pattern: tuple[str, ...]


_DEFAULT_PATTERN = {
    "t,t,t": ("d", "a", "b"),
    "t,t,s": ("d", "a", "s"),
    "t,t": ("d", "a"),
    "t,s": ("d", "s"),
    "t,t,t,t": ("d", "a", "b", "c"),
}

# Where pto-isa's spelling differs from "the op name with operands in Block IR order".
_OVERRIDES = {
    "TPOW": Spelling("TPOW", ("d", "a", "b", "tmp")),
    "TRSUBS": Spelling("pypto::TRSUBS", ("d", "a", "s")),     # not in pto-isa
    "TRDIVS": Spelling("TDIVS", ("d", "s", "a")),              # pto-isa: TDIVS(dst, scalar, src)
    "TMOV_V": Spelling("TMOV", ("d", "a")),
    "TCVT": Spelling("TCVT", ("d", "a", "round")),
    "TROWSUM": Spelling("TROWSUM", ("d", "a", "tmp")),
    "TROWMAX": Spelling("TROWMAX", ("d", "a", "tmp")),
    "TROWMIN": Spelling("TROWMIN", ("d", "a", "tmp")),
    "TCMP": Spelling("TCMP", ("d", "a", "b", "cmp")),
    "TCMPS": Spelling("TCMPS", ("d", "a", "s", "cmp")),
    "TSEL": Spelling("TSEL", ("d", "a", "b", "c", "tmp")),
    "TTRANS": Spelling("TTRANS", ("d", "a", "tmp")),
    "TMATMUL_ACC": Spelling("TMATMUL_ACC", ("d", "d", "a", "b")),
    "TARANGE": Spelling("pypto::TARANGE", ("d", "s", "axis")),
}

ROUND_MODES = {None: "RoundMode::CAST_RINT", "rint": "RoundMode::CAST_RINT", "nearest": "RoundMode::CAST_RINT",
               "even": "RoundMode::CAST_RINT", "round": "RoundMode::CAST_ROUND", "floor": "RoundMode::CAST_FLOOR",
               "ceil": "RoundMode::CAST_CEIL", "trunc": "RoundMode::CAST_TRUNC", "odd": "RoundMode::CAST_ODD",
               "none": "RoundMode::CAST_NONE"}

CMP_MODES = {"eq": "CmpMode::EQ", "ne": "CmpMode::NE", "lt": "CmpMode::LT", "le": "CmpMode::LE",
             "gt": "CmpMode::GT", "ge": "CmpMode::GE"}


def spelling(op: str) -> Spelling:
    if op in _OVERRIDES:
        return _OVERRIDES[op]
    spec = ISA[op]
    callee = f"pypto::{op}" if spec.ext else op
    return Spelling(callee, _DEFAULT_PATTERN[spec.form])


def uses_scratch(op: str) -> bool:
    return op not in ("TLOAD", "TSTORE") and "tmp" in spelling(op).pattern

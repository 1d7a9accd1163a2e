"""The C++ names of instruction attributes (CmpMode, RoundMode). Everything else about how an
instruction is spelled (callee, argument pattern) is its entry in pypto/ir/isa.py."""
from __future__ import annotations

ROUND_MODES = {None: "RoundMode::CAST_RINT", "rint": "RoundMode::CAST_RINT", "nearest": "RoundMode::CAST_RINT",
               "even": "RoundMode::CAST_RINT", "round": "RoundMode::CAST_ROUND", "floor": "RoundMode::CAST_FLOOR",
               "ceil": "RoundMode::CAST_CEIL", "trunc": "RoundMode::CAST_TRUNC", "odd": "RoundMode::CAST_ODD",
               "none": "RoundMode::CAST_NONE"}

CMP_MODES = {"eq": "CmpMode::EQ", "ne": "CmpMode::NE", "lt": "CmpMode::LT", "le": "CmpMode::LE",
             "gt": "CmpMode::GT", "ge": "CmpMode::GE"}

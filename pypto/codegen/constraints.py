"""pto-isa's constraints on one emitted instruction, from its instruction-table entry (pypto/ir/isa.py).

``check_instr`` raises a CompileError at the instruction's source line when the C++ codegen is about
to print breaks what the public PTO-ISA headers accept (instructions marked ``ext`` are pypto's own,
pypto::NAME in kernel_support.hpp, and have no pto-isa constraints):
  - ``dtypes``: the element types of its tiles ("float": floating point; "int": integers and bool).
    The destination counts when its type is the sources' (``result == "same"``) or when it is the
    only tile (fills); mask operands (``domain == "mask"``) do not;
  - ``row_major``: the tile operands pto-isa requires in BLayout::RowMajor, as declared
    (codegen/tiles.py) or seen through a RowMajor view (``viewed``).
"""
from __future__ import annotations

from ..errors import CompileError
from ..ir.block import Instr, TileDecl
from ..ir.isa import InstrSpec
from . import tiles as tt

_ADMITS = {"all": lambda dt: True, "float": lambda dt: dt.is_floating, "int": lambda dt: not dt.is_floating}
_WORDS = {"float": "floating-point", "int": "integer or bool"}


def _typed(spec: InstrSpec, k: int, n_tiles: int) -> bool:
    """Whether tile operand k (0 = destination) has the element type ``spec.dtypes`` constrains."""
    if k == 0:
        return spec.result == "same" or n_tiles == 1
    return not (k - 1 < len(spec.domain) and spec.domain[k - 1] == "mask")


def check_instr(ins: Instr, spec: InstrSpec, operands: list[TileDecl], viewed: set[str] = frozenset()) -> None:
    """``operands``: the instruction's tile operands, destination first; ``viewed``: names of those
    emitted through their RowMajor transposed view."""
    if spec.ext:
        return
    admits = _ADMITS[spec.dtypes]
    for k, t in sorted(enumerate(operands), key=lambda kt: kt[0] == 0):     # sources first
        if _typed(spec, k, len(operands)) and not admits(t.dtype):
            raise CompileError(f"{ins.op} takes {_WORDS[spec.dtypes]} tiles (pto-isa); tile '{t.name}' is "
                               f"{t.dtype}", loc=ins.loc)
    for k in spec.row_major:
        if k < len(operands) and tt.is_col_major(operands[k]) and operands[k].name not in viewed:
            t = operands[k]
            role = "destination" if k == 0 else f"source {k}"
            raise CompileError(
                f"{ins.op} needs its {role} in BLayout::RowMajor (pto-isa), but tile '{t.name}' "
                f"({t.dtype}[{t.shape[0]}, {t.shape[1]}] valid {list(t.valid_shape)}) is ColMajor",
                loc=ins.loc,
                hint="a UB tile is ColMajor when it has one valid column or its columns are not 32-byte "
                     "multiples (codegen/tiles.py); give it whole 32-byte rows")

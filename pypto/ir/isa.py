"""The PTO instruction set used by Block IR, as data: each instruction's operand form, pipe and kind.

Names follow the public PTO-ISA (TLOAD, TADD, TROWSUM, TMATMUL, ...). A few instructions that
PTO-ISA spells as a library call are marked ``ext=True``: pypto's CPU header and simulator
implement them; on the NPU they map to the listed composition.

operand forms (destination first):
  "t,t,t"  dst tile, src0 tile, src1 tile        "t,t"  dst tile, src tile
  "t,t,s"  dst tile, src tile, scalar            "t,s"  dst tile, scalar
  "t,g"    dst tile, GM region (load)            "g,t"  GM region, src tile (store)
  "t,t,t,t" dst, mask, a, b (select)
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


@dataclass(frozen=True)
class InstrSpec:
    name: str
    form: str
    kind: str              # elementwise | transcendental | reduce | expand | cast | move | load | store | matmul | fill | select
    torch_fn: str | None = None   # name of the semantic function (pypto/ir/semantics.py) or torch op
    ext: bool = False


def _specs(form, kind, names, ext=False):
    return {n: InstrSpec(n, form, kind, n.lower(), ext) for n in names}


ISA: dict[str, InstrSpec] = {}
ISA |= _specs("t,t,t", "elementwise", ["TADD", "TSUB", "TMUL", "TMAX", "TMIN", "TAND", "TOR"])
ISA |= _specs("t,t,t", "transcendental", ["TDIV", "TPOW"])
ISA |= _specs("t,t,t", "elementwise", ["TREM"], ext=True)
ISA |= _specs("t,t,s", "elementwise", ["TADDS", "TSUBS", "TMULS", "TDIVS", "TMAXS", "TMINS", "TRSUBS", "TRDIVS"])
ISA |= _specs("t,t,s", "transcendental", ["TPOWS", "TRPOWS"], ext=True)
ISA |= _specs("t,t", "elementwise", ["TABS", "TNEG", "TRELU", "TNOT", "TMOV_V"])
ISA |= _specs("t,t", "transcendental", ["TEXP", "TLOG", "TSQRT", "TRSQRT", "TRECIP"])
ISA |= _specs("t,t", "transcendental", ["TSIN", "TCOS", "TTANH", "TSIGMOID", "TERF", "TLOG1P", "TEXPM1"], ext=True)
ISA |= _specs("t,t", "elementwise", ["TFLOOR", "TCEIL", "TROUND", "TSIGN", "TISFINITE"], ext=True)
ISA |= _specs("t,t", "cast", ["TCVT"])
ISA |= _specs("t,t", "reduce", ["TROWSUM", "TROWMAX", "TROWMIN", "TCOLSUM", "TCOLMAX", "TCOLMIN"])
ISA |= _specs("t,t", "reduce", ["TROWPROD", "TCOLPROD", "TROWARGMAX", "TCOLARGMAX"], ext=True)
ISA |= _specs("t,t", "scan", ["TROWCUMSUM", "TCOLCUMSUM"], ext=True)
ISA |= _specs("t,t,t", "expand", ["TROWEXPANDADD", "TROWEXPANDSUB", "TROWEXPANDMUL", "TROWEXPANDDIV",
                                  "TROWEXPANDMAX", "TROWEXPANDMIN",
                                  "TCOLEXPANDADD", "TCOLEXPANDSUB", "TCOLEXPANDMUL", "TCOLEXPANDDIV",
                                  "TCOLEXPANDMAX", "TCOLEXPANDMIN"])
ISA |= _specs("t,t", "expand", ["TROWEXPAND", "TCOLEXPAND"])
ISA |= _specs("t,s", "fill", ["TEXPANDS"])
ISA |= _specs("t,s", "fill", ["TARANGE", "TTRIL", "TTRIU"], ext=True)  # index / mask generators
ISA |= _specs("t,t,t", "compare", ["TCMP"])          # attrs: cmp in {eq, ne, lt, le, gt, ge}
ISA |= _specs("t,t,s", "compare", ["TCMPS"])
ISA |= _specs("t,t,t,t", "select", ["TSEL"])
ISA |= _specs("t,t", "move", ["TTRANS", "TMOV"])
ISA |= _specs("t,t,t", "matmul", ["TMATMUL", "TMATMUL_ACC"])
ISA |= _specs("t,g", "load", ["TLOAD"])
ISA |= _specs("g,t", "store", ["TSTORE"])


# Which pipe runs an instruction, from its kind and the memory spaces of its operands.
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
    if spec.kind == "matmul":
        return Pipe.M
    if spec.kind in ("load", "store") or op in ("TMOV", "TTRANS"):
        key = (MemSpace(src_space).value, MemSpace(dst_space).value)
        if key not in _MOVE_PIPES:
            raise ValueError(f"{op}: no data path from {key[0]} to {key[1]}")
        return _MOVE_PIPES[key]
    return Pipe.V


CMP_MODES = ("eq", "ne", "lt", "le", "gt", "ge")

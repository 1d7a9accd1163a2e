"""Scalar expressions (sympy) as C++: index math in int64 with Python's floor semantics, scalar
operands in float, conditions as bool. Helpers come from <pypto/kernel_support.hpp>."""
from __future__ import annotations

import math

import numpy as np
import sympy

from ..errors import CompileError

_RELATIONS = {sympy.StrictLessThan: "<", sympy.LessThan: "<=", sympy.StrictGreaterThan: ">",
              sympy.GreaterThan: ">=", sympy.Equality: "==", sympy.Unequality: "!="}


class ExprPrinter:
    """Prints sympy expressions with C++ names for their symbols (``names``: symbol name -> C++)."""

    def __init__(self, names: dict[str, str]):
        self.names = names

    # ------------------------------------------------------------------ entry points
    def int_expr(self, e) -> str:
        """An int64 expression (sizes, offsets, loop bounds, valid shapes)."""
        return self._int(_sympify(e), top=True)

    def real_expr(self, e) -> str:
        """A floating-point expression (instruction scalar operands)."""
        e = _sympify(e)
        if e.is_Integer or e.is_Float or e.is_Rational:
            return float_literal(float(e))
        return f"static_cast<float>({self._real(e)})"

    def cond(self, e) -> str:
        """A bool expression (If conditions), without outer parentheses."""
        text = self._cond(_sympify(e))
        if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
            text = text[1:-1]
        return text

    # ------------------------------------------------------------------ integers
    # Precedence of what a printer returns: 0 a sum, 1 a product or negation, 2 an atom.
    def _int(self, e, top=False, need=2) -> str:
        text, prec = self._int_parts(e)
        return text if (top or prec >= need) else f"({text})"

    def _int_parts(self, e) -> tuple[str, int]:
        if e.is_Integer:
            v = int(e)
            return (f"INT64_C({v})" if abs(v) >= 2**31 else str(v)), (2 if v >= 0 else 1)
        if e.is_Symbol:
            return self._name(e), 2
        if e.is_Rational or e.is_Float:
            raise CompileError(f"index expression {e} is not an integer (index math uses floor/ceiling, "
                               f"never true division)")
        if isinstance(e, sympy.Add):
            return self._sum(e, lambda t: self._int(t, need=1)), 0
        if isinstance(e, sympy.Mul):
            return self._product(e, lambda f: self._int(f, need=2)), 1
        if isinstance(e, sympy.Pow):
            base, ex = e.args
            if ex.is_Integer and int(ex) >= 0:
                n = int(ex)
                return (" * ".join([self._int(base)] * n) or "1"), (1 if n > 1 else 2)
            raise CompileError(f"index expression {e} has a non-integer power")
        if isinstance(e, sympy.floor):
            return self._division(e.args[0], "floordiv"), 2
        if isinstance(e, sympy.ceiling):
            return self._division(e.args[0], "ceildiv"), 2
        if isinstance(e, sympy.Mod):
            return f"pypto::mod({self._int(e.args[0], True)}, {self._int(e.args[1], True)})", 2
        if isinstance(e, (sympy.Min, sympy.Max)):
            fn = "min" if isinstance(e, sympy.Min) else "max"
            return f"pypto::{fn}({', '.join(self._int(a, True) for a in e.args)})", 2
        if isinstance(e, sympy.Piecewise):
            return self._piecewise(e, self._int), 2
        raise CompileError(f"cannot print index expression {e} ({type(e).__name__}) as C++")

    def _division(self, arg, fn: str) -> str:
        num, den = sympy.fraction(sympy.together(arg))
        if den == 1:
            return self._int(num, True)
        return f"pypto::{fn}({self._int(num, True)}, {self._int(den, True)})"

    # ------------------------------------------------------------------ reals
    def _real(self, e, top=False) -> str:
        if e.is_Integer or e.is_Float:
            return repr(float(e)) if math.isfinite(float(e)) else float_literal(float(e))
        if e.is_Rational:
            return f"({int(e.p)}.0 / {int(e.q)}.0)"
        if e.is_Symbol:
            return f"static_cast<double>({self._name(e)})"
        if isinstance(e, sympy.Add):
            return f"({self._sum(e, self._real)})"
        if isinstance(e, sympy.Mul):
            num, den = sympy.fraction(e)
            if den != 1:
                return f"({self._real(num)} / {self._real(den)})"
            return f"({self._product(e, self._real)})"
        if isinstance(e, sympy.Pow):
            base, ex = e.args
            if ex.is_Integer and int(ex) < 0:
                return f"(1.0 / {self._real(sympy.Pow(base, -ex))})"
            if ex.is_Integer and 0 < int(ex) <= 4:
                return "(" + " * ".join([self._real(base)] * int(ex)) + ")"
            return f"std::pow({self._real(base)}, {self._real(ex)})"
        return f"static_cast<double>({self._int(e, True)})"

    # ------------------------------------------------------------------ conditions
    def _cond(self, e) -> str:
        if e is sympy.true or e == sympy.true:
            return "true"
        if e is sympy.false or e == sympy.false:
            return "false"
        for cls, op in _RELATIONS.items():
            if isinstance(e, cls):
                return f"({self._int(e.lhs, True)} {op} {self._int(e.rhs, True)})"
        if isinstance(e, sympy.And):
            return "(" + " && ".join(self._cond(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " || ".join(self._cond(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"!{self._cond(e.args[0])}"
        raise CompileError(f"cannot print condition {e} ({type(e).__name__}) as C++")

    # ------------------------------------------------------------------ shared
    def _name(self, s) -> str:
        try:
            return self.names[s.name]
        except KeyError:
            raise CompileError(f"symbol '{s.name}' is not a parameter, size, loop variable or core index "
                               f"of this block") from None

    def _sum(self, e, sub) -> str:
        """Terms with a plus sign first (symbols before numbers), then the subtracted ones."""
        terms = sorted(e.args, key=lambda t: (t.could_extract_minus_sign(), t.is_number, sympy.default_sort_key(t)))
        out = sub(terms[0])
        for t in terms[1:]:
            if t.could_extract_minus_sign():
                out += f" - {sub(-t)}"
            else:
                out += f" + {sub(t)}"
        return out

    def _product(self, e, sub) -> str:
        coeff, rest = e.as_coeff_Mul()
        sign = ""
        if coeff.is_negative:
            sign, coeff = "-", -coeff
        parts = [sub(f) for f in sympy.Mul.make_args(rest)]
        if coeff != 1:
            parts.insert(0, sub(coeff))
        return sign + " * ".join(parts)

    def _piecewise(self, e, sub) -> str:
        out = None
        for value, cond in reversed(e.args):
            if out is None:
                out = sub(value, True)
            else:
                out = f"{self._cond(cond)} ? {sub(value, True)} : {out}"
        return f"({out})"


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _sympify(e):
    if isinstance(e, bool):
        return sympy.true if e else sympy.false
    if isinstance(e, (int, np.integer)):
        return sympy.Integer(int(e))
    if isinstance(e, (float, np.floating)):
        return sympy.Float(float(e))
    return sympy.sympify(e)


def float_literal(v: float) -> str:
    """A C++ float literal that reads back as the fp32 value of v."""
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    text = str(np.float32(v))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"

"""Scalar expressions compiled once into plain Python source, so that neither the control program's
expansion (one evaluation per task instance) nor the simulator's hot loop touches sympy:
floor/ceiling of a quotient become integer ``//``, Min/Max become min/max, and symbols become local
variables (``ident``)."""
from __future__ import annotations

import functools
import keyword
import math
import re

import sympy
from sympy.printing.pycode import PythonCodePrinter

from ...errors import SymbolicError, TypeMismatchError


def ident(name: str) -> str:
    """A Python identifier for a symbol name (stable, collision-free with builtins)."""
    clean = re.sub(r"\W", "_", name)
    return f"s_{clean}" if not keyword.iskeyword(clean) else f"s_{clean}_"


class _Printer(PythonCodePrinter):
    def __init__(self):
        super().__init__({"standard": "python3", "strict": False})

    def _print_Symbol(self, expr):
        return ident(expr.name)

    def _print_Dummy(self, expr):
        return ident(expr.name)

    def _quotient(self, arg):
        num, den = sympy.fraction(sympy.together(arg))
        return self._print(num), self._print(den), den == 1

    def _print_floor(self, expr):
        num, den, whole = self._quotient(expr.args[0])
        return f"({num})" if whole else f"(({num})//({den}))"

    def _print_ceiling(self, expr):
        num, den, whole = self._quotient(expr.args[0])
        return f"({num})" if whole else f"(-((-({num}))//({den})))"

    def _print_Min(self, expr):
        return "min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Mod(self, expr):
        a, b = expr.args
        return f"(({self._print(a)}) % ({self._print(b)}))"

    def _print_Integer(self, expr):
        return str(int(expr))

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Rational(self, expr):
        return f"({int(expr.p)}/{int(expr.q)})"

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"


_PRINTER = _Printer()


def to_source(value) -> str:
    """Python source of a scalar (int, float, bool or sympy expression)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"           # repr(-inf) is not Python source
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, sympy.Basic):
        if value.is_Integer:
            return str(int(value))
        return _source_of(value)
    if hasattr(value, "__index__"):
        return str(int(value))
    raise TypeMismatchError(f"not a scalar expression: {value!r}")


@functools.lru_cache(maxsize=1 << 16)
def _source_of(value) -> str:
    return _PRINTER.doprint(value)      # printing is slow and programs repeat their expressions


def free_names(values) -> set[str]:
    out = set()
    for v in values:
        if isinstance(v, sympy.Basic):
            out |= _names_in(v)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _names_in(value) -> frozenset:
    return frozenset(s.name for s in value.free_symbols)     # sympy walks the whole tree every time


def constant(value):
    """The Python value of a scalar without free symbols, else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, sympy.Basic) and not _names_in(value):
        if value.is_Integer:
            return int(value)
        if value in (sympy.true, sympy.false):
            return bool(value)
        return float(value)
    return None


def compile_tuple(values, what: str = "expression", loc=None):
    """A function env(dict name -> value) -> tuple of the values evaluated; built once. A name
    ``env`` lacks is a SymbolicError about ``what``, at ``loc`` (the user's line) when given."""
    values = list(values)
    names = sorted(free_names(values))
    lines = [f"def _f(e):"]
    for n in names:
        lines.append(f"    {ident(n)} = e[{n!r}]")
    body = ", ".join(to_source(v) for v in values)
    lines.append(f"    return ({body}{',' if len(values) == 1 else ''})")
    ns: dict = {}
    exec("\n".join(lines), ns)
    fn = ns["_f"]

    def evaluate(env):
        try:
            return fn(env)
        except KeyError as exc:
            raise SymbolicError(f"{what} needs a value for {exc.args[0]!r}, which is not bound "
                                f"(bound: {', '.join(sorted(map(str, env))) or 'nothing'})", loc=loc) from None
    evaluate.names = names
    return evaluate

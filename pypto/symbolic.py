"""Symbolic sizes on sympy: dynamic dims, floor/ceil division, min/max, and a cached compiled evaluator.

A dimension is an ``int`` or a sympy expression over positive integer symbols. Index math uses
floor division and ceiling, never true division. Expressions are evaluated at run time through
``evaluate`` which compiles (lambdify) each expression once and caches it.
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Iterable, Mapping, Union

import sympy

Expr = sympy.Expr
Dim = Union[int, sympy.Expr]


class _Dynamic:
    """Marker for a dimension whose size is known only at run time (``pypto.DYNAMIC``)."""

    def __repr__(self) -> str:
        return "pypto.DYNAMIC"


DYNAMIC = _Dynamic()
_counter = itertools.count()


def symbol(name: str) -> sympy.Symbol:
    """A positive integer size symbol."""
    return sympy.Symbol(name, integer=True, positive=True)


def index_symbol(name: str) -> sympy.Symbol:
    """A non-negative integer index symbol (loop variables)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def dynamic(name: str | None = None) -> sympy.Symbol:
    """A named dynamic dimension; the same name used in two annotations means the same size."""
    return symbol(name or f"d{next(_counter)}")


def is_static(d) -> bool:
    return isinstance(d, int) or (isinstance(d, sympy.Basic) and d.is_Integer)


def is_symbolic(d) -> bool:
    return isinstance(d, sympy.Basic) and not d.is_Integer


def simplify(d):
    """Normalise a size: sympy integers become ints; everything else stays an expression."""
    if isinstance(d, bool):
        return int(d)
    if isinstance(d, int):
        return d
    if isinstance(d, sympy.Basic):
        if d.is_Integer:
            return int(d)
        return d
    if hasattr(d, "__index__"):
        return int(d)
    raise TypeError(f"not a size: {d!r}")


def floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return simplify(sympy.floor(sympy.sympify(a) / b))


def ceildiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return simplify(sympy.ceiling(sympy.sympify(a) / b))


def smin(*xs):
    if all(isinstance(x, int) for x in xs):
        return min(xs)
    return simplify(sympy.Min(*xs))


def smax(*xs):
    if all(isinstance(x, int) for x in xs):
        return max(xs)
    return simplify(sympy.Max(*xs))


def free_symbols(*dims) -> set:
    out = set()
    for d in dims:
        if isinstance(d, (list, tuple)):
            out |= free_symbols(*d)
        elif isinstance(d, sympy.Basic):
            out |= d.free_symbols
    return out


def equal(a, b) -> bool | None:
    """True / False when decidable, None when it depends on run-time values."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:                        # structurally equal (the common case): no simplify needed
        return True
    diff = sympy.simplify(sympy.sympify(a) - sympy.sympify(b))
    if diff == 0:
        return True
    if diff.is_number:
        return False
    return None


def to_str(d) -> str:
    return str(d)


# ---------------------------------------------------------------- fast evaluation
@lru_cache(maxsize=None)
def _compile(expr: sympy.Expr, names: tuple[str, ...]):
    syms = [sympy.Symbol(n) for n in names]
    # lambdify over plain symbols: rename assumption-carrying symbols to plain ones of the same name
    plain = expr.xreplace({s: sympy.Symbol(s.name) for s in expr.free_symbols})
    return sympy.lambdify(syms, plain, modules=[{"floor": _ifloor, "ceiling": _iceil, "Min": min, "Max": max}, "math"])


def _ifloor(x):
    return int(x // 1)


def _iceil(x):
    return int(-((-x) // 1))


def evaluate(d, env: Mapping) -> int:
    """Value of a size under ``env`` (symbol or symbol name -> int), through a cached compiled function."""
    if isinstance(d, int):
        return d
    if not isinstance(d, sympy.Basic):
        return int(d)
    if d.is_Integer:
        return int(d)
    names = tuple(sorted(s.name for s in d.free_symbols))
    fn = _compile(d, names)
    try:
        args = [env[n] for n in names]
    except KeyError:
        args = []
        for n in names:
            v = env.get(n)
            if v is None:
                v = next((env[k] for k in env if getattr(k, "name", None) == n), None)
            if v is None:
                from .errors import SymbolicError
                raise SymbolicError(f"size {d} needs a value for '{n}', which is not bound")
            args.append(v)
    return int(fn(*args))


def evaluate_all(dims: Iterable, env: Mapping) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in dims)


def evaluate_tree(v, env: Mapping):
    """Evaluate every sympy expression inside nested lists/tuples/dicts; other leaves pass through."""
    if isinstance(v, sympy.Basic):
        return evaluate(v, env)
    if isinstance(v, (list, tuple)):
        return type(v)(evaluate_tree(x, env) for x in v)
    if isinstance(v, dict):
        return {k: evaluate_tree(x, env) for k, x in v.items()}
    return v


def prove_nonnegative(expr, ranges: Mapping) -> bool:
    """True when ``expr >= 0`` holds for every value of the index symbols in ``ranges``
    ({symbol: (lo, hi)}, inclusive) and every positive size. Linear in the index symbols."""
    if isinstance(expr, int):
        return expr >= 0
    e = sympy.expand(expr)
    for v, (lo, hi) in ranges.items():
        if v not in e.free_symbols:
            continue
        coeff = e.coeff(v)
        if v in coeff.free_symbols or v in (e - coeff * v).free_symbols:
            return False
        if coeff.is_nonnegative:
            e = sympy.expand(e.subs(v, lo))
        elif coeff.is_nonpositive:
            e = sympy.expand(e.subs(v, hi))
        else:
            return False
    return bool(e.is_nonnegative)


def min_given_ranges(a, b, ranges: Mapping):
    """min(a, b), resolved to one side when the index ranges decide it."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if prove_nonnegative(sympy.sympify(b) - a, ranges):
        return simplify(a)
    if prove_nonnegative(sympy.sympify(a) - b, ranges):
        return simplify(b)
    return smin(a, b)

"""Valid shapes of boxes at a tensor's edge: ``min(tile extent, size - offset)``, simplified to the tile
extent whenever the enclosing loop ranges prove the box is full (so full tiles carry no run-time tail)."""
from __future__ import annotations

import sympy

from pypto import symbolic


def _floor_to_mod(e):
    """floor(a / c) -> (a - Mod(a, c)) / c, which lets sympy see that a - c*floor(a/c) >= 0."""
    def rewrite(f):
        arg = f.args[0]
        num, den = arg.as_numer_denom()
        if den.is_Integer and den > 0:
            return (num - sympy.Mod(num, den)) / den
        return f
    return e.replace(lambda x: isinstance(x, sympy.floor), rewrite)


def prove_nonnegative(expr, ranges: dict) -> bool:
    if isinstance(expr, int):
        return expr >= 0
    e = sympy.expand(sympy.sympify(expr))
    for v, (lo, hi) in ranges.items():
        if v not in e.free_symbols:
            continue
        coeff = e.coeff(v)
        rest = e - coeff * v
        if v in coeff.free_symbols or v in rest.free_symbols:
            return False
        if coeff.is_nonnegative:
            e = sympy.expand(e.subs(v, lo))
        elif coeff.is_nonpositive:
            e = sympy.expand(e.subs(v, hi))
        else:
            return False
    if e.is_nonnegative:
        return True
    e = sympy.expand(_floor_to_mod(e))
    return bool(e.is_nonnegative)


def clip(extent: int, remaining, ranges: dict):
    """min(extent, remaining), as an int when decidable from the loop ranges."""
    remaining = symbolic.simplify(remaining) if isinstance(remaining, (int, sympy.Basic)) else remaining
    if isinstance(remaining, int):
        return min(extent, remaining)
    if prove_nonnegative(sympy.sympify(remaining) - extent, ranges):
        return extent
    return sympy.Min(extent, remaining)

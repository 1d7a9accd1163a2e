"""Cheap scalar expressions for tile offsets and valid shapes: substitution and Min/Max that never
ask sympy to prove orderings between symbolic arguments (which is slow and gains nothing here —
the backends evaluate the expressions at run time)."""
from __future__ import annotations

import sympy


def _num(x) -> bool:
    return isinstance(x, (int, float)) or (isinstance(x, sympy.Basic) and x.is_Number)


def smin(*xs):
    if all(_num(x) for x in xs):
        return min(int(x) if isinstance(x, sympy.Integer) else x for x in xs)
    nums = [x for x in xs if _num(x)]
    rest = list(dict.fromkeys(sympy.sympify(x) for x in xs if not _num(x)))
    args = ([min(nums)] if nums else []) + rest
    return args[0] if len(args) == 1 else sympy.Min(*args, evaluate=False)


def smax(*xs):
    if all(_num(x) for x in xs):
        return max(int(x) if isinstance(x, sympy.Integer) else x for x in xs)
    nums = [x for x in xs if _num(x)]
    rest = list(dict.fromkeys(sympy.sympify(x) for x in xs if not _num(x)))
    args = ([max(nums)] if nums else []) + rest
    return args[0] if len(args) == 1 else sympy.Max(*args, evaluate=False)


def subs(e, mapping: dict):
    """``e`` with symbols replaced; Min/Max rebuilt without sympy's case analysis; ints stay ints."""
    if not isinstance(e, sympy.Basic) or not mapping:
        return e
    out = _subs(e, mapping)
    if isinstance(out, sympy.Integer):
        return int(out)
    return out


def _subs(e, m):
    if e.is_Symbol:
        return m.get(e, e)
    if e.is_Atom or not (e.free_symbols & m.keys()):
        return e
    args = [_subs(a, m) for a in e.args]
    if isinstance(e, sympy.Min):
        r = smin(*args)
        return sympy.Integer(r) if isinstance(r, int) else r
    if isinstance(e, sympy.Max):
        r = smax(*args)
        return sympy.Integer(r) if isinstance(r, int) else r
    return e.func(*args)

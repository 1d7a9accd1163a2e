"""Fast substitution in index expressions. sympy's Min/Max simplify their arguments against each
other on every rebuild (slow for long symbolic sizes); lowering only renames symbols and plugs in
loop indices, so Min/Max are rebuilt without that search unless all their arguments are numbers."""
from __future__ import annotations

import sympy

_LAZY = (sympy.Min, sympy.Max)


def subs(e, mapping: dict):
    """``e`` with the symbols of ``mapping`` replaced (like xreplace, without Min/Max simplification)."""
    if not isinstance(e, sympy.Basic) or not mapping:
        return e
    return _subs(e, mapping, {})


def _subs(e, m, memo):
    hit = m.get(e)
    if hit is not None:
        return sympy.sympify(hit)
    if not e.args:
        return e
    key = id(e)
    if key in memo:
        return memo[key]
    args = [_subs(a, m, memo) for a in e.args]
    if all(a is b for a, b in zip(args, e.args)):
        out = e
    elif isinstance(e, _LAZY) and not all(a.is_number for a in args):
        out = e.func(*args, evaluate=False)
    else:
        out = e.func(*args)
    memo[key] = out
    return out


def same(a, b) -> bool:
    """a == b for sizes: structural equality first, an expanded difference only when needed."""
    if a is b or a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0

"""Python's own truth tests of run-time values in code the condition rewrite does not reach.

frontend/conditions.py rewrites the comparisons, ``and`` / ``or`` / ``not`` and ``if``s of a jit
function and of the plain helpers of the user's files. Code it cannot rewrite still runs during a
trace: a lambda made outside the jit function (``sorted(key=...)``, a callback), ``exec``'d or
generated code, a decorator's wrapper, a function calling ``super()``. There Python's own tests of a
sympy value answer by default, silently: ``n == 3`` and ``n in (1, 2)`` are sympy's structural
comparison (False for a loop index or a data scalar), ``if n:`` / ``bool(i > 0 and j > 0)`` are
True for any expression, and only a bare relation (``if i < 2``) raises sympy's "cannot determine
truth value".

While a jit function is traced on this thread (``guarded``), these tests made directly by such code
(the calling frame is neither pypto's, a library's nor the standard library's: the user's files,
``<string>`` of exec) on a symbolic scalar go through the same decision as the rewritten ones
(``control._decide``, over the loops' index ranges): decided at trace time, the right answer; not
decided, a PyptoError at the user's line, since Python runs one side only and a run-time branch needs
both traced. sympy's, pypto's and libraries' own uses (structural by design) are untouched, as is
every test outside a trace and on other threads. The hooks sit on sympy's classes only while some
thread traces (counted under a lock, as cann.size_builtins swaps min / max).
"""
from __future__ import annotations

import numbers
import os
import sys

import sympy
from sympy.core.relational import Relational
from sympy.logic.boolalg import BooleanFunction

from ..errors import PyptoError, _is_internal, user_location
from .conditions import _is_library, call
from .control import _decide
from .trace_patch import TracePatch

_saved: list = []              # (class, attribute, its own previous value or _ABSENT)
_ABSENT = object()
_user_file: dict = {}          # co_filename -> whether it is the user's (not pypto / a library / stdlib)


# Professional mode (pypto_pro, next to pypto) is pypto's too: a pl kernel called from a jit function
_PRO_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "pypto_pro")
_PRO_ROOT = os.path.normpath(_PRO_ROOT) + os.sep


def _is_user(filename: str) -> bool:
    hit = _user_file.get(filename)
    if hit is None:
        hit = _user_file[filename] = not _is_internal(filename) and not _is_library(filename) and \
            not os.path.abspath(filename).startswith(_PRO_ROOT)
    return hit


def _by_user() -> bool:
    """Whether this thread traces and the test is made directly by a frame of the user's code (the
    caller of the hooked special method: C-level comparisons, ``in`` and ``sorted`` add no frame)."""
    if not _PATCH.active():
        return False
    frame = sys._getframe(2)
    if frame.f_code is call.__code__:       # bool(n), any(...) in a rewritten body: the user's call
        frame = frame.f_back
    return _is_user(frame.f_code.co_filename)


def _symbolic_number(v) -> bool:
    return isinstance(v, (sympy.Expr, numbers.Number)) and not isinstance(v, bool)


def _decided(relation, shown: str):
    d = _decide(relation) if not isinstance(relation, bool) else relation
    if d is None:
        raise PyptoError(
            f"`{shown}` is Python's own test of a run-time value (a loop index, size or data scalar): it cannot "
            "be decided while tracing, and Python would run one side only (code pypto does not rewrite: a lambda "
            "made outside the jit function, exec'd or generated code, a decorator's wrapper, a method calling "
            "super(); or bool() / any() / sorted() of a run-time value)",
            loc=user_location(),
            hint="write the test in the @pypto.jit function or a plain helper function of your files (there it "
                 "becomes a run-time branch), or use pypto.cond(pred, true_fn, false_fn)")
    return bool(d)


def _eq_hook(original):
    def __eq__(self, other):
        r = original(self, other)
        # NotImplemented for a Python int / float: Python then answers False (identity)
        if (r is False or r is NotImplemented) and _by_user() and _symbolic_number(other) and \
                (self.free_symbols or getattr(other, "free_symbols", None)):
            return _decided(sympy.Eq(self, other, evaluate=False), f"{self} == {other}")
        return r
    return __eq__


def _ne_hook(original):
    def __ne__(self, other):
        r = original(self, other)
        if (r is True or r is NotImplemented) and _by_user() and _symbolic_number(other) and \
                (self.free_symbols or getattr(other, "free_symbols", None)):
            return _decided(sympy.Ne(self, other, evaluate=False), f"{self} != {other}")
        return r
    return __ne__


def _bool_hook(original):
    def __bool__(self):
        if _by_user() and self.free_symbols:
            c = self if isinstance(self, (Relational, BooleanFunction)) else sympy.Ne(self, 0, evaluate=False)
            shown = f"bool({self})" if c is not self else str(self)
            return _decided(c, shown)
        return True if original is _ABSENT else original(self)
    return __bool__


def _hooks():
    """(class, attribute, hook maker) for each sympy special method that answers a truth test."""
    out = []
    for cls in (sympy.Basic, sympy.Number, sympy.Rational, sympy.Integer, sympy.Float):
        for name, make in (("__eq__", _eq_hook), ("__ne__", _ne_hook)):
            if name in vars(cls):
                out.append((cls, name, make))
    out += [(sympy.Expr, "__bool__", _bool_hook), (Relational, "__bool__", _bool_hook),
            (BooleanFunction, "__bool__", _bool_hook)]
    return out


def _install():
    for cls, name, make in _hooks():
        own = vars(cls).get(name, _ABSENT)
        _saved.append((cls, name, own))
        setattr(cls, name, make(own))


def _restore():
    while _saved:
        cls, name, own = _saved.pop()
        if own is _ABSENT:
            delattr(cls, name)
        else:
            setattr(cls, name, own)


_PATCH = TracePatch(_install, _restore)


def guarded() -> TracePatch:
    """The scope of one trace on this thread (jit.py); nests."""
    return _PATCH


__all__ = ["guarded"]

"""A traced or kernel function's signature with its annotations evaluated (pypto.jit, the Tile level's
kernels and Professional mode's pl.jit all read their parameters' annotations through it).

Under ``from __future__ import annotations`` (or with quoted annotations) every annotation is a
string; taken as it is, ``pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float16]`` would be no tensor spec,
and the call would check neither the declared static dims nor the dtype, and would retrace a DYNAMIC
dim for every size. The strings are evaluated
where the kernel was written: its module's globals, its closure, and the locals of the frame that
decorated it (a kernel defined inside a function may name that function's sizes).
"""
from __future__ import annotations

import inspect
import sys

from ..errors import PyptoError, _is_internal


def _decorating_frame_locals() -> dict:
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return dict(frame.f_locals) if frame is not None else {}


def evaluated_signature(fn, name: str, error=PyptoError) -> inspect.Signature:
    """inspect.signature(fn) with string annotations evaluated; one that cannot be is ``error``."""
    sig = inspect.signature(fn)
    if not any(isinstance(p.annotation, str) for p in sig.parameters.values()):
        return sig
    scope = dict(getattr(fn, "__globals__", {}))
    scope.update(_decorating_frame_locals())
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    for var, cell in zip(code.co_freevars if code else (), cells):
        try:
            scope[var] = cell.cell_contents
        except ValueError:          # a closure variable not assigned yet
            pass
    params = []
    for p in sig.parameters.values():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, scope)     # noqa: S307 - the user's own annotation text
            except Exception as e:
                raise error(f"{name}: cannot evaluate the annotation {ann!r} of parameter '{p.name}': "
                                  f"{type(e).__name__}: {e}") from None
        params.append(p.replace(annotation=ann))
    return sig.replace(parameters=params)

"""DSL functions: the names a kernel calls (``pl.add``, ``pl.load_tile``, ``pl.range`` ...).

Kernels are parsed, never executed, so these objects only carry a name and the parser handler that
gives the call its meaning. Calling one from ordinary Python is a mistake and says so.
"""
from __future__ import annotations

from typing import Callable

from .errors import ParseError


class DslFunction:
    def __init__(self, name: str, handler: Callable, doc: str | None = None):
        self.name = name
        self.handler = handler
        self.__doc__ = doc or handler.__doc__
        self.__name__ = self.__qualname__ = name
        self.__module__ = "pypto_pro.language"

    def __call__(self, *args, **kwargs):
        raise ParseError(f"pl.{self.name} can only be used inside a @pl.jit kernel (kernels are parsed, not run)",
                         hint="decorate the function with @pl.jit and launch it as kernel[stream, block_dim](...)")

    def __repr__(self) -> str:
        return f"<pl.{self.name}>"


REGISTRY: dict[str, DslFunction] = {}


def dsl(name: str, doc: str | None = None):
    """Register ``handler(parser, call)`` as the meaning of ``pl.<name>``."""
    def wrap(handler):
        fn = DslFunction(name, handler, doc)
        REGISTRY[name] = fn
        return fn
    return wrap

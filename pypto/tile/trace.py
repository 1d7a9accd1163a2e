"""Tracing a kernel body: the program under construction, the statement list being filled (the kernel
body or the body of the innermost ``pt.range`` loop) and the scope rules of tile values."""
from __future__ import annotations

from ..errors import PyptoError, SourceLoc, user_location
from .ir import GMView, KernelProgram, Loop, Op, Value

_stack: list = []


class Tracer:
    def __init__(self, program: KernelProgram, machine):
        self.program = program
        self.machine = machine
        self.bodies = [program.body]
        self.loops: list[Loop] = []

    @property
    def loop(self) -> Loop | None:
        return self.loops[-1] if self.loops else None

    def emit(self, op: str, args: list, attrs: dict | None = None, out: tuple | None = None,
             loc: SourceLoc | None = None, hint: str | None = None) -> Value | None:
        """Record one op; ``out`` = (shape, dtype, valid) of its result, or None (store)."""
        loc = loc or user_location()
        for a in args:
            if isinstance(a, Value):
                self.check_scope(a, loc)
        value = None
        if out is not None:
            shape, dtype, valid = out
            value = Value(tuple(shape), dtype, tuple(valid), None, self.loop, _hint(hint or op[:4]))
        o = Op(op, list(args), dict(attrs or {}), value, loc)
        if value is not None:
            value.op = o
        self.bodies[-1].append(o)
        if op == "store":
            self.program.outputs.add(args[0].tensor)
        return value

    def check_scope(self, v: Value, loc) -> None:
        if v.loop is not None and v.loop not in self.loops:
            raise PyptoError(f"tile %{v.name} was computed inside the pt.range loop at line {v.loop.loc.line} "
                             "and is used after it", loc=loc,
                             hint="to carry a tile across iterations and out of the loop, create it before the "
                                  "loop and rebind or update it in the body (acc = acc + x)")

    def push_loop(self, loop: Loop) -> None:
        loop.parent = self.loop
        self.bodies[-1].append(loop)
        self.bodies.append(loop.body)
        self.loops.append(loop)

    def pop_loop(self) -> Loop:
        self.bodies.pop()
        return self.loops.pop()


def _hint(s: str) -> str:
    s = "".join(ch for ch in s if ch.isalnum())
    return s if s and not s[0].isdigit() else "t" + s


def push(tracer: Tracer) -> Tracer:
    _stack.append(tracer)
    return tracer


def pop() -> Tracer:
    return _stack.pop()


def current() -> Tracer:
    if not _stack:
        raise PyptoError("pypto.tile ops run inside a kernel: decorate the function with @pt.kernel and launch it "
                         "as kernel[grid](tensors...)")
    return _stack[-1]


def is_tracing() -> bool:
    return bool(_stack)


__all__ = ["Tracer", "current", "push", "pop", "is_tracing", "GMView"]

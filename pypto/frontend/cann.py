"""Names of CANN PyPTO 0.2.0's Tensor-level API that pypto accepts so that its programs run unchanged.

What maps onto pypto's own meaning is implemented where that meaning lives (``Tensor([], dtype)`` and
``Tensor[...]`` in tensor.py, ``pypto.frontend.jit`` in jit.py, ``reshape(valid_shape=)`` /
``full(size=)`` / ``matmul(extend_params=)`` in the api modules). What pypto does not model — CANN's
run modes, its pass / host / codegen / runtime / verify / debug options — is accepted here and recorded
as ignored: each distinct option is noted once on the ``pypto.cann`` logger (level INFO) and kept in
``ignored_options()``, never silently given another meaning. Options that change a program's values
are not in this list: they are implemented or refused.
"""
from __future__ import annotations

import builtins
import enum
import functools
import logging
import types

from ..errors import PyptoError
from . import hints
from .trace_patch import TracePatch

log = logging.getLogger("pypto.cann")

OPTION_KINDS = ("host_options", "codegen_options", "pass_options", "runtime_options", "verify_options",
                "debug_options", "operation_options")

_ignored: dict = {}          # (kind, key) -> the latest value given


class RunMode(enum.IntEnum):
    """CANN's ``runtime_options={"run_mode": ...}``: NPU runs on the device, SIM on CANN's simulator.
    pypto runs every program on its own backend (``pypto.set_backend``, ``pypto.jit(backend=)``:
    ``sim`` by default), whichever run mode is named; the run mode is recorded as ignored."""
    NPU = 0
    SIM = 1


def note_ignored(kind: str, options) -> None:
    """Record ``options`` (a dict, or None) of ``kind`` as accepted and ignored by pypto."""
    if not options:
        return
    if not isinstance(options, dict):
        raise PyptoError(f"{kind} must be a dict of option names to values, found {type(options).__name__}")
    for key, value in options.items():
        if (kind, key) not in _ignored:
            log.info("CANN PyPTO %s %r = %r is accepted and ignored: pypto does not model it", kind, key, value)
        _ignored[(kind, key)] = value


def ignored_options() -> dict:
    """{(option kind, option name): value} of every CANN option this process gave and pypto ignored."""
    return dict(_ignored)


def _setter(kind):
    def set_options(**options) -> None:
        note_ignored(kind, options)
    set_options.__name__ = f"set_{kind}"
    set_options.__doc__ = f"CANN's ``set_{kind}``: accepted; every option is recorded as ignored."
    return set_options


set_host_options = _setter("host_options")
set_codegen_options = _setter("codegen_options")
set_pass_options = _setter("pass_options")
set_runtime_options = _setter("runtime_options")
set_verify_options = _setter("verify_options")
set_debug_options = _setter("debug_options")
set_operation_options = _setter("operation_options")


def set_matrix_size(size) -> None:
    """CANN's ``set_matrix_size([m, k, n])`` (the matmul sizes its cube tiling plans for): accepted and
    recorded as ignored; pypto's cube tiling reads the traced shapes."""
    note_ignored("options", {"matrix_size": size})


# CANN's pypto.experimental namespace: the names of it that its published programs call
experimental = types.SimpleNamespace(set_operation_options=set_operation_options)


def _getter(kind):
    def get_options() -> dict:
        return {k: v for (kd, k), v in _ignored.items() if kd == kind}
    get_options.__name__ = f"get_{kind}"
    return get_options


get_host_options = _getter("host_options")
get_codegen_options = _getter("codegen_options")
get_pass_options = _getter("pass_options")
get_runtime_options = _getter("runtime_options")
get_verify_options = _getter("verify_options")
get_debug_options = _getter("debug_options")


class options:
    """CANN's ``pypto.options(...)``, a decorator or a context manager. ``vec_tile_shapes`` and
    ``cube_tile_shapes`` (``[[mL0, mL1], [kL0, kL1], [nL0, nL1]]``, optionally a fourth entry: split K)
    are pypto's tile hints for what is traced inside; the option dicts are recorded as ignored."""

    def __init__(self, name="", codegen_options=None, host_options=None, pass_options=None,
                 runtime_options=None, verify_options=None, operation_options=None, debug_options=None,
                 vec_tile_shapes=None, cube_tile_shapes=None, conv_tile_shapes=None, matrix_size=None):
        self.name = name
        for kind, value in (("codegen_options", codegen_options), ("host_options", host_options),
                            ("pass_options", pass_options), ("runtime_options", runtime_options),
                            ("verify_options", verify_options), ("operation_options", operation_options),
                            ("debug_options", debug_options)):
            note_ignored(kind, value)
        if conv_tile_shapes is not None:
            note_ignored("options", {"conv_tile_shapes": conv_tile_shapes})
        if matrix_size is not None:
            note_ignored("options", {"matrix_size": matrix_size})
        self.vec = vec_tile_shapes
        self.cube = cube_tile_shapes
        self._saved = []

    def __enter__(self):
        self._saved.append(hints.snapshot())
        if self.vec is not None:
            hints.set_vec_tile_shapes(*self.vec)
        if self.cube is not None:
            m, k, n, *rest = self.cube
            hints.set_cube_tile_shapes(m, k, n, *rest[:1])
        return self

    def __exit__(self, *exc):
        hints.restore(self._saved.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


def set_options(codegen_options=None, host_options=None, pass_options=None, runtime_options=None,
                verify_options=None, debug_options=None, operation_options=None, vec_tile_shapes=None,
                cube_tile_shapes=None, conv_tile_shapes=None, matrix_size=None) -> None:
    """CANN's ``set_options``: the tile shapes become the active hints, the option dicts are ignored."""
    opts = options(codegen_options=codegen_options, host_options=host_options, pass_options=pass_options,
                   runtime_options=runtime_options, verify_options=verify_options,
                   operation_options=operation_options, debug_options=debug_options,
                   conv_tile_shapes=conv_tile_shapes, matrix_size=matrix_size,
                   vec_tile_shapes=vec_tile_shapes, cube_tile_shapes=cube_tile_shapes)
    opts.__enter__()                 # not exited: the hints stay, as CANN's new scope does


def jit_options(name: str, host_options=None, codegen_options=None, pass_options=None, runtime_options=None,
                verify_options=None, debug_options=None, new_ir=True, create_new_logical_tensor=False) -> None:
    """The keyword arguments of CANN's ``pypto.frontend.jit`` that pypto accepts and ignores."""
    for kind, value in (("host_options", host_options), ("codegen_options", codegen_options),
                        ("pass_options", pass_options), ("runtime_options", runtime_options),
                        ("verify_options", verify_options), ("debug_options", debug_options)):
        note_ignored(kind, value)
    if new_ir is not True or create_new_logical_tensor:
        note_ignored("jit", {"new_ir": new_ir, "create_new_logical_tensor": create_new_logical_tensor})


# The jit traces running on this thread (size_builtins): CANN's size methods and Python's min / max of
# sizes take pypto's meaning only there, so no other code of the process (another thread, a library, a
# program outside a trace) sees a changed sympy or builtins.
_saved_builtins: list = []         # Python's own min / max while swapped


def _swap_builtins():
    _saved_builtins[:] = [builtins.min, builtins.max]
    builtins.min, builtins.max = _size_aware(builtins.min, "smin"), _size_aware(builtins.max, "smax")


def _restore_builtins():
    builtins.min, builtins.max = _saved_builtins


_PATCH = TracePatch(_swap_builtins, _restore_builtins)


def _in_trace() -> bool:
    return _PATCH.active()


class _SizeMethod:
    """``n.min(m)``, ``n.max(m)``, ``n.item()`` on a sympy expression (pypto's sizes are sympy
    expressions: CANN's SymbolicScalar methods), only while this thread traces a jit function
    (size_builtins); anywhere else the attribute does not exist, as in plain sympy."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if not _in_trace():
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute {self.name!r}")
        return functools.partial(self.fn, obj)


def _size_methods() -> None:
    """``n.min(m)`` / ``n.max(m)``: ``pypto.min(n, m)`` / ``pypto.max(n, m)``; ``n.item()`` is ``n``
    (torch's spelling of a read, on a value already read: lens[b].item() where lens[b] is a data scalar).
    Put on sympy's Expr only where sympy has no attribute of that name, and live only inside a trace."""
    import sympy
    from .. import symbolic as sym
    for name, fn in (("min", sym.smin), ("max", sym.smax), ("item", lambda self: self)):
        if not hasattr(sympy.Expr, name):
            setattr(sympy.Expr, name, _SizeMethod(name, fn))


_size_methods()


def size_builtins() -> TracePatch:
    """While a ``pypto.jit`` function is traced, Python's ``min`` / ``max`` of sizes (``min(off + 64, n)``
    with ``n = x.shape[0]``, as CANN PyPTO programs write them: CANN parses the function, pypto runs it)
    give the symbolic ``pypto.min`` / ``pypto.max`` instead of failing on a sympy comparison. Only a
    call of two or more positional ints / sizes, at least one of them symbolic, on the tracing thread
    is taken; every other call (another thread's included) is Python's own. ``builtins.min`` / ``max``
    are swapped while any thread traces (under a lock, counted per thread) and restored when the last
    trace ends, an exception's included; the thread's depth lets a trace nest in another."""
    return _PATCH


def _size_aware(builtin, which):
    import sympy
    from .. import symbolic as sym
    fn = getattr(sym, which)

    def minmax(*args, **kwargs):
        if (_in_trace() and len(args) >= 2 and not kwargs
                and all(isinstance(a, (int, sympy.Expr)) and not isinstance(a, bool) for a in args)
                and any(isinstance(a, sympy.Expr) and a.free_symbols for a in args)):
            return fn(*args)
        return builtin(*args, **kwargs)
    minmax.__name__ = builtin.__name__
    minmax.__qualname__ = builtin.__qualname__
    minmax.__doc__ = builtin.__doc__
    minmax.__wrapped__ = builtin
    return minmax

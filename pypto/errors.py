"""pypto errors: every user mistake names the user's file and line, what was expected and what was found."""
from __future__ import annotations

import functools
import os
import sys
import types
from dataclasses import dataclass

_PKG_DIRS = tuple(os.path.dirname(os.path.abspath(p)) for p in (__file__,))
_PYPTO_ROOT = os.path.dirname(os.path.abspath(__file__))
_INTERNAL_ROOTS = [_PYPTO_ROOT]


def register_internal_root(path: str) -> None:
    """Frames under this directory are library frames, never reported as the user's line."""
    _INTERNAL_ROOTS.append(os.path.dirname(os.path.abspath(path)))
    _is_internal.cache_clear()


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    func: str = ""
    col: int | None = None

    def __str__(self) -> str:
        base = os.path.basename(self.file)
        return f"{base}:{self.line}" + (f":{self.col}" if self.col is not None else "")

    def full(self) -> str:
        return f"{self.file}:{self.line}" + (f":{self.col}" if self.col is not None else "")

    def to_json(self):
        return [self.file, self.line, self.func]

    @staticmethod
    def from_json(v):
        return SourceLoc(v[0], v[1], v[2]) if v else None


@functools.lru_cache(maxsize=4096)       # called for every frame of every traced op: keep it off the hot path
def _is_internal(filename: str) -> bool:
    f = os.path.abspath(filename)
    if any(f.startswith(root + os.sep) for root in _INTERNAL_ROOTS):
        return True
    # torch / stdlib frames between the user and us (torch.compile, contextlib...)
    return f"{os.sep}site-packages{os.sep}torch{os.sep}" in f or f.startswith(os.path.dirname(os.__file__))


def user_location(skip_internal: bool = True) -> SourceLoc | None:
    """The innermost stack frame that belongs to user code (not pypto, not torch, not stdlib)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not skip_internal or not _is_internal(code.co_filename):
            return SourceLoc(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


def raising_user_location(e: BaseException) -> SourceLoc | None:
    """The innermost user frame in the traceback of ``e``: the user's line that raised it."""
    loc, tb = None, e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_internal(code.co_filename):
            loc = SourceLoc(code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return loc


class PyptoError(Exception):
    """Base of all pypto errors. `loc` is the user's source location when known."""

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc if loc is not None else user_location()
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.loc.full()}: " if self.loc else ""
        text = f"{where}{self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class PyptoDeprecationWarning(DeprecationWarning):
    """An old spelling that still works: the message names its replacement (reported at the user's line)."""


class ShapeError(PyptoError):
    """Shapes do not agree (broadcast, matmul K, rank, a missing dim)."""


class DTypeError(PyptoError):
    """An unsupported or mismatched dtype."""


class TypeMismatchError(PyptoError):
    """A value of the wrong kind (e.g. a non-tensor where a tensor is expected)."""


class SymbolicError(PyptoError):
    """A symbolic size where a static one is required, or an unbindable size."""


class TilingError(PyptoError):
    """Invalid tile shapes or hints (over capacity, misaligned, wrong rank)."""


class CompileError(PyptoError):
    """A pass or a backend could not compile the program."""


class MemoryPlanError(CompileError):
    """On-chip tiles that cannot be placed: past a memory's capacity, misaligned, or sharing bytes with
    another live tile."""


class SyncError(CompileError):
    """Automatic synchronisation could not be built (e.g. more event ids than the machine has)."""


class SimError(PyptoError):
    """The simulator caught what hardware would get wrong (race, deadlock, overflow, misalignment)."""


class BackendUnavailableError(PyptoError):
    """A backend whose toolchain is not installed on this machine."""


class UnsupportedOpError(PyptoError, TypeError):
    """An op pypto does not have (a torch function called on a traced pypto.Tensor)."""


class NoSuchMethodError(PyptoError, AttributeError):
    """A method a traced pypto.Tensor does not have (an AttributeError, so hasattr() still answers False)."""


class IndexOutOfRangeError(PyptoError, IndexError):
    """An index (embedding id, index_select / gather index) outside the dim it picks from, as torch's IndexError."""


# ---------------------------------------------------------------------- tracebacks
TRACEBACK_ENV = "PYPTO_TRACEBACK"


def full_tracebacks() -> bool:
    """PYPTO_TRACEBACK=full: errors keep pypto's internal frames (for debugging pypto itself)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() == "full"


def _innermost(tb):
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _user_frames(tb):
    """A copy of traceback ``tb`` without its internal frames (pypto's, torch's, the stdlib's)."""
    kept = []
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def hide_internal_frames(e: BaseException) -> None:
    """Strip internal frames from the tracebacks of ``e`` and the exceptions it was raised from, when
    the error is a pypto error or was raised by user code (the user's own error inside a traced
    function). Any other exception arose inside pypto: a bug, whose frames its report needs."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        last = _innermost(tb)
        if isinstance(e, PyptoError) or (last is not None and not _is_internal(last.tb_frame.f_code.co_filename)):
            e.__traceback__ = _user_frames(tb)
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)


def user_entry(fn):
    """Decorator for the entry points a user calls (a jit function, a kernel launch, a module call):
    an error leaving them shows the user's frames, not pypto's (see ``hide_internal_frames``);
    PYPTO_TRACEBACK=full shows every frame."""
    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not full_tracebacks():
                hide_internal_frames(e)
            raise
    return entry

"""What the cpu backend reports when a generated kernel does what the device would get wrong."""
from __future__ import annotations

from ...errors import CompileError, SimError


class CpuKernelError(SimError):
    """A kernel failed while running natively: a wait_flag with no matching set_flag, a tile
    placed beyond its memory, a GM box outside its tensor, a cross-core deadlock..."""


class FlagWarning(UserWarning):
    """A kernel left set_flag signals that nothing waited for (they would leak into the next kernel)."""


class BuildWarning(UserWarning):
    """The C++ compiler warned while building generated kernels: a code-generator bug worth reporting
    (the build log is kept beside the library)."""


class LibraryLoadError(CompileError):
    """A kernel library that cannot be used: the loader refuses it, or it is not the build it should
    be (another key, a missing entry point). A cached one is rebuilt; a fresh one is a real error."""

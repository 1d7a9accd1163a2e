"""``TracePatch``: a process-wide change (to builtins, to sympy's classes) that is live while any thread
traces a jit function, and whose effect each hook limits to the tracing thread (``active()``).

The change is installed when the first thread enters a trace and undone when the last one leaves (under a
lock, counted per thread; an exception's exit included); a thread's depth lets a trace nest in another.
Used by cann.py (min / max of sizes) and truth.py (Python's truth tests of run-time values).
"""
from __future__ import annotations

import threading


class TracePatch:
    def __init__(self, install, restore):
        self._install, self._restore = install, restore
        self._local = threading.local()
        self._lock = threading.Lock()
        self._threads = 0                # threads inside a trace

    def active(self) -> bool:
        """Whether this thread is inside a trace."""
        return getattr(self._local, "depth", 0) > 0

    def __enter__(self):
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._lock:
                if self._threads == 0:
                    self._install()
                self._threads += 1
        self._local.depth = depth + 1
        return self

    def __exit__(self, *exc):
        self._local.depth -= 1
        if self._local.depth == 0:
            with self._lock:
                self._threads -= 1
                if self._threads == 0:
                    self._restore()
        return False

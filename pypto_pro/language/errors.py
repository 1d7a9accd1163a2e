"""Errors of Professional mode, rendered like a compiler diagnostic:

    error: pl.add takes 3 tile arguments (dst, a, b), found 2
      --> kernels/add.py:31:16
       |
    31 |                 pl.add(tile_c, tile_a)
       |                 ^^^^^^^^^^^^^^^^^^^^^^
       = hint: ops are destination-first: pl.add(dst, a, b)
"""
from __future__ import annotations

import linecache
import os
from dataclasses import dataclass

from pypto import errors
from pypto.errors import PyptoError, SourceLoc, register_internal_root

register_internal_root(os.path.dirname(__file__))   # pypto_pro frames are library frames


@dataclass(frozen=True)
class Span:
    """A source range on one line (columns 0-based, end exclusive)."""
    file: str
    line: int
    col: int
    end_col: int | None = None
    func: str = ""

    @property
    def loc(self) -> SourceLoc:
        return SourceLoc(self.file, self.line, self.func, self.col + 1)

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")


class ProError(PyptoError):
    """Base of Professional-mode errors; renders the offending source with a caret when a Span is known."""

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.span = span
        super().__init__(message, loc=span.loc if span else None, hint=hint)

    def _render(self) -> str:
        if self.span is None:
            return super()._render()
        s = self.span
        text = s.source_line()
        width = len(str(s.line))
        out = [f"error: {self.message}", f"{' ' * width} --> {s.file}:{s.line}:{s.col + 1}"]
        if text:
            end = s.end_col if s.end_col is not None and s.end_col > s.col else len(text)
            end = min(end, len(text)) if len(text) > s.col else s.col + 1
            out += [f"{' ' * width} |", f"{s.line} | {text}",
                    f"{' ' * width} | {' ' * s.col}{'^' * max(1, end - s.col)}"]
        if self.hint:
            out.append(f"{' ' * width} = hint: {self.hint}")
        return "\n".join(out)


class ParseError(ProError):
    """The kernel source is not valid Professional-mode code (name, arity, types, spaces, control flow)."""


class MemoryPlanError(ProError):
    """A tile over its buffer's capacity, misaligned, or overlapping another live tile."""


class SyncError(ProError, errors.SyncError):
    """Automatic synchronisation could not be built (e.g. more event ids than the machine has)."""


class LaunchError(ProError):
    """A launch whose arguments do not match the kernel (shapes, dtypes, block_dim, tiling key)."""

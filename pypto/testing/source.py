"""Source lines for tests that check an error names the user's line."""
from __future__ import annotations

import inspect


def line_of(fn, text: str) -> int:
    """The file line of the first line of ``fn``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)

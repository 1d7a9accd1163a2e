"""Unique C++ identifiers for the names of a user's program (tiles, tensors, parameters, loop variables);
how one name is spelled as an identifier is pypto.sanitize.cpp_identifier."""
from __future__ import annotations

from ..sanitize import cpp_identifier


class Namer:
    """Hands out unique identifiers: the same source name always maps to the same identifier."""

    def __init__(self, taken=()):
        self._taken = set(taken)
        self._by_key: dict = {}

    def name(self, key, preferred: str | None = None) -> str:
        if key in self._by_key:
            return self._by_key[key]
        base = cpp_identifier(preferred if preferred is not None else key)
        text, n = base, 1
        while text in self._taken:
            text = f"{base}_{n}"
            n += 1
        self._taken.add(text)
        self._by_key[key] = text
        return text

    def fresh(self, preferred: str) -> str:
        """A new identifier never handed out before (for temporaries)."""
        base = cpp_identifier(preferred)
        text, n = base, 0
        while text in self._taken:
            n += 1
            text = f"{base}{n}"
        self._taken.add(text)
        return text

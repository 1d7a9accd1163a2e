"""C++ identifiers for the names of a user's program (tiles, tensors, parameters, loop variables)."""
from __future__ import annotations

import re

_CPP_RESERVED = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t char8_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq
args core pto pypto std half bfloat16_t main
""".split())


# Macros of the PTO headers and the C library that a name must not collide with.
_MACRO = re.compile(r"^(PIPE_\w*|EVENT_ID\d*|DYNAMIC|NAN|INFINITY|AICORE|GM_ADDR|INT\d+_C|UINT\d+_C|NULL|EOF|"
                    r"TRUE|FALSE|assert|errno)$")


def identifier(name: str) -> str:
    """A valid C++ identifier close to ``name`` (reserved words and macros get a trailing '_')."""
    text = re.sub(r"[^0-9A-Za-z_]", "_", str(name)) or "_"
    if text[0].isdigit():
        text = "_" + text
    if text in _CPP_RESERVED or text.startswith("__") or re.match(r"_[A-Z]", text) or _MACRO.match(text):
        text += "_"
    return text


class Namer:
    """Hands out unique identifiers: the same source name always maps to the same identifier."""

    def __init__(self, taken=()):
        self._taken = set(taken)
        self._by_key: dict = {}

    def name(self, key, preferred: str | None = None) -> str:
        if key in self._by_key:
            return self._by_key[key]
        base = identifier(preferred if preferred is not None else key)
        text, n = base, 1
        while text in self._taken:
            text = f"{base}_{n}"
            n += 1
        self._taken.add(text)
        self._by_key[key] = text
        return text

    def fresh(self, preferred: str) -> str:
        """A new identifier never handed out before (for temporaries)."""
        base = identifier(preferred)
        text, n = base, 0
        while text in self._taken:
            n += 1
            text = f"{base}{n}"
        self._taken.add(text)
        return text

"""The one place where user strings are made safe for generated C++ and for file paths.

Kernel, graph, block, tensor and symbol names, source locations and dump folder names come from the
user (``pl.jit(name=...)``, ``pypto.jit(name=...)``, function and argument names, file names). Every
one of them that reaches a generated source or a path goes through one of these functions:

- ``cpp_identifier``: a valid C++ identifier close to the name (other characters become '_');
- ``cpp_comment``: text that stays inside one ``//`` comment line;
- ``cpp_string``: a C++ string literal that spells the text exactly;
- ``path_component``: one file or folder name that stays inside the folder it is joined to.

Policy: a string is never refused, it is sanitised deterministically (the same input gives the same
output on every run). Sanitising may merge two names: identifiers that collide are refused where they
are handed out (``pypto.codegen.names.Namer`` renames, ``generate_module`` refuses two kernels with one
C++ name); a path component that had to change gets a hash of the original name, so two different
names never share a folder. The one refusal is a name that is not a non-empty ``str``
(``user_name``): a TypeMismatchError at the user's line.
"""
from __future__ import annotations

import hashlib
import re

from .errors import TypeMismatchError

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


def cpp_identifier(name: str) -> str:
    """A valid C++ identifier close to ``name``: characters other than ASCII letters, digits and '_'
    become '_'; a leading digit gets a '_' before it; a name that starts like the implementation's
    (``__x``, ``_X``: ``__gm__`` is a macro) gets a 'u' before it; reserved words and macros get a
    trailing '_'."""
    text = re.sub(r"[^0-9A-Za-z_]", "_", str(name)) or "_"
    if text[0].isdigit():
        text = "_" + text
    if re.match(r"_[_A-Z]", text):
        text = "u" + text
    if text in _CPP_RESERVED or _MACRO.match(text):
        text += "_"
    return text


# A '//' comment ends at a line break and continues past a backslash before one; '??/' is the
# backslash trigraph (g++ warns about it even where trigraphs are off).
_COMMENT_UNSAFE = re.compile(r"[^\x20-\x5b\x5d-\x7e]|(?<=\?)\?")


def cpp_comment(text) -> str:
    """``text`` for the inside of a ``//`` comment: printable ASCII stays, except the backslash and
    the second '?' of '??'; every other character (line breaks, control and non-ASCII characters)
    is written as ``<U+XXXX>``."""
    return _COMMENT_UNSAFE.sub(lambda m: f"<U+{ord(m.group()):04X}>", str(text))


def cpp_string(text) -> str:
    """A C++ string literal (quotes included) whose bytes are the UTF-8 bytes of ``text``. Bytes
    other than printable ASCII are octal escapes (three digits: an octal escape never swallows the
    character after it, unlike ``\\x``); '?' is escaped so that no trigraph can form."""
    out = []
    for byte in str(text).encode("utf-8", "backslashreplace"):
        c = chr(byte)
        if c in '"\\?':
            out.append("\\" + c)
        elif 0x20 <= byte < 0x7f:
            out.append(c)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


_PATH_SAFE = re.compile(r"[^0-9A-Za-z_.+-]")
_PATH_MAX = 64           # characters kept of a long name (file systems allow 255 bytes)


def path_component(name) -> str:
    """One file or folder name for ``name`` that cannot leave the folder it is joined to: characters
    other than ASCII letters, digits and ``_.+-`` become '_', and so does a leading '.' (no '..', no
    hidden files); a name longer than 64 characters is cut. A name that had to change gets '-' and
    8 hex digits of its SHA-256, so that two names never map to one component."""
    text = str(name)
    safe = _PATH_SAFE.sub("_", text)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    safe = safe[:_PATH_MAX] or "_"
    if safe == text:
        return safe
    return f"{safe}-{hashlib.sha256(text.encode('utf-8', 'backslashreplace')).hexdigest()[:8]}"


def user_name(value, what: str, default: str | None = None) -> str:
    """``value`` if it is a non-empty str (``default`` when it is None): a name the user gave ``what``."""
    if value is None and default is not None:
        value = default
    if not isinstance(value, str) or not value:
        raise TypeMismatchError(f"{what}: name must be a non-empty str, found {value!r}")
    return value

"""Source of a parsed function: its AST with line/column numbers mapped back to the user's file."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from .errors import ParseError, Span


@dataclass(frozen=True)
class FunctionSource:
    file: str
    first_line: int      # file line of the first source line
    indent: int          # columns removed by dedent
    tree: ast.FunctionDef
    name: str

    def span(self, node: ast.AST) -> Span:
        line = self.first_line + node.lineno - 1
        col = node.col_offset + self.indent
        end = None
        if getattr(node, "end_lineno", None) == node.lineno and node.end_col_offset is not None:
            end = node.end_col_offset + self.indent
        return Span(self.file, line, col, end, self.name)


@lru_cache(maxsize=256)
def _source_of_code(filename: str, code) -> FunctionSource:
    # keyed by the file too: code objects compare equal across files (co_filename is not compared), so
    # the same kernel text at the same line of another file would get that file's spans
    lines, first = inspect.getsourcelines(code)
    text = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    module = ast.parse(textwrap.dedent(text))
    fdef = next((n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fdef is None:
        raise ParseError(f"cannot find the definition of {code.co_name} in its source")
    return FunctionSource(inspect.getsourcefile(code) or code.co_filename, first, indent, fdef, code.co_name)


def function_source(fn) -> FunctionSource:
    code = getattr(fn, "__code__", None)
    if code is None:
        raise ParseError(f"{fn!r} is not a Python function; a kernel is parsed from its source")
    try:
        return _source_of_code(code.co_filename, code)
    except (OSError, TypeError) as e:
        raise ParseError(f"the source of {fn.__name__} is not available ({e}); kernels must be defined in a file",
                         hint="define the kernel in a .py file (not an interactive prompt or exec string)") from None

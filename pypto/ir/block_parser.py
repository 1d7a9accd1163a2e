"""Block IR text -> Block IR: reads what pypto.ir.block_printer prints (its docstring gives the header).

``parse_block(print_block(b))`` is a block equal to ``b`` and ``parse_kernel(print_kernel(k))`` a
kernel equal to ``k`` (source locations keep the file's base name, line and column; a location's
function name is not in the text). The statements, one a line, nested by indentation:

    OP  OPERANDS [{KEY=VALUE, ...}] [PIPE]        an instruction; operands by the ISA form of OP:
                                                  a tile name, a GM region P[OFFSETS] [clipped], or a
                                                  scalar (int, float or sympy expression). Without
                                                  PIPE, the pipe follows from the ISA (ir.block.instr).
    for VAR in range(START, STOP, STEP) [{...}]:
    if COND:    /    else:
    set_flag SRC -> DST  evN      wait_flag SRC -> DST  evN      pipe_barrier PIPE
    ffts_set PIPE flagN           ffts_wait PIPE flagN           (cross-core set / wait)

Attribute values are True / False / None, numbers, words or quoted strings, and tuples / lists of
them. A trailing comment ``# file.py:line[:col]`` is the statement's source location; other
comments and blank lines are ignored. Names in expressions must be declared: the launch symbols,
a param, a GM size, a loop variable or a ``symbols`` entry. Bad text raises BlockTextError naming
the line and column.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import sympy
from sympy.functions.elementary.miscellaneous import MinMaxBase

from ..dtypes import DataType, to_dtype
from ..errors import PyptoError, SourceLoc
from .block import (Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMParam, GMRegion, If, Instr,
                    Kernel, PipeBarrier, SetFlag, TileDecl, WaitFlag, instr)
from .block_printer import LAUNCH_SYMBOLS, SYMBOL_KINDS
from .isa import ISA, MemSpace, Pipe


class BlockTextError(PyptoError):
    """Block IR text that does not parse; ``loc`` is its line and column."""


_WORD = re.compile(r"[A-Za-z_]\w*")
_NAME_IN_EXPR = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_LOC = re.compile(r"(?P<file>[^\s:]+):(?P<line>\d+)(?::(?P<col>\d+))?")
_SYMPY_NAMES = {n: getattr(sympy, n) for n in dir(sympy) if not n.startswith("_")}
_CONSTANTS = {"True", "False", "oo", "zoo", "nan", "pi", "E", "I"}
_PIPES = {p.value: p for p in Pipe}
_CLOSE = {"(": ")", "[": "]", "{": "}"}


@dataclass
class _Line:
    """One significant line: its text without the trailing comment, its indentation, the comment."""
    number: int
    indent: int
    text: str
    comment: str


class _Cursor:
    """Reads one line left to right; ``col`` is 0-based into the full source line."""

    def __init__(self, parser: "_Parser", line: _Line, text: str | None = None, col: int | None = None):
        self.p, self.line = parser, line
        self.text = line.text if text is None else text
        self.pos = 0
        self.base = line.indent if col is None else col

    @property
    def col(self) -> int:
        return self.base + self.pos

    def next_col(self) -> int:
        """The column of the next token."""
        self.skip_space()
        return self.col

    def error(self, msg: str, col: int | None = None):
        raise self.p.error(msg, self.line, self.col if col is None else col)

    def skip_space(self):
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def peek(self, lit: str) -> bool:
        self.skip_space()
        return self.text.startswith(lit, self.pos)

    def expect(self, lit: str):
        if not self.peek(lit):
            self.error(f"expected '{lit}'")
        self.pos += len(lit)

    def word(self, what: str = "a name") -> str:
        self.skip_space()
        m = _WORD.match(self.text, self.pos)
        if not m:
            self.error(f"expected {what}")
        self.pos = m.end()
        return m.group()

    def token(self, what: str) -> str:
        """Everything up to the next space."""
        self.skip_space()
        end = self.text.find(" ", self.pos)
        end = len(self.text) if end < 0 else end
        if end == self.pos:
            self.error(f"expected {what}")
        tok, self.pos = self.text[self.pos:end], end
        return tok

    def bracketed(self, opener: str) -> tuple[str, int]:
        """The text inside the bracket that opens here, and its column; the cursor moves past the close."""
        self.expect(opener)
        start = self.pos
        end = _matching(self.text, start - 1)
        if end < 0:
            self.error(f"'{opener}' is not closed", self.base + start - 1)
        self.pos = end + 1
        return self.text[start:end], self.base + start

    def rest(self) -> tuple[str, int]:
        self.skip_space()
        text, col = self.text[self.pos:], self.col
        self.pos = len(self.text)
        return text.rstrip(), col

    def done(self):
        if not self.at_end():
            self.error(f"unexpected '{self.text[self.pos:].strip()}'")


def _matching(text: str, open_pos: int) -> int:
    """Index of the bracket closing the one at ``open_pos`` (quotes respected), or -1."""
    stack, quote = [], None
    for i in range(open_pos, len(text)):
        c = text[i]
        if quote:
            if c == quote and text[i - 1] != "\\":
                quote = None
        elif c in "'\"":
            quote = c
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


def _unquoted(text: str):
    """(index, character, bracket depth before it) of every character of ``text`` outside quotes."""
    depth, quote = 0, None
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        else:
            yield i, c, depth
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1


def _split_top(text: str, col: int, sep: str = ",") -> list[tuple[str, int]]:
    """``text`` split at the separators outside brackets and quotes: (piece, its column), stripped."""
    pieces, start = [], 0
    for i, c, depth in _unquoted(text + sep):
        if c == sep and depth == 0:
            piece = text[start:i]
            lead = len(piece) - len(piece.lstrip())
            pieces.append((piece.strip(), col + start + lead))
            start = i + 1
    if len(pieces) == 1 and not pieces[0][0]:
        return []
    return pieces


def _strip_comment(raw: str) -> tuple[str, str]:
    for i, c, _ in _unquoted(raw):
        if c == "#":
            return raw[:i].rstrip(), raw[i + 1:].strip()
    return raw.rstrip(), ""


class _Parser:
    def __init__(self, text: str, file: str):
        self.file = file
        self.lines: list[_Line] = []
        for n, raw in enumerate(text.splitlines(), 1):
            if "\t" in raw:
                raise self.error("tabs are not allowed; indent with spaces", None, raw.index("\t"), n)
            code, comment = _strip_comment(raw)
            if code.strip():
                self.lines.append(_Line(n, len(code) - len(code.lstrip()), code.strip(), comment))
        self.i = 0

    def error(self, msg: str, line: _Line | None, col: int = 0, number: int | None = None) -> BlockTextError:
        number = line.number if line is not None else number
        return BlockTextError(msg, loc=SourceLoc(self.file, number, "", col + 1))

    def loc(self, line: _Line) -> SourceLoc | None:
        m = _LOC.fullmatch(line.comment)
        if not m:
            return None
        return SourceLoc(m["file"], int(m["line"]), "", int(m["col"]) if m["col"] else None)

    # ------------------------------------------------------------------ kernel / block structure
    def kernel(self) -> Kernel:
        if not self.lines:
            raise self.error("empty text: expected 'kernel NAME'", None, 0, 1)
        head = self.lines[0]
        cur = _Cursor(self, head)
        cur.expect("kernel")
        name = cur.token("the kernel's name")
        cur.done()
        self.i = 1
        blocks = []
        while self.i < len(self.lines):
            blocks.append(self.block())
        if not blocks:
            raise self.error("a kernel needs at least one block", head, head.indent + len(head.text))
        return Kernel(name, blocks, self.loc(head))

    def block(self) -> Block:
        head = self.lines[self.i]
        if head.indent != 0:
            raise self.error("expected 'block NAME ...' at the start of a line", head, head.indent)
        cur = _Cursor(self, head)
        cur.expect("block")
        name = cur.token("the block's name")
        cur.expect("core=")
        core_col = cur.next_col()
        core = cur.word("AIC or AIV")
        if core not in CoreType.__members__:
            cur.error(f"unknown core '{core}' (AIC or AIV)", core_col)
        args_text, args_col = cur.bracketed("args(")
        params_text, params_col = cur.bracketed("params(") if cur.peek("params(") else ("", cur.col)
        cur.done()
        self.i += 1
        end = self.i
        while end < len(self.lines) and self.lines[end].indent > 0:
            end += 1
        body_lines = self.lines[self.i:end]

        kinds = {}
        while self.i < end and self.lines[self.i].text.startswith("symbols "):
            kinds.update(self.symbol_kinds(self.lines[self.i]))
            self.i += 1
        self.symbols = {n: s for n, s in LAUNCH_SYMBOLS.items()}
        self.expr_cache = {}                             # expression text -> sympy, for this block's symbols
        for name_, kind in kinds.items():
            self.symbols[name_] = sympy.Symbol(name_, **kind)
        for line in body_lines:                          # loop variables may appear in tiles' valid shapes
            m = re.match(r"for\s+([A-Za-z_]\w*)\s+in\b", line.text)
            if m and m[1] not in kinds:
                self.symbols[m[1]] = sympy.Symbol(m[1], **SYMBOL_KINDS["int>=0"])
        params = []
        for pname, col in _split_top(params_text, params_col):
            if not _WORD.fullmatch(pname):
                raise self.error(f"bad param name '{pname}'", head, col)
            params.append(self.symbols.setdefault(pname, sympy.Symbol(pname)))
        gm = [self.gm_param(text, col, head) for text, col in _split_top(args_text, args_col)]
        self.gm_params = {g.name: g for g in gm}

        tiles = []
        while self.i < end and self.lines[self.i].text.startswith("tile "):
            tiles.append(self.tile(self.lines[self.i]))
            self.i += 1
        self.tiles = {}
        for t, line in tiles:
            if t.name in self.tiles:
                raise self.error(f"tile '{t.name}' is declared twice", line, line.indent + 5)
            self.tiles[t.name] = t
        indent = self.lines[self.i].indent if self.i < end else 2
        body = self.stmts(indent, end)
        return Block(name, CoreType[core], gm, params, [t for t, _ in tiles], body, self.loc(head))

    def symbol_kinds(self, line: _Line) -> dict:
        cur = _Cursor(self, line)
        cur.expect("symbols")
        text, col = cur.rest()
        out = {}
        for piece, pcol in _split_top(text, col):
            name, sep, kind = piece.partition(":")
            name, kind = name.strip(), kind.strip()
            if not sep or not _WORD.fullmatch(name):
                raise self.error(f"expected 'NAME: KIND' in symbols, got '{piece}'", line, pcol)
            if kind in SYMBOL_KINDS:
                out[name] = SYMBOL_KINDS[kind]
            elif kind.startswith("{"):
                assumptions = self.value(kind, line, pcol + piece.index(kind))
                if not all(isinstance(v, bool) for v in assumptions.values()):
                    raise self.error(f"symbol {name}: assumptions must be True or False", line, pcol)
                out[name] = assumptions
            else:
                raise self.error(f"unknown symbol kind '{kind}' ({', '.join(SYMBOL_KINDS)} or {{...}})",
                                 line, pcol + piece.index(kind))
        return out

    def gm_param(self, text: str, col: int, line: _Line) -> GMParam:
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*:\s*gm\s+(\w+)\s*\[(.*)\]", text)
        if not m:
            raise self.error(f"expected 'NAME: gm DTYPE[SHAPE]', got '{text}'", line, col)
        for name in _size_names(m[3]):                 # GM sizes declare their symbols
            self.symbols.setdefault(name, sympy.Symbol(name))
        dtype = self.dtype(m[2], line, col + m.start(2))
        shape = tuple(self.scalar(t, line, c) for t, c in _split_top(m[3], col + m.start(3)))
        return GMParam(m[1], dtype, shape)

    def dtype(self, text: str, line: _Line, col: int) -> DataType:
        try:
            return to_dtype(text)
        except Exception:
            raise self.error(f"unknown dtype '{text}'", line, col) from None

    def tile(self, line: _Line) -> tuple[TileDecl, _Line]:
        cur = _Cursor(self, line)
        cur.expect("tile")
        name = cur.word("the tile's name")
        cur.expect(":")
        space_col = cur.next_col()
        space = cur.word("a memory space")
        if space not in {s.value for s in MemSpace} or space == "gm":
            on_chip = ", ".join(s.value for s in MemSpace if s is not MemSpace.GM)
            cur.error(f"unknown on-chip memory space '{space}' ({on_chip})", space_col)
        dt_col = cur.next_col()
        dtype = self.dtype(cur.word("a dtype"), line, dt_col)
        shape_text, shape_col = cur.bracketed("[")
        shape = tuple(self.int_literal(t, line, c) for t, c in _split_top(shape_text, shape_col))
        if len(shape) != 2:
            cur.error("a tile's shape is [ROWS, COLS]", shape_col)
        layout, addr, valid, buffer = "ND", None, None, None
        if cur.peek("NZ") or cur.peek("DN") or cur.peek("ND"):
            layout = cur.word()
        if cur.peek("@"):
            cur.expect("@")
            addr_col = cur.next_col()
            tok = cur.token("an address")
            try:
                addr = int(tok, 0)
            except ValueError:
                cur.error(f"bad address '{tok}'", addr_col)
        if cur.peek("valid"):
            cur.expect("valid")
            vtext, vcol = cur.bracketed("[")
            valid = tuple(self.scalar(t, line, c) for t, c in _split_top(vtext, vcol))
            if len(valid) != 2:
                cur.error("a tile's valid shape is [ROWS, COLS]", vcol)
        if cur.peek("buffer"):
            cur.expect("buffer")
            buffer = cur.word("the buffer's name")
        cur.done()
        return TileDecl(name, MemSpace(space), dtype, shape, addr, valid, layout, buffer), line

    # ------------------------------------------------------------------ statements
    def stmts(self, indent: int, end: int) -> list:
        out = []
        while self.i < end:
            line = self.lines[self.i]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise self.error("unexpected indentation", line, line.indent)
            out.append(self.stmt(line, end))
        return out

    def nested(self, line: _Line, end: int) -> list:
        self.i += 1
        if self.i >= end or self.lines[self.i].indent <= line.indent:
            raise self.error("expected an indented body", line, line.indent + len(line.text))
        return self.stmts(self.lines[self.i].indent, end)

    def stmt(self, line: _Line, end: int):
        text, loc = line.text, self.loc(line)
        first = _WORD.match(text)
        keyword = first.group() if first else ""
        if keyword == "for":
            return self.for_stmt(line, end, loc)
        if keyword == "if":
            if not text.endswith(":"):
                raise self.error("expected ':' at the end of 'if'", line, line.indent + len(text))
            cond = self.scalar(text[2:-1].strip(), line, line.indent + 2 + (len(text[2:]) - len(text[2:].lstrip())))
            then = self.nested(line, end)
            other = []
            if self.i < end and self.lines[self.i].indent == line.indent and self.lines[self.i].text == "else:":
                other = self.nested(self.lines[self.i], end)
            return If(cond, then, other, loc)
        if keyword == "else":
            raise self.error("'else' without 'if'", line, line.indent)
        self.i += 1
        cur = _Cursor(self, line)
        if keyword in ("set_flag", "wait_flag"):
            cur.word()
            src = self.pipe(cur)
            cur.expect("->")
            dst = self.pipe(cur)
            event = self.numbered(cur, "ev")
            cur.done()
            return (SetFlag if keyword == "set_flag" else WaitFlag)(src, dst, event, loc)
        if keyword == "pipe_barrier":
            cur.word()
            pipe = self.pipe(cur)
            cur.done()
            return PipeBarrier(pipe, loc)
        if keyword in ("ffts_set", "ffts_wait"):
            cur.word()
            pipe = self.pipe(cur)
            flag = self.numbered(cur, "flag")
            cur.done()
            return (CrossCoreSetFlag if keyword == "ffts_set" else CrossCoreWaitFlag)(pipe, flag, loc)
        return self.instruction(cur, loc)

    def pipe(self, cur: _Cursor) -> Pipe:
        col = cur.next_col()
        name = cur.word("a pipe")
        if name not in _PIPES:
            cur.error(f"unknown pipe '{name}' ({', '.join(_PIPES)})", col)
        return _PIPES[name]

    def numbered(self, cur: _Cursor, prefix: str) -> int:
        col = cur.next_col()
        tok = cur.token(f"{prefix}N")
        if not re.fullmatch(rf"{prefix}\d+", tok):
            cur.error(f"expected {prefix}N, got '{tok}'", col)
        return int(tok[len(prefix):])

    def for_stmt(self, line: _Line, end: int, loc) -> For:
        cur = _Cursor(self, line)
        cur.expect("for")
        var = self.symbols[cur.word("the loop variable")]
        cur.expect("in")
        cur.expect("range")
        rtext, rcol = cur.bracketed("(")
        bounds = [self.scalar(t, line, c) for t, c in _split_top(rtext, rcol)]
        if len(bounds) != 3:
            cur.error("expected range(START, STOP, STEP)", rcol)
        attrs = self.attrs(cur) if cur.peek("{") else {}
        cur.expect(":")
        cur.done()
        return For(var, *bounds, self.nested(line, end), attrs, loc)

    def attrs(self, cur: _Cursor) -> dict:
        col = cur.next_col()
        text, _ = cur.bracketed("{")
        return self.value("{" + text + "}", cur.line, col)

    def instruction(self, cur: _Cursor, loc) -> Instr:
        op_col = cur.next_col()
        op = cur.word("an instruction")
        if op not in ISA:
            cur.error(f"unknown instruction '{op}'", op_col)
        text, col = cur.rest()
        attrs, pipe = {}, None
        brace = _top_level_index(text, "{")
        if brace >= 0:
            close = _matching(text, brace)
            if close < 0:
                raise self.error("'{' is not closed", cur.line, col + brace)
            attrs = self.value(text[brace:close + 1], cur.line, col + brace)
            tail = text[close + 1:].strip()
            if tail:
                if tail not in _PIPES:
                    raise self.error(f"unknown pipe '{tail}' ({', '.join(_PIPES)})", cur.line,
                                     col + text.index(tail, close))
                pipe = _PIPES[tail]
            text = text[:brace].rstrip()
        else:
            m = re.search(r"\s([A-Z0-9]+)$", text)
            if m and m[1] in _PIPES and not re.search(r"[-+*/%(\[,]\s*$", text[:m.start()]):
                pipe, text = _PIPES[m[1]], text[:m.start()].rstrip()
        pieces = _split_top(text, col)
        form = ISA[op].form.split(",")
        if len(pieces) != len(form):
            raise self.error(f"{op} takes {len(form)} operands ({ISA[op].form}), got {len(pieces)}",
                             cur.line, col)
        operands = [self.operand(kind, t, c, cur.line) for kind, (t, c) in zip(form, pieces)]
        if pipe is not None:
            return Instr(op, operands, pipe, attrs, loc)
        try:
            return instr(op, operands, self.tiles, attrs, loc)
        except ValueError as e:
            raise self.error(f"{op}: {e}", cur.line, op_col) from None

    def operand(self, kind: str, text: str, col: int, line: _Line):
        if kind == "t":
            if text not in self.tiles:
                raise self.error(f"unknown tile '{text}'", line, col)
            return text
        if kind == "g":
            m = re.fullmatch(r"([A-Za-z_]\w*)\[(.*)\](\s+clipped)?", text)
            if not m:
                raise self.error(f"expected a GM region PARAM[OFFSETS], got '{text}'", line, col)
            if m[1] not in self.gm_params:
                raise self.error(f"unknown GM param '{m[1]}'", line, col)
            offsets = tuple(self.scalar(t, line, c) for t, c in _split_top(m[2], col + m.start(2)))
            if len(offsets) != len(self.gm_params[m[1]].shape):
                raise self.error(f"GM param '{m[1]}' has {len(self.gm_params[m[1]].shape)} dims, "
                                 f"the region gives {len(offsets)} offsets", line, col)
            return GMRegion(m[1], offsets, bool(m[3]))
        return self.scalar(text, line, col)

    # ------------------------------------------------------------------ scalars and values
    def int_literal(self, text: str, line: _Line, col: int) -> int:
        if not re.fullmatch(r"\d+", text):
            raise self.error(f"expected an integer, got '{text}'", line, col)
        return int(text)

    def scalar(self, text: str, line: _Line, col: int):
        """An int or float literal as a Python number, anything else as a sympy expression."""
        if not text:
            raise self.error("expected a scalar", line, col)
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        if re.fullmatch(r"-?(inf|nan)|-?(\d+\.\d*|\.\d+|\d+)(e[-+]?\d+)?", text):
            return float(text)
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as e:
            raise self.error(f"bad expression '{text}': {e.msg}", line, col + (e.offset or 1) - 1) from None
        value = _Expr(self, text, line, col).build(tree)
        if isinstance(value, tuple):
            raise self.error(f"expected a scalar, got the tuple '{text}'", line, col)
        return value

    def value(self, text: str, line: _Line, col: int):
        """An attribute value (see the module docstring)."""
        text = text.strip()
        if not text:
            raise self.error("expected a value", line, col)
        if text[0] in "([{":
            close = _matching(text, 0)
            if close != len(text) - 1:
                raise self.error(f"bad value '{text}'", line, col)
            pieces = _split_top(text[1:-1], col + 1)
            if text[0] == "{":
                out = {}
                for piece, pcol in pieces:
                    key, sep, v = piece.partition("=")
                    if not sep or not _WORD.fullmatch(key.strip()):
                        raise self.error(f"expected KEY=VALUE, got '{piece}'", line, pcol)
                    out[key.strip()] = self.value(v, line, pcol + len(key) + 1)
                return out
            trailing = text[1:-1].rstrip().endswith(",")
            if trailing and pieces and not pieces[-1][0]:
                pieces = pieces[:-1]
            items = [self.value(p, line, c) for p, c in pieces]
            return items if text[0] == "[" else tuple(items)
        if text in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[text]
        if _WORD.fullmatch(text):
            return text
        try:
            v = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            v = None
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            return v
        raise self.error(f"bad value '{text}' (a number, a word, a quoted string, a tuple or a list)", line, col)


_BINARY = {ast.Add: lambda a, b, ev: sympy.Add(a, b, evaluate=ev),
           ast.Sub: lambda a, b, ev: sympy.Add(a, -b, evaluate=ev),
           ast.Mult: lambda a, b, ev: sympy.Mul(a, b, evaluate=ev),
           ast.Div: lambda a, b, ev: sympy.Mul(a, sympy.Pow(b, -1, evaluate=ev), evaluate=ev),
           ast.Pow: lambda a, b, ev: sympy.Pow(a, b, evaluate=ev),
           ast.Mod: lambda a, b, ev: sympy.Mod(a, b, evaluate=ev),
           ast.BitAnd: lambda a, b, ev: sympy.And(a, b, evaluate=ev),
           ast.BitOr: lambda a, b, ev: sympy.Or(a, b, evaluate=ev)}
_COMPARE = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge, ast.Eq: sympy.Eq,
            ast.NotEq: sympy.Ne}
_UNARY = {ast.USub: lambda a, ev: sympy.Mul(-1, a, evaluate=ev), ast.UAdd: lambda a, ev: a,
          ast.Invert: lambda a, ev: sympy.Not(a, evaluate=ev)}


class _Expr:
    """A sympy expression from its text, node by node. Each node is built evaluated, as the compiler
    builds most expressions, unless evaluating changes how it prints (the compiler keeps some
    unevaluated, e.g. a Min of a Min or a comparison of a ceiling): then it is kept as written."""

    def __init__(self, parser: "_Parser", text: str, line: _Line, col: int):
        self.p, self.text, self.line, self.col = parser, text, line, col

    def error(self, msg: str, node) -> BlockTextError:
        return self.p.error(msg, self.line, self.col + node.col_offset)

    def build(self, node):
        segment = ast.get_source_segment(self.text, node)
        hit = self.p.expr_cache.get(segment)
        if hit is None:
            hit = self.p.expr_cache[segment] = self._build(node, segment)
        return hit

    def _build(self, node, segment: str):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return sympy.true if node.value else sympy.false
            if isinstance(node.value, int):
                return sympy.Integer(node.value)
            if isinstance(node.value, float):
                return sympy.Float(ast.get_source_segment(self.text, node))
            raise self.error(f"not a number: {ast.get_source_segment(self.text, node)}", node)
        if isinstance(node, ast.Name):
            if node.id in self.p.symbols:
                return self.p.symbols[node.id]
            if node.id in _CONSTANTS:
                return sympy.sympify(node.id)
            raise self.error(f"unknown name '{node.id}' (not a param, GM size, loop variable or symbols entry)",
                             node)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            make, args = _BINARY[type(node.op)], [self.build(node.left), self.build(node.right)]
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            make, args = _UNARY[type(node.op)], [self.build(node.operand)]
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            rel = _COMPARE[type(node.ops[0])]
            args = [self.build(node.left), self.build(node.comparators[0])]
            make = lambda a, b, ev: rel(a, b, evaluate=ev)
        elif isinstance(node, ast.Tuple):                # a (value, condition) pair of a Piecewise
            return tuple(self.build(e) for e in node.elts)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn = _SYMPY_NAMES.get(node.func.id)
            args = [self.build(a) for a in node.args]
            if isinstance(fn, type) and issubclass(fn, sympy.Basic):
                make = lambda *a: fn(*a[:-1], evaluate=a[-1])
            elif callable(fn) and node.func.id not in self.p.symbols:    # sqrt, root: plain functions
                try:
                    return fn(*args)
                except (TypeError, ValueError) as e:
                    raise self.error(f"bad expression '{segment}': {e}", node) from None
            else:
                raise self.error(f"unknown function '{node.func.id}'", node)
        else:
            raise self.error(f"unsupported expression '{ast.get_source_segment(self.text, node)}'", node)
        try:
            if isinstance(node, ast.Call) and issubclass(fn, MinMaxBase):
                # unevaluated, a Min / Max is the evaluated one when evaluating would not simplify it
                # (same args, ordered the same); evaluating is slow (it compares every pair of args)
                return make(*args, False)
            evaluated, as_written = make(*args, True), make(*args, False)
            return evaluated if str(evaluated) in (segment, str(as_written)) else as_written
        except (TypeError, ValueError) as e:
            raise self.error(f"bad expression '{ast.get_source_segment(self.text, node)}': {e}", node) from None


def _size_names(text: str) -> list[str]:
    """The names in a GM shape that are size symbols (all but the functions called and constants)."""
    return [m.group() for m in _NAME_IN_EXPR.finditer(text)
            if m.group() not in _CONSTANTS and not text[m.end():].lstrip().startswith("(")]


def _top_level_index(text: str, char: str) -> int:
    for i, c, depth in _unquoted(text):
        if c == char and depth == 0:
            return i
    return -1


def parse_kernel(text: str, file: str = "<block ir>") -> Kernel:
    """A kernel from its text (``kernel NAME`` then its blocks); ``file`` names the text in errors."""
    return _Parser(text, file).kernel()


def parse_block(text: str, file: str = "<block ir>") -> Block:
    """One block from its text."""
    p = _Parser(text, file)
    if not p.lines:
        raise p.error("empty text: expected 'block NAME ...'", None, 0, 1)
    block = p.block()
    if p.i < len(p.lines):
        raise p.error("text after the block (use parse_kernel for several blocks)", p.lines[p.i], 0)
    return block

"""Assembly-like text form of Block IR (one instruction per line, pipe and source line in columns).

The text is complete: ``pypto.ir.block_parser`` reads it back into the same Block / Kernel (source
locations keep the file's base name, line and column). A block prints as

    block NAME  core=AIC|AIV  args(P: gm DTYPE[SHAPE], ...)  params(N, ...)      # file.py:line
      symbols  S: KIND, ...                  (only symbols whose assumptions are not the default)
      tile T : SPACE DTYPE[ROWS, COLS] [LAYOUT] [@0xADDR] [valid [R, C]] [buffer B]
      STATEMENTS, indented two spaces per nesting level

A symbol's default kind is ``int>=0`` for a loop variable and ``any`` (a plain sympy symbol) for a
scalar param or a GM size; ``int`` and ``int>0`` are the other kinds. block_idx, block_num and
subblock_idx are the launch symbols of pypto.ir.block. A kernel prints as ``kernel NAME`` and its
blocks, separated by blank lines. The statements' forms are listed in pypto.ir.block_parser.
"""
from __future__ import annotations

import re

import sympy

from .block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CrossCoreSetFlag, CrossCoreWaitFlag, For,
                    GMRegion, If, Instr, Kernel, PipeBarrier, SetFlag, WaitFlag, walk)

LAUNCH_SYMBOLS = {s.name: s for s in (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX)}

# symbol kind name -> the sympy assumptions a symbol of that kind is created with
SYMBOL_KINDS = {"any": {}, "int": {"integer": True}, "int>=0": {"integer": True, "nonnegative": True},
                "int>0": {"integer": True, "positive": True}}
_KIND_OF = {tuple(sorted(sympy.Symbol("k", **kw).assumptions0.items())): name for name, kw in SYMBOL_KINDS.items()}

_BARE_WORD = re.compile(r"[A-Za-z_]\w*")
_CODE_COLUMN = 64      # where the pipe / source-location columns start


def _fmt_shape(shape) -> str:
    return ", ".join(str(d) for d in shape)


def _fmt_operand(o, block: Block | None) -> str:
    """An operand as error messages quote it (a GM region without its ``clipped`` mark)."""
    if isinstance(o, GMRegion):
        return f"{o.param}[{', '.join(str(x) for x in o.offsets)}]"
    return str(o)


def _fmt_text_operand(o) -> str:
    if isinstance(o, GMRegion) and o.clipped:
        return _fmt_operand(o, None) + " clipped"
    return _fmt_operand(o, None)


def fmt_value(v) -> str:
    """An attribute value: bools, None, numbers, strings (bare when they are a word), tuples, lists."""
    if isinstance(v, str):
        return v if _BARE_WORD.fullmatch(v) and v not in ("True", "False", "None") else repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(fmt_value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={fmt_value(x)}" for k, x in v.items()) + "}"
    return repr(v) if isinstance(v, float) else str(v)


def _fmt_attrs(attrs: dict) -> str:
    return (" {" + ", ".join(f"{k}={fmt_value(v)}" for k, v in attrs.items()) + "}") if attrs else ""


def symbol_kind(sym: sympy.Symbol) -> str:
    """The kind name of a symbol's assumptions, or a ``{assumption=value, ...}`` set for any other."""
    kind = _KIND_OF.get(tuple(sorted(sym.assumptions0.items())))
    if kind is not None:
        return kind
    return fmt_value(dict(sorted(sym._assumptions_orig.items())))


def _with_loc(text: str, loc) -> str:
    return f"{text:<{_CODE_COLUMN}}  # {loc}" if loc else text


def _lines(stmts, indent: int):
    pad = "  " * indent
    for s in stmts:
        if isinstance(s, Instr):
            ops = ", ".join(_fmt_text_operand(o) for o in s.operands)
            text = f"{pad}{s.op:<14} {ops}{_fmt_attrs(s.attrs)}"
            line = f"{text:<{_CODE_COLUMN - 6}} {s.pipe.value:<5}"
            yield f"{line}  # {s.loc}" if s.loc else line.rstrip()
        elif isinstance(s, For):
            yield _with_loc(f"{pad}for {s.var} in range({s.start}, {s.stop}, {s.step}){_fmt_attrs(s.attrs)}:", s.loc)
            yield from _lines(s.body, indent + 1)
        elif isinstance(s, If):
            yield _with_loc(f"{pad}if {s.cond}:", s.loc)
            yield from _lines(s.then_body, indent + 1)
            if s.else_body:
                yield f"{pad}else:"
                yield from _lines(s.else_body, indent + 1)
        elif isinstance(s, SetFlag):
            yield _with_loc(f"{pad}{'set_flag':<14} {s.src} -> {s.dst}  ev{s.event}", s.loc)
        elif isinstance(s, WaitFlag):
            yield _with_loc(f"{pad}{'wait_flag':<14} {s.src} -> {s.dst}  ev{s.event}", s.loc)
        elif isinstance(s, PipeBarrier):
            yield _with_loc(f"{pad}{'pipe_barrier':<14} {s.pipe}", s.loc)
        elif isinstance(s, CrossCoreSetFlag):
            yield _with_loc(f"{pad}{'ffts_set':<14} {s.pipe} flag{s.flag}", s.loc)
        elif isinstance(s, CrossCoreWaitFlag):
            yield _with_loc(f"{pad}{'ffts_wait':<14} {s.pipe} flag{s.flag}", s.loc)
        else:
            raise TypeError(f"block printer: not a Block IR statement: {s!r}")


def _free_symbols(x) -> set:
    return set(x.free_symbols) if isinstance(x, sympy.Basic) else set()


def _symbols_to_declare(block: Block) -> list[tuple[str, str]]:
    """(name, kind) of the symbols the header must declare: those whose kind is not their default one,
    and free symbols that no param, GM size or loop declares."""
    defaults: dict = {p: "any" for p in block.scalar_params}
    for g in block.gm_params:
        for d in g.shape:
            defaults.update((s, "any") for s in _free_symbols(d))
    used: set = set()
    for t in block.tiles:
        for v in t.valid or ():
            used |= _free_symbols(v)
    for s in walk(block.body):
        if isinstance(s, For):
            defaults[s.var] = "int>=0"
            used |= _free_symbols(s.start) | _free_symbols(s.stop) | _free_symbols(s.step)
        elif isinstance(s, If):
            used |= _free_symbols(s.cond)
        elif isinstance(s, Instr):
            for o in s.operands:
                for x in (o.offsets if isinstance(o, GMRegion) else (o,)):
                    used |= _free_symbols(x)
    used |= set(defaults)
    out = []
    for sym in sorted(used, key=lambda s: s.name):
        default = defaults.get(sym)
        if default is None and LAUNCH_SYMBOLS.get(sym.name) == sym:
            continue
        kind = symbol_kind(sym)
        if kind != default:
            out.append((sym.name, kind))
    return out


def print_block(block: Block) -> str:
    args = ", ".join(f"{g.name}: gm {g.dtype}[{_fmt_shape(g.shape)}]" for g in block.gm_params)
    params = ", ".join(str(p) for p in block.scalar_params)
    head = f"block {block.name}  core={block.core}  args({args})" + (f"  params({params})" if params else "")
    out = [_with_loc(head, block.loc)]
    declared = _symbols_to_declare(block)
    if declared:
        out.append("  symbols  " + ", ".join(f"{name}: {kind}" for name, kind in declared))
    for t in block.tiles:
        addr = f" @0x{t.addr:05x}" if t.addr is not None else ""
        valid = f"  valid [{_fmt_shape(t.valid)}]" if t.valid is not None else ""
        layout = f" {t.layout}" if t.layout != "ND" else ""
        buffer = f"  buffer {t.buffer}" if t.buffer is not None else ""
        out.append(f"  tile {t.name:<6}: {t.space} {t.dtype}[{_fmt_shape(t.shape)}]{layout}{addr}{valid}{buffer}")
    out.extend(_lines(block.body, 1))
    return "\n".join(out)


def print_kernel(kernel: Kernel) -> str:
    head = _with_loc(f"kernel {kernel.name}", kernel.loc)
    return "\n\n".join([head] + [print_block(b) for b in kernel.blocks])

"""Assembly-like text form of Block IR (one instruction per line, pipe and source line in columns)."""
from __future__ import annotations

from .block import (Block, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion, If, Instr, PipeBarrier,
                    SetFlag, WaitFlag)


def _fmt_shape(shape) -> str:
    return ", ".join(str(d) for d in shape)


def _fmt_operand(o, block: Block) -> str:
    if isinstance(o, GMRegion):
        return f"{o.param}[{', '.join(str(x) for x in o.offsets)}]"
    return str(o)


def _fmt_attrs(attrs: dict) -> str:
    shown = {k: v for k, v in attrs.items() if not k.startswith("_")}
    return (" {" + ", ".join(f"{k}={v}" for k, v in shown.items()) + "}") if shown else ""


def _lines(stmts, block: Block, indent: int):
    pad = "  " * indent
    for s in stmts:
        if isinstance(s, Instr):
            ops = ", ".join(_fmt_operand(o, block) for o in s.operands)
            text = f"{pad}{s.op:<14} {ops}{_fmt_attrs(s.attrs)}"
            loc = f"  # {s.loc}" if s.loc else ""
            yield f"{text:<58} {s.pipe.value:<5}{loc}"
        elif isinstance(s, For):
            yield f"{pad}for {s.var} in range({s.start}, {s.stop}, {s.step}){_fmt_attrs(s.attrs)}:"
            yield from _lines(s.body, block, indent + 1)
        elif isinstance(s, If):
            yield f"{pad}if {s.cond}:"
            yield from _lines(s.then_body, block, indent + 1)
            if s.else_body:
                yield f"{pad}else:"
                yield from _lines(s.else_body, block, indent + 1)
        elif isinstance(s, SetFlag):
            yield f"{pad}{'set_flag':<14} {s.src} -> {s.dst}  ev{s.event}"
        elif isinstance(s, WaitFlag):
            yield f"{pad}{'wait_flag':<14} {s.src} -> {s.dst}  ev{s.event}"
        elif isinstance(s, PipeBarrier):
            yield f"{pad}{'pipe_barrier':<14} {s.pipe}"
        elif isinstance(s, CrossCoreSetFlag):
            yield f"{pad}{'ffts_set':<14} {s.pipe} flag{s.flag}"
        elif isinstance(s, CrossCoreWaitFlag):
            yield f"{pad}{'ffts_wait':<14} {s.pipe} flag{s.flag}"
        else:
            yield f"{pad}{s!r}"


def print_block(block: Block) -> str:
    args = ", ".join(f"{g.name}: gm {g.dtype}[{_fmt_shape(g.shape)}]" for g in block.gm_params)
    params = ", ".join(str(p) for p in block.scalar_params)
    head = f"block {block.name}  core={block.core}  args({args})" + (f"  params({params})" if params else "")
    out = [head]
    for t in block.tiles:
        addr = f" @0x{t.addr:05x}" if t.addr is not None else ""
        valid = f"  valid [{_fmt_shape(t.valid)}]" if t.valid is not None else ""
        layout = f" {t.layout}" if t.layout != "ND" else ""
        out.append(f"  tile {t.name:<6}: {t.space} {t.dtype}[{_fmt_shape(t.shape)}]{layout}{addr}{valid}")
    out.extend(_lines(block.body, block, 1))
    return "\n".join(out)

"""From a kernel function and one launch signature to a Block IR ``Kernel``: parse, check memory,
synchronise (automatic unless the kernel syncs by hand), allocate event ids, link the sections."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from pypto import symbolic
from pypto.ir.block import Block, CoreType, GMParam, Kernel, walk_instrs

from .memory import check_user_addresses
from .parser import Parser
from .values import TensorValue


@dataclass
class CompiledKernel:
    kernel: Kernel
    tensor_params: list            # names, in signature order
    scalar_params: list            # sympy symbols (run-time integer arguments)
    outputs: list                  # tensor params the kernel stores to
    workspaces: list               # Workspace descriptors the launcher allocates
    size_symbols: dict             # symbol name -> (param, dim)
    manual_sync: bool
    marked_loops: list = field(default_factory=list)   # Block IR of each pipelined loop, marked for the pass
    events: dict = field(default_factory=dict)   # pipe pair -> event ids used
    parser: object = None


def compile_kernel(fn, name: str, tensors: dict, scalars: dict, consts: dict, *, machine, tiling_key=None,
                   pipeline=None, auto_sync: bool = True) -> CompiledKernel:
    """tensors: param -> (dtype, shape with ints / size symbols); scalars: param -> sympy symbol;
    consts: param -> compile-time value."""
    bindings = dict(consts)
    for p, (dt, shape) in tensors.items():
        bindings[p] = TensorValue(p, dt, tuple(shape))
    bindings.update(scalars)
    parser = Parser(fn, name, bindings, machine=machine, tiling_key=tiling_key, pipeline=pipeline).parse()

    gm_params = [GMParam(p, dt, tuple(shape)) for p, (dt, shape) in tensors.items()]
    for ws in parser.workspaces:
        gm_params.append(GMParam(ws.param, ws.dtype, (workspace_rows_symbol(ws), ws.cols)))
    blocks = []
    for core in (CoreType.AIC, CoreType.AIV):
        sec = parser.sections.get(core)
        if sec is None:
            continue
        blocks.append(Block(sec.name, core, list(gm_params), [], list(sec.tiles.values()), sec.body,
                            loc=parser.source.span(parser.source.tree).loc))

    for b in blocks:
        check_user_addresses(b, parser.sections[b.core], machine)

    events = {}
    if not parser.manual_sync and auto_sync:
        from .sync import synchronize
        events = synchronize(blocks, parser, machine)
    for b in blocks:
        _strip_private_attrs(b)
        used = _scalar_symbols(b) & set(scalars.values())
        b.scalar_params = [s for s in scalars.values() if s in used]

    outputs = sorted({i.operands[0].param for b in blocks for i in walk_instrs(b.body)
                      if i.op == "TSTORE"} & set(tensors), key=list(tensors).index)
    sizes = {}
    for p, (_, shape) in tensors.items():
        for d, s in enumerate(shape):
            if isinstance(s, sympy.Symbol):
                sizes.setdefault(s.name, (p, d))
    kernel = Kernel(name, blocks, loc=parser.source.span(parser.source.tree).loc)
    return CompiledKernel(kernel, list(tensors), list(scalars.values()), outputs, list(parser.workspaces), sizes,
                          parser.manual_sync, list(parser.marked_loops), events, parser)


def workspace_rows_symbol(ws) -> sympy.Symbol:
    return symbolic.symbol(f"{ws.param}_rows")


def _strip_private_attrs(block: Block) -> None:
    for ins in walk_instrs(block.body):
        for k in [k for k in ins.attrs if k.startswith("_")]:
            del ins.attrs[k]


def _scalar_symbols(block: Block) -> set:
    from pypto.ir.block import For, If, walk
    out = set()
    for s in walk(block.body):
        if isinstance(s, For):
            out |= symbolic.free_symbols(s.start, s.stop, s.step)
        elif isinstance(s, If):
            out |= s.cond.free_symbols
        elif hasattr(s, "operands"):
            for o in s.operands:
                if isinstance(o, sympy.Basic):
                    out |= o.free_symbols
                elif hasattr(o, "offsets"):
                    out |= symbolic.free_symbols(*o.offsets)
    for t in block.tiles:
        if t.valid is not None:
            out |= symbolic.free_symbols(*t.valid)
    return out

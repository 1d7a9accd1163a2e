"""The Tile level's dump (``PYPTO_DUMP=<dir>`` or ``pt.kernel(dump=<dir>)``): one ir/dump.py folder per
compiled program, ``<dir>/<kernel>/<signature>/``, holding the traced tile program, the placed program
as a TileGraph, the Block IR kernel and its C++ exactly as the cpu backend builds it (``TILE_STAGES``)."""
from __future__ import annotations

import weakref

from ..ir.dump import TILE_STAGES, Dump, dump_root, signature_name
from ..runtime.dump_cpp import write_cpp

_DUMPS: dict = {}      # id(program) -> (weakref to it, its Dump)


def program_dump(program, options) -> Dump | None:
    """The dump folder of compiling ``program`` (one per traced program), or None without a dump."""
    root = dump_root(options.get("dump"))
    if root is None:
        return None
    hit = _DUMPS.get(id(program))
    if hit is not None and hit[0]() is program:
        return hit[1]
    entries = [(p.name, p.dtype.name, [d if isinstance(d, int) else None for d in p.shape]) for p in program.params]
    entries += list(options.get("constants", ()))
    dump = Dump.open(root, TILE_STAGES, program.name, "Tile level", program.loc, signature_name(entries))
    _DUMPS[id(program)] = (weakref.ref(program, lambda _, k=id(program): _DUMPS.pop(k, None)), dump)
    return dump


def dump_stage(program, options, stage: str, ir=None, text: str | None = None) -> None:
    dump = program_dump(program, options)
    if dump is not None:
        dump.write(stage, ir, text=text)


def dump_kernel(program, options, kernel, machine) -> None:
    """The compiled kernel's Block IR and its C++ (pypto.codegen, as the cpu backend generates it)."""
    dump = program_dump(program, options)
    if dump is None:
        return
    dump.write("kernel", text=str(kernel))
    write_cpp(dump, [kernel], machine)

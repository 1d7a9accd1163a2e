"""The build directory of a compiled variant: the pipelined loops (``NN_pipeline/marked_loops.txt``: each
``pl.stage`` loop as Block IR marked for the software-pipelining pass), the Block IR, the C++ (``NN_cpp/``: kernels/*.cpp and the
launchers, as the cpu backend builds them) and the build notes (signature, synchronisation, event ids),
named and headed as every pypto dump (pypto/ir/dump.py, ``PRO_STAGES``).

Where: with a dump (the kernel's ``dump=`` option, else ``$PYPTO_DUMP``) the dump scheme's folder
``<dump>/<kernel>/<signature>/`` (one per variant compiled in the process); without one the kernel
cache, ``~/.cache/pypto/pro/<kernel>/<variant hash>/`` (``PYPTO_CACHE_DIR``). Names are made safe
folder names by pypto.sanitize.path_component.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pypto.errors import SourceLoc
from pypto.ir.dump import PRO_STAGES, Dump, dump_root, signature_name
from pypto.runtime.dump_cpp import write_cpp
from pypto.sanitize import path_component

LEVEL = "Professional mode"


def cache_root() -> Path:
    return Path(os.environ.get("PYPTO_CACHE_DIR", Path.home() / ".cache" / "pypto")) / "pro"


def _signature(cache_key) -> str:
    sig, key_values, _machine = cache_key
    entries = []
    for e in sig:
        if len(e) == 3 and e[1] != "const":
            name, dtype, dims = e
            entries.append((name, dtype, [int(d) if str(d).isdigit() else None for d in dims]))
        elif len(e) == 3:
            entries.append((e[0], e[2]))
        else:
            entries.append((e[0], e[1]))
    return signature_name(entries + list(key_values or ()))


def _loc(kernel):
    code = getattr(kernel.fn, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None


def write_build_dir(kernel, compiled, cache_key) -> Path | None:
    try:
        root = dump_root(kernel.dump)
        if root is not None:
            dump = Dump.open(root, PRO_STAGES, kernel.name, LEVEL, _loc(kernel), _signature(cache_key))
        else:
            digest = hashlib.sha1(repr(cache_key).encode()).hexdigest()[:12]
            dump = Dump(cache_root() / path_component(kernel.name) / digest, PRO_STAGES, kernel.name, LEVEL,
                        _loc(kernel), _signature(cache_key))
        if compiled.marked_loops:
            dump.write_file("pipeline", "marked_loops.txt", "\n\n".join(compiled.marked_loops) + "\n")
        dump.write("kernel", text=str(compiled.kernel))
        notes = [f"kernel {compiled.kernel.name}", f"signature {cache_key!r}",
                 f"synchronisation: {'manual (pl.system.*)' if compiled.manual_sync else 'automatic'}"]
        for block, pairs in (compiled.events or {}).items():
            notes.append(f"event ids {block}: " + ", ".join(f"{k}={v}" for k, v in sorted(pairs.items())))
        not_written = write_cpp(dump, [compiled.kernel], kernel.machine)   # codegen gaps never stop a sim run
        if not_written:
            notes.append(f"C++: not written ({not_written})")
        dump.write("build", text="\n".join(notes))
    except OSError:
        return None
    return dump.dir

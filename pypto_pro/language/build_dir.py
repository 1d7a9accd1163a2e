"""The build directory of a compiled variant: Block IR text, the pipeline transform, kernel.cpp.

Root: the kernel's ``dump=`` option, else ``$PYPTO_DUMP/pro``, else ``~/.cache/pypto/pro``; one folder
per kernel and signature: ``<root>/<kernel>/<variant hash>/`` (the kernel's name made a safe folder name
by pypto.sanitize.path_component).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pypto.sanitize import path_component


def build_root(kernel) -> Path:
    if kernel.dump:
        return Path(kernel.dump)
    if os.environ.get("PYPTO_DUMP"):
        return Path(os.environ["PYPTO_DUMP"]) / "pro"
    return Path(os.environ.get("PYPTO_CACHE_DIR", Path.home() / ".cache" / "pypto")) / "pro"


def write_build_dir(kernel, compiled, cache_key) -> Path | None:
    digest = hashlib.sha1(repr(cache_key).encode()).hexdigest()[:12]
    path = build_root(kernel) / path_component(kernel.name) / digest
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / "block_ir.txt").write_text(str(compiled.kernel) + "\n")
        notes = [f"kernel {compiled.kernel.name}", f"signature {cache_key!r}",
                 f"synchronisation: {'manual (pl.system.*)' if compiled.manual_sync else 'automatic'}"]
        for block, pairs in (compiled.events or {}).items():
            notes.append(f"event ids {block}: " + ", ".join(f"{k}={v}" for k, v in sorted(pairs.items())))
        if compiled.pipeline_source:
            (path / "pipeline_generated.py").write_text(compiled.pipeline_source)
        try:
            from pypto.codegen import generate_module
            generate_module([compiled.kernel], kernel.machine).write(path)
            notes.append("kernel.cpp: kernels/*.cpp (pypto.codegen)")
        except ImportError:
            notes.append("kernel.cpp: not written (pypto.codegen is not available)")
        except Exception as e:   # codegen gaps must not stop a sim run; the note says why
            notes.append(f"kernel.cpp: not written ({type(e).__name__}: {e})")
        (path / "README.txt").write_text("\n".join(notes) + "\n")
    except OSError:
        return None
    return path

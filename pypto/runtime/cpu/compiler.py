"""g++ build of generated kernels into a shared library, cached by content hash.

The key covers the generated sources, pypto's CPU headers, the compiler's version, the flags and
the host CPU (the build is -march=native unless PYPTO_CPU_MARCH names another target, e.g. x86-64-v3 for
every AVX2 host). Libraries live in ``$PYPTO_CACHE_DIR/cpu/<key>/`` (default
``~/.cache/pypto``) together with their sources and build log, so a dump of what ran is at hand.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ...errors import BackendUnavailableError, CompileError
from .errors import BuildWarning

INCLUDE_DIR = Path(__file__).resolve().parent / "include"

# Warnings are errors of the code generator: the test suite asserts a build prints none.
CXX_FLAGS = ("-std=c++17", "-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno",
             "-ffp-contract=fast", "-fPIC", "-shared", "-pthread", "-Wall", "-Wextra", "-D__CPU_SIM")
# Every set_flag / wait_flag reads the running core from thread-local storage; in a shared library
# that is a __tls_get_addr call per access unless TLS descriptors are used (x86-64 defaults to the
# older dialect; other targets use descriptors already).
_GCC_ONLY = ("-mtls-dialect=gnu2",)
if platform.machine() in ("x86_64", "AMD64"):
    CXX_FLAGS += _GCC_ONLY


def cxx_flags() -> tuple[str, ...]:
    """CXX_FLAGS with the target of PYPTO_CPU_MARCH (default: native, the host's widest vectors)."""
    march = os.environ.get("PYPTO_CPU_MARCH", "native")
    return tuple(f"-march={march}" if f == "-march=native" else f for f in CXX_FLAGS)


@dataclass
class BuildResult:
    library: Path
    key: str
    cached: bool
    build_s: float
    log: str = ""
    kernels: int = 0          # how many kernels the library holds (set by the caller)


@dataclass
class BuildStats:
    """Process-wide counters: g++ runs, cache hits (disk or memory), seconds spent compiling."""
    builds: int = 0
    cache_hits: int = 0
    build_s: float = 0.0
    per_library: dict = field(default_factory=dict)   # key -> build seconds

    def to_dict(self) -> dict:
        return {"builds": self.builds, "cache_hits": self.cache_hits, "build_s": round(self.build_s, 3)}


STATS = BuildStats()


def compiler() -> str:
    cxx = os.environ.get("PYPTO_CXX") or shutil.which("g++")
    if not cxx:
        raise BackendUnavailableError("the cpu backend needs a C++17 compiler: g++ was not found on PATH",
                                      hint="install g++ (or set PYPTO_CXX)")
    return cxx


def cache_root() -> Path:
    root = os.environ.get("PYPTO_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "pypto"
    return base / "cpu"


@lru_cache(maxsize=None)
def _compiler_identity(cxx: str) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                cpu += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return version + cpu


@lru_cache(maxsize=None)
def _header_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*.hpp")):
        h.update(str(path.relative_to(INCLUDE_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def build_key(files: dict[str, str], flags=None, include_dirs=(INCLUDE_DIR,)) -> str:
    flags = cxx_flags() if flags is None else flags
    cxx = compiler()
    h = hashlib.sha256()
    h.update(_compiler_identity(cxx).encode())
    h.update("\0".join(flags).encode())
    h.update(_header_digest().encode())
    for d in include_dirs:
        h.update(str(d).encode())
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    return h.hexdigest()[:24]


def build(files: dict[str, str], entry: str = "launcher_cpu.cpp", flags=None,
          include_dirs=(INCLUDE_DIR,)) -> BuildResult:
    """Compile ``entry`` of ``files`` (relative path -> text) into a cached shared library.
    A build that warns works, but the warning is a code-generator bug: it is shown once (BuildWarning)."""
    flags = cxx_flags() if flags is None else flags
    if "Free Software Foundation" not in _compiler_identity(compiler()):     # PYPTO_CXX=clang++...
        flags = tuple(f for f in flags if f not in _GCC_ONLY)
    key = build_key(files, flags, include_dirs)
    final = cache_root() / key
    library = final / "lib.so"
    if library.exists():
        STATS.cache_hits += 1
        log = (final / "build.log").read_text() if (final / "build.log").exists() else ""
        return BuildResult(library, key, True, 0.0, log)
    cxx = compiler()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=final.parent))
    try:
        for rel, text in files.items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        cmd = [cxx, *flags, *(f"-I{d}" for d in include_dirs), entry, "-o", "lib.so"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        log = proc.stdout + proc.stderr
        (work / "build.cmd").write_text(" ".join(cmd) + "\n")
        (work / "build.log").write_text(log)
        if proc.returncode != 0:
            raise CompileError(f"g++ failed to build the generated kernels (sources kept in {work}):\n"
                               f"{_first_errors(log)}")
        try:
            os.rename(work, final)
        except OSError:          # another process built the same library meanwhile
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        if work.exists() and not (work / "build.log").exists():
            shutil.rmtree(work, ignore_errors=True)
        raise
    if "warning:" in log:
        warnings.warn(f"the C++ compiler warned while building generated kernels (log: {final / 'build.log'}):\n"
                      f"{_first_errors(log, 12)}", BuildWarning, stacklevel=2)
    STATS.builds += 1
    STATS.build_s += seconds
    STATS.per_library[key] = seconds
    return BuildResult(library, key, False, seconds, log)


def _first_errors(log: str, limit: int = 40) -> str:
    lines = log.splitlines()
    return "\n".join(lines[:limit]) + ("\n..." if len(lines) > limit else "")

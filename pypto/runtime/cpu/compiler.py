"""g++ build of generated kernels into a shared library, cached by content hash: ``build`` compiles a
set of files in one g++ run; ``cached_build`` is the cache entry logic that it and the unit build
(units.py: kernels in parallel translation units, linked) share.

The key covers the generated sources, pypto's CPU headers, the compiler command (PYPTO_CXX, flags
allowed) and its version, the flags and the host CPU (the build is -march=native unless
PYPTO_CPU_MARCH names another target, e.g. x86-64-v3 for every AVX2 host). Libraries live in
``$PYPTO_CACHE_DIR/cpu/<key>/`` (default ``~/.cache/pypto``) together with their sources, build log and
a manifest; a library is used only when it is the one its manifest describes and it carries its key
(``pypto_build_key()``), else it is rebuilt. One process builds a key at a time (a lock file beside
the entry), and the entry is renamed into place whole.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ...errors import BackendUnavailableError, CompileError
from .errors import BuildWarning, LibraryLoadError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"

# Warnings are errors of the code generator: the test suite asserts a build prints none.
CXX_FLAGS = ("-std=c++17", "-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno",
             "-ffp-contract=fast", "-fPIC", "-shared", "-pthread", "-Wall", "-Wextra", "-D__CPU_SIM")
# x86-64: thread-local storage through __tls_get_addr calls, never TLS descriptors (-mtls-dialect=gnu2,
# which newer GCCs may make the default). g++ keeps vector registers live across a descriptor call,
# but glibc's resolver clobbers them on its slow path (glibc bug 31372, fixed in 2.40 and on some
# release branches only), taken at a thread's first access to a dlopen-ed library's TLS. The runtime's
# TLS variables are GNU unique symbols, bound to the first kernel library loaded, so a later library's
# own TLS was first touched inside its kernel: a value held in a register there was lost, and results
# depended on what had run before in the process (tests/runtime/cpu/test_cpu_run_order.py).
_GCC_ONLY = ("-mtls-dialect=gnu",)
if platform.machine() in ("x86_64", "AMD64"):
    CXX_FLAGS += _GCC_ONLY


def cxx_flags() -> tuple[str, ...]:
    """CXX_FLAGS with the target of PYPTO_CPU_MARCH (default: native, the host's widest vectors) and
    the optimisation level of PYPTO_CPU_OPT (default -O3: the runtime unit's; units.kernel_flags lowers it to -O2
    for the kernel units; PYPTO_CPU_OPT=-O1 builds about 2x faster, runs vector code ~4x slower)."""
    march = os.environ.get("PYPTO_CPU_MARCH", "native")
    opt = os.environ.get("PYPTO_CPU_OPT", "").strip() or "-O3"
    if opt not in OPT_LEVELS:
        raise BackendUnavailableError(f"PYPTO_CPU_OPT={opt!r} is not an optimisation level",
                                      hint=f"use one of {', '.join(OPT_LEVELS)}")
    return tuple(f"-march={march}" if f == "-march=native" else opt if f == "-O3" else f for f in CXX_FLAGS)


OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


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


def compiler() -> tuple[str, ...]:
    """The C++ compiler command: PYPTO_CXX split like a shell would ("ccache g++", "g++ -O0"), else g++.
    Words after the first come before pypto's flags on the command line."""
    text = os.environ.get("PYPTO_CXX", "").strip()
    try:
        cxx = tuple(shlex.split(text)) if text else ()
    except ValueError as e:
        raise BackendUnavailableError(f"PYPTO_CXX={text!r} is not a command line: {e}",
                                      hint="quote it as a shell would, e.g. PYPTO_CXX='g++ -O0'") from None
    if not cxx:
        found = shutil.which("g++")
        if not found:
            raise BackendUnavailableError("the cpu backend needs a C++17 compiler: g++ was not found on PATH",
                                          hint="install g++ (or set PYPTO_CXX)")
        return (found,)
    if shutil.which(cxx[0]) is None:
        raise BackendUnavailableError(f"PYPTO_CXX={text!r}: {cxx[0]!r} is not an executable (not found, or "
                                      f"not on PATH)", hint="set PYPTO_CXX to a C++17 compiler, e.g. g++")
    return cxx


def cache_root() -> Path:
    """``$PYPTO_CACHE_DIR/cpu`` (default ``~/.cache/pypto/cpu``), created if missing."""
    root = os.environ.get("PYPTO_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "pypto"
    where = f"PYPTO_CACHE_DIR={root}" if root else str(base)
    hint = "set PYPTO_CACHE_DIR to a folder this user may write (it is created if missing)"
    if base.exists() and not base.is_dir():
        raise BackendUnavailableError(f"the cpu kernel cache needs a folder, but {where} is not a directory",
                                      hint=hint)
    try:
        (base / "cpu").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BackendUnavailableError(f"cannot make the cpu kernel cache in {where}: {e}", hint=hint) from None
    return base / "cpu"


@lru_cache(maxsize=None)
def _compiler_identity(cxx: tuple[str, ...]) -> str:
    try:
        proc = subprocess.run([*cxx, "--version"], capture_output=True, text=True)
    except OSError as e:
        raise BackendUnavailableError(f"cannot run the C++ compiler {shlex.join(cxx)}: {e}",
                                      hint="set PYPTO_CXX to a C++17 compiler, e.g. g++") from None
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip() or "(no output)"
        raise BackendUnavailableError(f"the C++ compiler {shlex.join(cxx)} is not usable: '--version' exited with "
                                      f"status {proc.returncode}:\n{_first_errors(output, 12)}",
                                      hint="set PYPTO_CXX to a C++17 compiler, e.g. g++")
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                cpu += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return "\0".join(cxx) + "\0" + proc.stdout + cpu


@lru_cache(maxsize=None)
def _header_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*.hpp")):
        h.update(str(path.relative_to(INCLUDE_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def build_key(files: dict[str, str], flags=None, include_dirs=(INCLUDE_DIR,)) -> str:
    """The cache key: a hash of the compiler command and version, the host CPU, the flags, pypto's
    headers, the include folders and the sources."""
    flags = cxx_flags() if flags is None else flags
    h = hashlib.sha256()
    h.update(_compiler_identity(compiler()).encode())
    h.update("\0".join(flags).encode())
    h.update(_header_digest().encode())
    for d in include_dirs:
        h.update(str(d).encode())
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    return h.hexdigest()[:24]


# ---------------------------------------------------------------- cache entries
# An entry is the folder <cache root>/<key>/: the sources, build.cmd, build.log, the library
# (lib.<8 hex>.so: a rebuilt library never has the path of one this process may have loaded, which
# dlopen would hand back) and manifest.json, written last: the key, the library's file name and its
# SHA-256, the SHA-256 of every source. A folder is only ever renamed into place complete, so a
# reader sees a whole entry or none; an entry whose manifest does not match is rebuilt.
MANIFEST = "manifest.json"
STAMP_SOURCE = "pypto_build_key.cpp"     # compiled into every library: pypto_build_key() returns the key
_LIBRARY_NAME = re.compile(r"lib\.[0-9a-f]{8}\.so")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified_library(entry: Path, key: str) -> Path | None:
    """The library of cache entry ``entry`` if its manifest is for ``key`` and the library file is
    the one the manifest describes; None for anything else (missing, torn, replaced, garbage)."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        name = manifest["library"]
        if manifest["key"] != key or not isinstance(name, str) or not _LIBRARY_NAME.fullmatch(name):
            return None
        library = entry / name
        return library if _sha256_file(library) == manifest["library_sha256"] else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def _entry_lock(root: Path, key: str):
    """Held while one process builds or replaces the entry of ``key``: the others wait for it and
    then find the entry built (released by the OS if the holder dies)."""
    fd = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    """Move a bad entry (a folder, or a file in its place) out of the way, then delete it."""
    trash = path.with_name(f"{path.name}.bad.{secrets.token_hex(4)}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _cached(entry: Path, library: Path, key: str) -> BuildResult:
    STATS.cache_hits += 1
    try:
        log = (entry / "build.log").read_text()
    except OSError:
        log = ""
    return BuildResult(library, key, True, 0.0, log)


def build(files: dict[str, str], entry: str = "launcher_cpu.cpp", flags=None,
          include_dirs=(INCLUDE_DIR,), distrust: Path | None = None) -> BuildResult:
    """Compile ``entry`` of ``files`` (relative path -> text) into a cached shared library, in one
    g++ run. ``distrust``: a library this cache returned that could not be loaded; its entry is rebuilt.
    A build that warns works, but the warning is a code-generator bug: it is shown once (BuildWarning)."""
    cxx = compiler()
    flags = flags_for(cxx, flags)
    key = build_key(files, flags, include_dirs)
    return cached_build(key, lambda work: _compile(cxx, files, entry, flags, include_dirs, key, work), distrust)


def flags_for(cxx, flags=None) -> tuple[str, ...]:
    """``flags`` (default: cxx_flags()) without the GCC-only ones when ``cxx`` is another compiler."""
    flags = cxx_flags() if flags is None else tuple(flags)
    if not is_gcc(cxx):     # PYPTO_CXX=clang++...
        flags = tuple(f for f in flags if f not in _GCC_ONLY)
    return flags


def is_gcc(cxx) -> bool:
    return "Free Software Foundation" in _compiler_identity(tuple(cxx))


def cached_build(key: str, compile_into, distrust: Path | None = None) -> BuildResult:
    """The library of cache entry ``key``: the cached one when it verifies (and is not ``distrust``),
    else ``compile_into(work)`` -> (log, seconds) builds the entry in a fresh folder (sources, library,
    manifest last), renamed into place whole under the entry's lock."""
    root = cache_root()
    final = root / key
    library = verified_library(final, key)
    if library is not None and library != distrust:
        return _cached(final, library, key)
    with _entry_lock(root, key):
        library = verified_library(final, key)        # built by another process while this one waited
        if library is not None and library != distrust:
            return _cached(final, library, key)
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
        try:
            log, seconds = compile_into(work)
            if final.exists() or final.is_symlink():
                _discard(final)
            os.rename(work, final)
        except BaseException:
            if work.exists() and not (work / "build.log").exists():
                shutil.rmtree(work, ignore_errors=True)
            raise
    library = verified_library(final, key)
    if library is None:
        raise CompileError(f"the cpu kernel cache entry {final} changed while it was being written",
                           hint="another program writes into PYPTO_CACHE_DIR; give pypto a folder of its own")
    if "warning:" in log:
        warnings.warn(f"the C++ compiler warned while building generated kernels (log: {final / 'build.log'}):\n"
                      f"{_first_errors(log, 12)}", BuildWarning, stacklevel=3)
    STATS.builds += 1
    STATS.build_s += seconds
    STATS.per_library[key] = seconds
    return BuildResult(library, key, False, seconds, log)


def stamp_source(key: str) -> str:
    """The source compiled into every library: pypto_build_key() returns its key."""
    return f'extern "C" const char* pypto_build_key() {{ return "{key}"; }}\n'


def library_name() -> str:
    """A fresh library file name (a rebuilt library never has the path of one dlopen may hold)."""
    return f"lib.{secrets.token_hex(4)}.so"


def write_manifest(work: Path, key: str, library: str, sources: dict[str, str]) -> None:
    """The manifest of a complete entry, written last (verified_library reads it)."""
    manifest = {"key": key, "library": library, "library_sha256": _sha256_file(work / library),
                "sources": {rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in sorted(sources.items())}}
    (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def compile_failed(cxx, status: int, log: str, what: str, where: Path) -> CompileError:
    text = _first_errors(log) if log.strip() else "(it printed nothing)"
    return CompileError(f"the C++ compiler ({shlex.join(cxx)}) failed with exit status {status} building {what} "
                        f"(sources and build.cmd kept in {where}):\n{text}",
                        hint=None if log.strip() else "check PYPTO_CXX: a compiler says why it fails")


def run_compiler(cxx, cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise BackendUnavailableError(f"cannot run the C++ compiler {shlex.join(cxx)}: {e}",
                                      hint="set PYPTO_CXX to a C++17 compiler, e.g. g++") from None


def _compile(cxx, files, entry, flags, include_dirs, key, work: Path) -> tuple[str, float]:
    """Write the sources into ``work`` and compile them; the manifest is written last."""
    sources = dict(files)
    sources[STAMP_SOURCE] = stamp_source(key)
    for rel, text in sources.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    name = library_name()
    cmd = [*cxx, *flags, *(f"-I{d}" for d in include_dirs), entry, STAMP_SOURCE, "-o", name]
    t0 = time.perf_counter()
    proc = run_compiler(cxx, cmd, work)
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    (work / "build.cmd").write_text(shlex.join(cmd) + "\n")
    (work / "build.log").write_text(log)
    if proc.returncode != 0 or not (work / name).is_file():
        raise compile_failed(cxx, proc.returncode, log, "the generated kernels", work)
    write_manifest(work, key, name, sources)
    return log, seconds


def build_and_load(files: dict[str, str], load, builder=None, **options):
    """``builder(files, **options)`` (default: ``build``) and ``load(result)`` (which raises
    LibraryLoadError for a library it cannot use); a cached library that cannot be loaded is rebuilt
    once. Returns (result, loaded)."""
    builder = builder or build
    result = builder(files, **options)
    try:
        return result, load(result)
    except LibraryLoadError:
        if not result.cached:
            raise
    result = builder(files, distrust=result.library, **options)
    return result, load(result)


def _first_errors(log: str, limit: int = 40) -> str:
    lines = log.splitlines()
    return "\n".join(lines[:limit]) + ("\n..." if len(lines) > limit else "")

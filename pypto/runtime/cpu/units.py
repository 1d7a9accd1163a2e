"""The cpu backend's build of a module as separate units: one translation unit per kernel
(codegen.GeneratedModule.units; kernels that differ only in their names share one) and one runtime
unit, compiled in parallel into objects and linked into one shared library with the kernels' entry
points (CpuUnit.entries, compiled at the link).

Contract:
- Every unit starts with ``pypto/kernel_unit.hpp`` (``-include``). With g++ that header is
  precompiled once per compiler, flags and header content (``<cache>/pch/<key>/``), in the
  background after the first build's units (``precompiled_header``); a .gch g++ cannot use is a warning
  (-Winvalid-pch), never a silent slow path. A .gch g++ failed to make is recorded in its folder
  (``failed.log``): later builds and processes with that compiler, flags and header skip straight to
  building without one instead of retrying it.
- An object is cached by its content (``<cache>/objects/<key>.o``, the key a hash of the compiler
  command and version, the host CPU, the flags, pypto's headers and the unit's text): a kernel whose
  C++ another module or call already compiled is not compiled again, and the runtime unit is compiled
  once per flags. Objects are written whole (renamed into place); one that does not link is
  recompiled once.
- The library is a cache entry like compiler.build's (``<cache>/<key>/``, manifest, build key
  stamped in), keyed by all its units; its build.log holds every unit's compiler output, cached
  or not, so a warning is never hidden by the cache.
- Units compile on ``jobs()`` processes at once (the CPUs this process may use; PYPTO_BUILD_JOBS
  overrides), with a progress bar ("building N kernels") on a terminal.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ...codegen.launcher import ABI_VERSION
from ...errors import CompileError
from ..progress import progress
from . import compiler
from .calls import CALLS_SOURCE
from .compiler import INCLUDE_DIR, STAMP_SOURCE

UNIT_HEADER = "pypto/kernel_unit.hpp"
RUNTIME_UNIT = "units/pypto_runtime.cpp"
RUNTIME_TEXT = "// The launch runtime's members and TMATMUL's fp32 product, compiled once per build flags\n" \
               "// (cpu_runtime.hpp, pto/cpu/gemm.hpp).\n" \
               "#include <pypto/cpu_runtime_impl.hpp>\n" \
               "#include <pto/cpu/gemm.hpp>\n"
ABI_SOURCE = ABI_VERSION + "\n"
PCH_FAILED = "failed.log"      # in a pch folder: g++ could not make that .gch (its output); never retried


def jobs() -> int:
    """How many compilers run at once: PYPTO_BUILD_JOBS, else the CPUs this process may run on."""
    env = os.environ.get("PYPTO_BUILD_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def build_units(units: dict, flags=None, distrust: Path | None = None) -> compiler.BuildResult:
    """Compile ``units`` (units/<name>.cpp -> codegen.CpuUnit, one kernel each) and the runtime unit
    into one cached library: the kernels joined into about jobs() translation units (``groups``),
    at the kernels' optimisation level (``kernel_flags``); the runtime unit at ``flags`` (TMATMUL's
    fp32 product runs about 2x faster at -O3 than at -O2)."""
    cxx = compiler.compiler()
    flags = compiler.flags_for(cxx, flags)
    plan = {RUNTIME_UNIT: (RUNTIME_TEXT, flags, 0)}
    levels: dict[tuple, dict[str, str]] = {}
    for rel, unit in units.items():
        levels.setdefault(kernel_flags(flags), {})[rel] = unit.text
    total = sum(len(u.text) for u in units.values()) or 1
    for i, (level, texts) in enumerate(sorted(levels.items())):
        share = max(1, round(jobs() * sum(map(len, texts.values())) / total))   # a unit more costs its parse
        for rel, (text, members) in groups(texts, share).items():
            kernels = sum(len(units[m].kernels) for m in members)      # a kernel's vector part counts none
            plan[rel.replace("group", f"group{i}_")] = (text, level, kernels)
    entries = ABI_SOURCE + CALLS_SOURCE + "".join(u.entries for u in units.values())
    key = compiler.build_key({**{rel: " ".join(f) + "\n" + text for rel, (text, f, _) in plan.items()},
                              STAMP_SOURCE: entries}, flags + ("-include", UNIT_HEADER))
    return compiler.cached_build(key, lambda work: _build(cxx, flags, plan, entries, key, work), distrust)


_EARLY: dict[Path, threading.Event] = {}     # runtime objects being compiled ahead (set when done)
_EARLY_LOCK = threading.Lock()


def prepare_runtime(flags=None) -> None:
    """Start compiling the runtime unit of these build flags on a thread of its own, unless its object
    is cached or already under way: the cpu backend calls it when a compilation for it starts
    (backends.compile_graph), so that on a cold cache g++ makes it while Python lowers the program
    on the other CPU, and the build then waits for it instead of compiling it again. Never raises:
    a failure leaves no object, and the build compiles it and reports the error."""
    try:
        cxx = compiler.compiler()
        flags = compiler.flags_for(cxx, flags)
        objects = compiler.cache_root() / "objects"
        objects.mkdir(exist_ok=True)
        u = _Unit(RUNTIME_UNIT, RUNTIME_TEXT, flags, 0, cxx, objects)
    except Exception:       # no compiler, no cache: the build says why
        return
    with _EARLY_LOCK:
        if u.cached or u.object in _EARLY:
            return
        done = _EARLY[u.object] = threading.Event()

    def compile_it():
        try:
            work = Path(tempfile.mkdtemp(prefix="runtime.", dir=objects.parent))
            try:
                (work / "units").mkdir()
                (work / RUNTIME_UNIT).write_text(RUNTIME_TEXT)
                u.cmd = _unit_command(cxx, u, [])
                _compile_one(u, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        except Exception:
            pass
        finally:
            done.set()
            with _EARLY_LOCK:
                _EARLY.pop(u.object, None)

    threading.Thread(target=compile_it, name="pypto-runtime-unit").start()    # not a daemon: no torn file


def _wait_early(u: "_Unit") -> None:
    """Wait for ``u``'s object if prepare_runtime is compiling it; then it is cached (or not, if that failed)."""
    with _EARLY_LOCK:
        done = _EARLY.get(u.object)
    if done is None:
        return
    done.wait()
    if u.object.is_file() and u.log_path.is_file():
        u.cached, u.log = True, u.log_path.read_text()


def kernel_flags(flags: tuple) -> tuple:
    """The flags of a kernel unit: -O2 where the flags say -O3. Its vector loops run as fast and its
    cube program's product is the runtime unit's gemm_f32 (pto/cpu/gemm.hpp), so the kernels run as
    fast (the d=256 block at 2048 tokens: 0.365 s CPU a call with its cube kernels at -O3, 0.369 s at
    -O2) and compile in about 0.6x the time (a flash-attention kernel's cube program: 2.9 s -> 2.6 s,
    its vector program 4.5 s -> 2.3 s). PYPTO_CPU_OPT, when set, is the level of every unit."""
    if os.environ.get("PYPTO_CPU_OPT", "").strip():
        return flags
    return tuple("-O2" if f == "-O3" else f for f in flags)


def groups(units: dict[str, str], n: int) -> dict[str, tuple[str, list[str]]]:
    """``units`` joined into at most ``n`` translation units of about equal text (the largest first,
    each to the smallest group so far): units/group<i>.cpp -> (text, the units it holds). One unit a kernel would share more
    objects between modules, but g++ spends about 1.7x the CPU time on kernels compiled apart
    (their common template code is generated once per unit)."""
    n = max(1, min(n, len(units)))
    bins: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for rel in sorted(units, key=lambda r: (-len(units[r]), r)):
        i = sizes.index(min(sizes))
        bins[i].append(rel)
        sizes[i] += len(units[rel])
    return {f"units/group{i}.cpp": ("\n".join(units[rel] for rel in sorted(b)), sorted(b))
            for i, b in enumerate(bins) if b}


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def _compile_flags(flags) -> list[str]:
    return [f for f in flags if f != "-shared"] + ["-c"]


def _identity(cxx, flags) -> str:
    return _digest(compiler._compiler_identity(tuple(cxx)), "\0".join(flags), compiler._header_digest())


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def precompiled_header(cxx, flags) -> tuple[list[str], str, Path | None]:
    """(-I options that make g++ find the .gch of these flags first, its build log, None) when the
    cache has it, else ([], "", the folder to build it in): the caller starts it in the background
    for later builds (``_warm``) once its own units are compiled, so that on a cold cache a build
    neither waits for it nor shares the CPUs with it (g++ spends longer making it than the 0.3 s a
    unit saves by it, with a few units a build). ([], "", None) for a compiler other than g++, and
    where making this .gch failed before (``failed.log``, by any process)."""
    if not compiler.is_gcc(cxx):
        return [], "", None
    folder = compiler.cache_root() / "pch" / _identity(cxx, flags)
    log_path = folder / "build.log"
    if (folder / f"{UNIT_HEADER}.gch").is_file() and log_path.is_file():
        return [f"-I{folder}"], log_path.read_text(), None
    if (folder / PCH_FAILED).is_file():
        return [], "", None
    return [], "", folder


_WARMING: set[Path] = set()
_WARMING_LOCK = threading.Lock()


def _warm(cxx, flags, folder: Path) -> None:
    """Build the .gch of ``folder`` on a thread of its own at low priority (once per process; a
    process that finds another building it leaves it to that one). Not a daemon: the process
    waits for it at exit rather than leave a half-written file."""
    with _WARMING_LOCK:
        if folder in _WARMING:
            return
        _WARMING.add(folder)
    threading.Thread(target=_build_pch, args=(cxx, flags, folder), name="pypto-pch").start()


def _build_pch(cxx, flags, folder: Path) -> None:
    """Make the .gch of ``folder`` (a failure leaves none, and its output in ``failed.log``: units then
    parse the headers themselves; a cache folder removed meanwhile is no error either)."""
    gch = folder / f"{UNIT_HEADER}.gch"
    tmp = gch.with_name(f".{gch.name}.{os.getpid()}")
    try:
        gch.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder.parent / f"{folder.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)      # else another process builds it
        cmd = [*cxx, *_compile_flags(flags), f"-I{INCLUDE_DIR}", "-x", "c++-header",
               str(INCLUDE_DIR / UNIT_HEADER), "-o", str(tmp)]
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, preexec_fn=_lower_priority)
        (folder / "build.cmd").write_text(shlex.join(cmd) + "\n")
        if proc.returncode == 0 and tmp.is_file():
            os.replace(tmp, gch)
            _atomic_write(folder / "build.log", (proc.stdout + proc.stderr).encode())   # last: the .gch is whole
        else:
            _atomic_write(folder / PCH_FAILED, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}".encode())
    except OSError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
        os.close(fd)


def _lower_priority() -> None:
    try:
        os.nice(10)
    except OSError:
        pass


class _Unit:
    """One translation unit of a build: its text and flags, the key of its object, and what compiling
    it said."""

    def __init__(self, rel: str, text: str, flags: tuple, kernels: int, cxx, objects: Path):
        self.rel, self.text, self.flags, self.kernels = rel, text, flags, kernels
        key = _digest(_identity(cxx, flags), text)
        self.object = objects / f"{key}.o"
        self.log_path = objects / f"{key}.log"
        self.cached = self.object.is_file() and self.log_path.is_file()
        self.log = self.log_path.read_text() if self.cached else ""
        self.cmd: list[str] = []
        self.failed: int | None = None      # the compiler's exit status when it failed


def _build(cxx, flags, plan: dict[str, tuple[str, tuple, int]], entries: str, key: str,
           work: Path) -> tuple[str, float]:
    t0 = time.perf_counter()
    objects = compiler.cache_root() / "objects"
    objects.mkdir(exist_ok=True)
    units = [_Unit(rel, text, unit_flags, kernels, cxx, objects) for rel, (text, unit_flags, kernels) in plan.items()]
    for u in units:
        if not u.cached and u.rel == RUNTIME_UNIT:
            _wait_early(u)
    for u in units:
        path = work / u.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(u.text)
    logs = []
    # a precompiled header per kernel level (the runtime unit alone at a level is not worth one)
    missing_pch = []
    for unit_flags in sorted({u.flags for u in units if not u.cached and u.rel != RUNTIME_UNIT}):
        pch_dirs, pch_log, folder = precompiled_header(cxx, unit_flags)
        logs.append(pch_log)
        if folder is not None:
            missing_pch.append((unit_flags, folder))
        for u in units:
            if u.flags == unit_flags and not u.cached:
                u.cmd = _unit_command(cxx, u, pch_dirs)
    for u in units:
        if not u.cmd:
            u.cmd = _unit_command(cxx, u, [])
    _compile_all(cxx, [u for u in units if not u.cached], work)
    for unit_flags, folder in missing_pch:
        _warm(tuple(cxx), tuple(unit_flags), folder)
    name = compiler.library_name()
    link = [*cxx, *flags, *(str(u.object) for u in units), STAMP_SOURCE, "-o", name]
    (work / STAMP_SOURCE).write_text(compiler.stamp_source(key) + entries)
    proc = compiler.run_compiler(cxx, link, work)
    if proc.returncode != 0 and any(u.cached for u in units):
        stale = [u for u in units if u.cached]              # a cached object that does not link: rebuilt once
        for u in stale:
            u.object.unlink(missing_ok=True)
        _compile_all(cxx, stale, work)
        proc = compiler.run_compiler(cxx, link, work)
    link_log = proc.stdout + proc.stderr
    log = "".join(logs) + "".join(u.log for u in units) + link_log
    (work / "build.cmd").write_text("".join(shlex.join(u.cmd) + "\n" for u in units) + shlex.join(link) + "\n")
    (work / "build.log").write_text(log)
    if proc.returncode != 0 or not (work / name).is_file():
        raise compiler.compile_failed(cxx, proc.returncode, link_log, "(linking) the generated kernels", work)
    sources = {u.rel: u.text for u in units}
    compiler.write_manifest(work, key, name, {**sources, STAMP_SOURCE: (work / STAMP_SOURCE).read_text()})
    return log, time.perf_counter() - t0


def _unit_command(cxx, u: _Unit, pch_dirs: list[str]) -> list[str]:
    return [*cxx, *_compile_flags(u.flags), *pch_dirs, *(["-Winvalid-pch"] if pch_dirs else []),
            f"-I{INCLUDE_DIR}", "-include", UNIT_HEADER, u.rel, "-o", str(u.object)]


def _compile_one(u: _Unit, work: Path) -> _Unit:
    """Run ``u.cmd`` in ``work``: its object renamed into the cache when whole, its log beside it;
    a failure sets ``u.failed`` (raised by the caller's thread: the error names the user's line)."""
    tmp = u.object.with_name(f".{u.object.name}.{os.getpid()}.{id(u)}")
    cmd = [*u.cmd[:-1], str(tmp)]
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    except OSError as e:
        u.failed, u.log = -1, f"cannot run the compiler: {e}"
        return u
    u.log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        u.failed = proc.returncode
        return u
    _atomic_write(u.log_path, u.log.encode())
    os.replace(tmp, u.object)
    return u


def _compile_all(cxx, units: list[_Unit], work: Path) -> None:
    """Compile ``units`` on jobs() processes; each object is renamed into the cache when whole."""
    if not units:
        return
    kernels = sum(u.kernels for u in units)

    def one(u: _Unit) -> _Unit:
        return _compile_one(u, work)

    with progress(total=kernels, desc=f"building {kernels} kernel{'s' if kernels != 1 else ''}",
                  unit="kernel") as bar, ThreadPoolExecutor(max_workers=min(jobs(), len(units))) as pool:
        futures = [pool.submit(one, u) for u in sorted(units, key=lambda u: -len(u.text))]
        try:
            for f in as_completed(futures):
                u = f.result()
                if u.failed is not None:
                    raise compiler.compile_failed(cxx, u.failed, u.log, u.rel, work)
                bar.update(u.kernels)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    if any(not u.object.is_file() for u in units):
        raise CompileError("a compiled kernel object vanished from the cpu kernel cache while it was being built",
                           hint="another program writes into PYPTO_CACHE_DIR; give pypto a folder of its own")

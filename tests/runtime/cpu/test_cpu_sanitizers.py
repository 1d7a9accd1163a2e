"""The examples' kernels (examples/pro, examples/tile, the README's rmsnorm_silu) built with
AddressSanitizer and UndefinedBehaviorSanitizer and run clean, each checked against torch
(examples_on_cpu.py, in a child process: the sanitizer runtime must be loaded before Python).

The sanitizer flags reach every build through the compiler command, PYPTO_CXX="g++ -fsanitize=...",
as a user would set them; the command is part of the cache key, so these builds never mix with
ordinary ones. A sanitizer report aborts the child (-fno-sanitize-recover=all)."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from examples_on_cpu import CASES

SCRIPT = Path(__file__).resolve().parent / "examples_on_cpu.py"
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
# ASan's note that it cannot follow the cpu runtime's fibers (swapcontext) exactly; not a report.
_FIBER_NOTE = "ASan doesn't fully support makecontext/swapcontext"


def _libasan() -> str | None:
    if shutil.which("g++") is None:
        return None
    path = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.isfile(path) else None


def _run_sanitized(tmp_path, cases):
    libasan = _libasan()
    if libasan is None:
        pytest.skip("needs g++ with AddressSanitizer (libasan)")
    env = dict(os.environ, PYPTO_CXX=shlex.join(["g++", *SANITIZE]), LD_PRELOAD=libasan,
               ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1",
               PYPTO_CACHE_DIR=str(tmp_path), PYPTO_CPU_THREADS="2", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(SCRIPT), *cases], env=env, capture_output=True, text=True,
                          timeout=1800)
    report = "\n".join(line for line in proc.stderr.splitlines() if _FIBER_NOTE not in line)
    assert proc.returncode == 0, report[-6000:]
    assert "Sanitizer" not in report and "runtime error" not in report, report[-6000:]
    for case in cases:
        assert f"{case}: matches torch" in proc.stdout, proc.stdout
    builds = list((tmp_path / "cpu").glob("*/build.cmd"))
    assert builds and all("-fsanitize=address,undefined" in p.read_text() for p in builds)


@pytest.mark.slow     # an ASan/UBSan build of the runtime (about a minute); CI's slow step runs it
def test_one_example_under_sanitizers(tmp_path):
    _run_sanitized(tmp_path, ["pro_add"])


@pytest.mark.slow
def test_every_example_under_sanitizers(tmp_path):
    _run_sanitized(tmp_path, list(CASES))

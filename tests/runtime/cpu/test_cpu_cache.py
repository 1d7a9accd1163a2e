"""The cpu backend's kernel cache and compiler set-up (issue 18, item 6): a cache entry is used only
when it is the build of its key (else it is rebuilt, never loaded into a wrong answer or an OSError);
concurrent builders of one key end with one library; PYPTO_CXX and PYPTO_CACHE_DIR mistakes are clear
errors at the user's line."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from pypto.codegen import generate_module
from pypto.errors import BackendUnavailableError, CompileError
from pypto.runtime import cpu
from pypto.runtime.cpu import compiler
from pypto.runtime.cpu.library import KernelLibrary
from pypto.testing import kernels as ck

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _kernel(cols=256):
    """y[4:12] = 2 * x[4:12] over [M, cols]; kernels of other widths have the same name and entry point."""
    return ck.scale_rows(cols=cols)


def _check(kernel, cols=256):
    x = torch.randn(20, cols, generator=torch.Generator().manual_seed(cols))
    out, _ = cpu.run_kernel(kernel, {"x": x, "y": torch.zeros_like(x)}, {"r0": 4, "alpha": 2.0}, threads=1)
    torch.testing.assert_close(out["y"][4:12], 2 * x[4:12], rtol=0, atol=0)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache and a process that has loaded no kernel library yet."""
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path))
    for table in ("_LOADED", "_BY_SOURCE", "_BY_OBJECT"):
        monkeypatch.setattr(cpu, table, {})
    return tmp_path / "cpu"


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    """Cache entries of the 256-column kernel (the one under test) and of a 128-column one, built the
    way a run builds them (the same flags, so the same keys)."""
    root = tmp_path_factory.mktemp("entries")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYPTO_CACHE_DIR", str(root))
        built = {}
        for cols in (256, 128):
            for table in ("_LOADED", "_BY_SOURCE", "_BY_OBJECT"):
                mp.setattr(cpu, table, {})
            built[cols] = cpu.build([_kernel(cols)])[1]
    return {cols: (r.library.parent, r.key) for cols, r in built.items()}


def _manifest(entry: Path) -> dict:
    return json.loads((entry / compiler.MANIFEST).read_text())


def _other_library(entry, other):
    (entry / _manifest(entry)["library"]).write_bytes((other / _manifest(other)["library"]).read_bytes())


def _other_entry(entry, other):
    shutil.rmtree(entry)
    shutil.copytree(other, entry)


def _forged_manifest(entry, other):
    """Another kernel's library with a manifest rewritten to vouch for it: only the key compiled
    into the library tells."""
    _other_library(entry, other)
    manifest = _manifest(entry)
    manifest["library_sha256"] = hashlib.sha256((entry / manifest["library"]).read_bytes()).hexdigest()
    (entry / compiler.MANIFEST).write_text(json.dumps(manifest))


def _truncated(entry, other):
    lib = entry / _manifest(entry)["library"]
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])


def _empty(entry, other):
    (entry / _manifest(entry)["library"]).write_bytes(b"")


def _garbage(entry, other):
    (entry / _manifest(entry)["library"]).write_bytes(os.urandom(4096))


def _folder_for_library(entry, other):
    lib = entry / _manifest(entry)["library"]
    lib.unlink()
    lib.mkdir()


def _file_for_entry(entry, other):
    shutil.rmtree(entry)
    entry.write_text("not a folder")


def _no_manifest(entry, other):
    """An entry of the earlier layout: lib.so and no manifest."""
    (entry / _manifest(entry)["library"]).rename(entry / "lib.so")
    (entry / compiler.MANIFEST).unlink()


def _manifest_garbage(entry, other):
    (entry / compiler.MANIFEST).write_text("{not json")


def _library_outside(entry, other):
    manifest = _manifest(entry)
    manifest["library"] = "../" + manifest["library"]
    (entry / compiler.MANIFEST).write_text(json.dumps(manifest))


DAMAGE = [_other_library, _other_entry, _truncated, _empty, _garbage, _folder_for_library, _file_for_entry,
          _no_manifest, _manifest_garbage, _library_outside]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_entry_is_not_trusted(entries, tmp_path, damage):
    (good, key), (other, _) = entries[256], entries[128]
    entry = tmp_path / key
    shutil.copytree(good, entry)
    assert compiler.verified_library(entry, key) == entry / _manifest(entry)["library"]
    damage(entry, other)
    assert compiler.verified_library(entry, key) is None


@pytest.mark.parametrize("damage", [_other_library, _forged_manifest, _folder_for_library],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_entry_is_rebuilt_and_the_answer_is_right(entries, fresh, damage):
    (good, key), (other, _) = entries[256], entries[128]
    entry = fresh / key
    shutil.copytree(good, entry)
    damage(entry, other)
    builds = compiler.STATS.builds
    _check(_kernel())
    assert compiler.STATS.builds == builds + 1
    assert compiler.verified_library(entry, key) is not None
    # nothing torn left behind (objects/ and pch/ hold what units.py shares between entries)
    assert sorted(p.name for p in fresh.iterdir() if p.name not in ("objects", "pch")) == [key, f"{key}.lock"]
    assert not [p.name for p in (fresh / "objects").iterdir() if p.name.startswith(".")]


def test_an_intact_entry_is_loaded_without_a_build(entries, fresh):
    good, key = entries[256]
    shutil.copytree(good, fresh / key)
    builds = compiler.STATS.builds
    _check(_kernel())
    assert compiler.STATS.builds == builds


_BUILDER = textwrap.dedent("""
    import json, os, sys, time
    import torch
    sys.path[:0] = [{root!r}]
    from pypto.testing import kernels as ck
    from pypto.runtime import cpu
    from pypto.runtime.cpu import compiler
    torch.set_num_threads(1)
    x = torch.randn(20, 256, generator=torch.Generator().manual_seed(int(sys.argv[1])))
    open(sys.argv[2] + ".ready." + sys.argv[1], "w").close()
    while not os.path.exists(sys.argv[2] + ".go"):
        time.sleep(0.005)
    out, _ = cpu.run_kernel(ck.scale_rows(), {{"x": x, "y": torch.zeros_like(x)}}, {{"r0": 4, "alpha": 2.0}},
                            threads=1)
    ok = torch.equal(out["y"][4:12], 2 * x[4:12])
    print(json.dumps({{"ok": ok, "builds": compiler.STATS.builds}}))
""")


@pytest.mark.slow     # three fresh processes importing torch: minutes on a loaded 2-core box; CI's slow step runs it
def test_three_processes_building_one_kernel_at_once(tmp_path):
    script = tmp_path / "builder.py"
    script.write_text(_BUILDER.format(root=str(ROOT)))
    flag = str(tmp_path / "start")
    env = dict(os.environ, PYPTO_CACHE_DIR=str(tmp_path / "cache"), PYPTO_CPU_THREADS="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(i), flag], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    try:
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{flag}.ready.{i}") for i in range(3)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.01)
        Path(f"{flag}.go").touch()
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in results]
    assert all(r["ok"] for r in reports)
    assert sum(r["builds"] for r in reports) == 1, reports       # the others waited and loaded its library
    root = tmp_path / "cache" / "cpu"
    entries = [p for p in root.iterdir() if p.is_dir() and p.name not in ("objects", "pch")]
    assert len(entries) == 1 and compiler.verified_library(entries[0], entries[0].name) is not None
    assert len(list(entries[0].glob("lib.*.so"))) == 1


# ---------------------------------------------------------------- compiler and cache set-up
def _fake_compiler(tmp_path, body: str) -> Path:
    path = tmp_path / "fake-cxx"
    path.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fake 1.0'; exit 0; fi\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_missing_compiler_is_a_clear_error(fresh, monkeypatch):
    monkeypatch.setenv("PYPTO_CXX", "/nonexistent/g++")
    with pytest.raises(BackendUnavailableError, match="'/nonexistent/g\\+\\+' is not an executable") as info:
        _check(_kernel())
    assert info.value.loc.file == __file__


def test_failing_compiler_is_a_clear_error(fresh, monkeypatch):
    monkeypatch.setenv("PYPTO_CXX", "/bin/false")
    with pytest.raises(BackendUnavailableError, match=r"/bin/false is not usable: '--version' exited with status 1"):
        _check(_kernel())


def test_silent_compiler_failure_says_so(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CXX", str(_fake_compiler(tmp_path, "exit 3")))
    with pytest.raises(CompileError, match="failed with exit status 3") as info:
        _check(_kernel())
    assert "(it printed nothing)" in info.value.message and "PYPTO_CXX" in info.value.hint
    assert info.value.loc.file == __file__


def test_compiler_output_is_in_the_error(fresh, tmp_path, monkeypatch):
    fake = _fake_compiler(tmp_path, "echo 'kernel.cpp:1: error: no such thing' >&2\nexit 1")
    monkeypatch.setenv("PYPTO_CXX", str(fake))
    with pytest.raises(CompileError, match="kernel.cpp:1: error: no such thing"):
        _check(_kernel())


def test_compiler_that_writes_no_library_is_an_error(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CXX", str(_fake_compiler(tmp_path, "exit 0")))
    with pytest.raises(CompileError, match="exit status 0"):
        _check(_kernel())


def test_unparsable_compiler_command(fresh, monkeypatch):
    monkeypatch.setenv("PYPTO_CXX", 'g++ "-O0')
    with pytest.raises(BackendUnavailableError, match="is not a command line"):
        _check(_kernel())


def test_compiler_command_with_flags_and_extra_build_flags(fresh, monkeypatch):
    """PYPTO_CXX='g++ -O0' is a command with a flag (its own cache key); build(flags=...) adds flags."""
    files = generate_module([_kernel()]).files
    plain = compiler.build_key(files)
    monkeypatch.setenv("PYPTO_CXX", "g++ -O0")
    assert compiler.build_key(files) != plain
    extra = compiler.cxx_flags() + ("-DPYPTO_CACHE_TEST=1",)
    result = compiler.build(files, flags=extra)
    assert result.key == compiler.build_key(files, extra) and not result.cached
    cmd = (result.library.parent / "build.cmd").read_text()
    assert cmd.startswith(f"g++ -O0 {' '.join(compiler.cxx_flags())}") and "-DPYPTO_CACHE_TEST=1" in cmd
    kernel = _kernel()
    lib = KernelLibrary(result.library, generate_module([kernel]).abis, {kernel.name: kernel}, build_key=result.key)
    x = torch.randn(20, 256)
    graph, tensors = cpu.one_task_graph(kernel, {"x": x, "y": torch.zeros_like(x)}, {"r0": 4, "alpha": 2.0}, 1)
    out, _ = cpu.run_with(cpu.KernelSet({kernel.name: (lib, kernel.name)}), graph, tensors, {}, threads=1)
    torch.testing.assert_close(out["y"][4:12], 2 * x[4:12], rtol=0, atol=0)


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_cache_dir_that_is_not_a_folder(tmp_path, monkeypatch, where):
    target = tmp_path / "a_file"
    target.write_text("")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(target if where == "file" else target / "sub"))
    for table in ("_LOADED", "_BY_SOURCE", "_BY_OBJECT"):
        monkeypatch.setattr(cpu, table, {})
    message = "is not a directory" if where == "file" else "cannot make the cpu kernel cache"
    with pytest.raises(BackendUnavailableError, match=message) as info:
        _check(_kernel())
    assert "PYPTO_CACHE_DIR" in str(info.value) and info.value.loc.file == __file__

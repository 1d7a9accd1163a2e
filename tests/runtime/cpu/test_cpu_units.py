"""The cpu build in units (runtime/cpu/units.py, issue 20 item 3): kernels joined into balanced
translation units compiled in parallel and linked; objects cached by content, so a library rebuilt
from kernels g++ already compiled only links; the precompiled header is made once and then used
(a damaged one is a warning, not a silent slow path); kernels at -O2, the runtime unit at the flags'
level and compiled ahead when a cpu compilation starts; a cube + vector kernel as two units;
the build reports its progress in kernels. Every library built here is run against torch."""
from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from pypto import dtypes
from pypto.codegen import generate_module
from pypto.codegen.module import VECTOR_PART, _body as body_unit, _split_cores as split_cores
from pypto.errors import BackendUnavailableError
from pypto.ir.block import CoreType, Kernel
from pypto.runtime import cpu
from pypto.runtime.cpu import compiler, units
from pypto.runtime.cpu.errors import BuildWarning
from pypto.testing import kernels as ck

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
F32, F16 = dtypes.float32, dtypes.float16


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """An empty cache, a process that has loaded no kernel library, and a g++ that logs each run
    (one line per run: 'compile' for -c, else 'link'; the precompiled header's -x c++-header runs
    are 'pch')."""
    log = tmp_path / "cxx.log"
    wrapper = tmp_path / "g++-counted"
    wrapper.write_text(f"""#!/bin/sh
case " $* " in
  *" --version "*) ;;
  *" c++-header "*) echo pch >> {log} ;;
  *" -c "*) echo compile >> {log} ;;
  *) echo link >> {log} ;;
esac
exec {shutil.which('g++')} "$@"
""")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PYPTO_CXX", str(wrapper))
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYPTO_CPU_OPT", raising=False)
    _forget(monkeypatch)

    def runs():
        return log.read_text().split() if log.exists() else []
    return runs


def _forget(monkeypatch):
    for table in ("_LOADED", "_BY_SOURCE", "_BY_OBJECT"):
        monkeypatch.setattr(cpu, table, {})


def _kernels():
    return [ck.vector_add(F32), ck.softmax_rows(F32), ck.scale_rows()]


def _check_all(kernels, cols=256):
    """Each kernel of the library against torch."""
    vadd, soft, scale = kernels
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(37, cols, generator=g), torch.randn(37, cols, generator=g)
    z = torch.zeros_like(x)
    cpu.run_kernel(vadd, {"x": x, "y": y, "z": z}, block_dim=3, threads=2)
    torch.testing.assert_close(z, x + y, rtol=0, atol=0)
    s = torch.zeros_like(x)
    cpu.run_kernel(soft, {"x": x, "y": s}, block_dim=4, threads=2)
    torch.testing.assert_close(s, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    w = torch.zeros(20, cols)
    xs = torch.randn(20, cols, generator=g)
    cpu.run_kernel(scale, {"x": xs, "y": w}, {"r0": 4, "alpha": 2.0}, threads=1)
    torch.testing.assert_close(w[4:12], 2 * xs[4:12], rtol=0, atol=0)


def _wait_for_pch(timeout=120.0):
    """The precompiled headers this cache's first build started making in the background."""
    deadline = time.monotonic() + timeout
    root = compiler.cache_root()
    for folder in [f for f in units._WARMING if root in f.parents]:
        while not (folder / "build.log").is_file() and not (folder / units.PCH_FAILED).is_file():
            assert time.monotonic() < deadline, f"no precompiled header in {folder}"
            time.sleep(0.1)


def test_groups_are_balanced_and_hold_every_unit_once():
    texts = {f"units/k{i}.cpp": "x" * size for i, size in enumerate([900, 100, 500, 400, 300, 50, 50])}
    for n in (1, 2, 3, 16):
        got = units.groups(texts, n)
        assert len(got) == min(n, len(texts))
        assert sorted(m for _, members in got.values() for m in members) == sorted(texts)
        assert sorted(t for text, _ in got.values() for t in text.split("\n")) == sorted(texts.values())
        sizes = [len(text) for text, _ in got.values()]
        assert max(sizes) <= max(900, sum(map(len, texts.values())) / len(got) + 900)
    assert units.groups(texts, 2) == units.groups(dict(reversed(texts.items())), 2)    # by content, not order


def test_a_library_rebuilt_from_compiled_kernels_only_links(counted, monkeypatch):
    seen = _record_progress(monkeypatch)
    kernels = _kernels()
    _, first = cpu.build(kernels)
    assert not first.cached and first.kernels == 3
    assert counted().count("compile") >= 2 and counted().count("link") == 1     # groups + runtime unit
    assert seen == [{"total": 3, "desc": "building 3 kernels", "unit": "kernel", "done": 3}]
    _check_all(kernels)
    # a new library entry (as another module holding these kernels would make): every object is cached
    shutil.rmtree(first.library.parent)
    _forget(monkeypatch)
    before = counted()
    _, second = cpu.build(_kernels())
    assert not second.cached and second.key == first.key
    new = counted()[len(before):]
    assert new.count("compile") == 0 and new.count("link") == 1, new
    _check_all(_kernels())


def _renamed(kernel, name):
    return Kernel(name, kernel.blocks, loc=kernel.loc)


def test_kernels_that_differ_only_in_their_names_compile_one_body(counted, monkeypatch):
    a = ck.vector_add(F32)
    twin = _renamed(a, "vadd_twin")
    module = generate_module([a, twin, ck.scale_rows()])
    assert sorted(u.kernels for u in module.units.values()) == [("scale_rows",), (a.name, "vadd_twin")]
    assert all(f"pypto_launch_{k}(" in u.entries for u in module.units.values() for k in u.kernels)
    monkeypatch.setenv("PYPTO_BUILD_JOBS", "4")          # one unit per body: the compiles count the bodies
    _, first = cpu.build([a, twin])
    assert counted().count("compile") == 2, counted()     # the one body and the runtime unit
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(37, 256, generator=g), torch.randn(37, 256, generator=g)
    for k in (a, twin):
        z = torch.zeros_like(x)
        cpu.run_kernel(k, {"x": x, "y": y, "z": z}, block_dim=3, threads=2)
        torch.testing.assert_close(z, x + y, rtol=0, atol=0)
    # another module with the same kernel under a third name: its body's object is in the cache
    _forget(monkeypatch)
    before = counted()
    third = _renamed(a, "vadd_third")
    _, second = cpu.build([third])
    assert second.key != first.key
    new = counted()[len(before):]
    assert new.count("compile") == 0 and new.count("link") == 1, new     # (a background 'pch' may run too)
    z = torch.zeros_like(x)
    cpu.run_kernel(third, {"x": x, "y": y, "z": z}, block_dim=2, threads=2)
    torch.testing.assert_close(z, x + y, rtol=0, atol=0)


def test_a_kernel_named_like_a_prefix_of_the_code_it_calls_builds(counted):
    """Only the kernel's own names are replaced by its body's (a name f, T or min is a prefix of float,
    TADD and pypto::min): the three compile as one body, each against torch."""
    a = ck.vector_add(F32)
    kernels = [_renamed(a, name) for name in ("f", "T", "min")]
    assert len(generate_module(kernels).units) == 1
    cpu.build(kernels)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(37, 256, generator=g), torch.randn(37, 256, generator=g)
    for k in kernels:
        z = torch.zeros_like(x)
        cpu.run_kernel(k, {"x": x, "y": y, "z": z}, block_dim=3, threads=2)
        torch.testing.assert_close(z, x + y, rtol=0, atol=0)


def _record_progress(monkeypatch) -> list:
    """The bars units.py opens: their total, description, unit and the updates they got."""
    seen = []

    class Bar:
        def update(self, n=1):
            seen[-1]["done"] += n

    @contextmanager
    def fake_progress(total=None, desc="", unit="it"):
        seen.append({"total": total, "desc": desc, "unit": unit, "done": 0})
        yield Bar()

    monkeypatch.setattr(units, "progress", fake_progress)
    return seen


def _check_scale(kernel, cols):
    g = torch.Generator().manual_seed(cols)
    x, y = torch.randn(20, cols, generator=g), torch.zeros(20, cols)
    cpu.run_kernel(kernel, {"x": x, "y": y}, {"r0": 4, "alpha": 2.0}, threads=1)
    torch.testing.assert_close(y[4:12], 2 * x[4:12], rtol=0, atol=0)


def test_the_precompiled_header_is_made_once_then_used_and_a_damaged_one_warns(counted, monkeypatch):
    cpu.build([ck.scale_rows(cols=256)])
    _wait_for_pch()
    assert counted().count("pch") == 1                       # a vector kernel: one level, one header
    pch = next((Path(compiler.cache_root()) / "pch").glob("*/pypto/kernel_unit.hpp.gch"))
    _forget(monkeypatch)
    kernel = ck.scale_rows(cols=128)
    _, result = cpu.build([kernel])
    cmds = (result.library.parent / "build.cmd").read_text()
    assert f"-I{pch.parent.parent}" in cmds and "-Winvalid-pch" in cmds
    assert "warning" not in result.log.lower() and counted().count("pch") == 1
    _check_scale(kernel, 128)
    pch.write_bytes(b"not a precompiled header")
    _forget(monkeypatch)
    kernel = ck.scale_rows(cols=64)
    with pytest.warns(BuildWarning, match="kernel_unit.hpp.gch"):
        cpu.build([kernel])
    _check_scale(kernel, 64)


def test_a_failed_precompiled_header_is_recorded_and_not_retried(counted, tmp_path, monkeypatch):
    """g++ cannot make the .gch (the wrapper fails its -x c++-header run): the failure is recorded in
    the cache, and a later process with the same compiler, flags and header builds without one
    straight away (no second attempt), its kernels still right."""
    wrapper = Path(units.compiler.compiler()[0])
    wrapper.write_text(wrapper.read_text().replace(
        "exec ", 'case " $* " in *" c++-header "*) echo "bogus pch failure" >&2; exit 1 ;; esac\nexec ', 1))
    cpu.build([ck.scale_rows(cols=256)])
    _wait_for_pch()
    assert counted().count("pch") == 1
    failed = list((Path(compiler.cache_root()) / "pch").glob(f"*/{units.PCH_FAILED}"))
    assert len(failed) == 1 and "bogus pch failure" in failed[0].read_text()
    assert not list((Path(compiler.cache_root()) / "pch").glob("*/pypto/kernel_unit.hpp.gch"))
    # a later process: nothing of this one's in-memory state left
    _forget(monkeypatch)
    monkeypatch.setattr(units, "_WARMING", set())
    started = []
    monkeypatch.setattr(units, "_warm", lambda *a: started.append(a))
    kernel = ck.scale_rows(cols=128)
    _, result = cpu.build([kernel])
    assert started == [] and counted().count("pch") == 1
    assert "-Winvalid-pch" not in (result.library.parent / "build.cmd").read_text()
    _check_scale(kernel, 128)


def test_a_cube_and_vector_kernel_builds_as_two_units(counted):
    """Its cube program (with the entry) and its vector program are two translation units, compiled
    in parallel, linked into a library that is right; a one-core kernel stays one unit."""
    kernel = ck.matmul_relu(F16)
    module = generate_module([kernel, ck.vector_add(F32)])
    assert len(module.units) == 3
    (cube_rel,) = [rel for rel, u in module.units.items() if u.has_cube]
    vector_rel = cube_rel.replace(".cpp", f"{VECTOR_PART}.cpp")
    cube, vector = module.units[cube_rel], module.units[vector_rel]
    assert cube.kernels == (module.abis[kernel.name].ident,) and "pypto_launch_" in cube.text
    assert vector.kernels == () and vector.entries == "" and "pypto_launch_" not in vector.text
    fns = module.abis[kernel.name].block_fns
    aic, aiv = (fns[c] for c in (CoreType.AIC, CoreType.AIV))
    assert f"AICORE inline void {aic}(" in cube.text and f"AICORE void {aiv}(" not in cube.text
    assert f"AICORE void {aiv}(" in vector.text and aic not in vector.text
    # the units alone, warning-free (with -Wshadow, as test_cpu_portability)
    flags = compiler.cxx_flags() + ("-Wshadow",)
    result = units.build_units(module.units, flags=flags)
    assert "warning" not in result.log.lower(), result.log
    a, b = torch.randn(100, 70).half(), torch.randn(70, 130).half()
    c, ws = torch.empty(100, 130, dtype=torch.float16), torch.empty(100, 130)
    cpu.run_kernel(kernel, {"a": a, "b": b, "ws": ws, "c": c}, block_dim=4 * 3)
    torch.testing.assert_close(c.float(), (torch.relu(ck.ref_matmul(a, b)) * 2).half().float(), rtol=2e-3, atol=2e-3)


def test_a_kernel_text_of_another_form_is_not_split():
    kernel = ck.matmul_relu(F16)
    module = generate_module([kernel])
    abi = module.abis[kernel.name]
    _, text = body_unit(abi, module.files[f"kernels/{abi.ident}.cpp"])     # the kernel's whole unit
    assert split_cores(abi, text) is not None
    assert split_cores(abi, text.replace("#endif", "#endif // moved")) is None
    assert split_cores(abi, text.replace("AICORE inline void", "inline void")) is None


def test_the_runtime_unit_compiled_ahead_is_not_compiled_again(counted, monkeypatch):
    """prepare() (a cpu compilation starting) compiles the runtime unit in the background; the build
    waits for it and compiles only its kernels; a second prepare with the object cached runs nothing."""
    monkeypatch.setattr(units, "_warm", lambda *a: None)        # no background precompiled header here
    cpu.prepare()
    kernel = ck.scale_rows(cols=128)
    _, result = cpu.build([kernel])
    assert counted().count("compile") == 2 and counted().count("link") == 1
    assert not units._EARLY
    cpu.prepare()
    assert not units._EARLY and counted().count("compile") == 2
    _check_scale(kernel, 128)


def test_the_first_cpu_compilation_prepares_the_runtime_unit(counted, monkeypatch):
    import pypto
    seen = []
    monkeypatch.setattr(units, "prepare_runtime", lambda flags=None: seen.append(flags))
    f = pypto.jit(lambda x: x * 2.0 + 1.0, backend="cpu")
    x = torch.randn(8, 64)
    torch.testing.assert_close(f(x), x * 2.0 + 1.0)
    assert len(seen) == 1


def test_kernels_build_at_o2_and_the_runtime_unit_at_the_flags_level(monkeypatch):
    monkeypatch.delenv("PYPTO_CPU_OPT", raising=False)
    flags = compiler.cxx_flags()
    assert "-O3" in flags and "-O2" in units.kernel_flags(flags) and "-O3" not in units.kernel_flags(flags)
    module = generate_module([ck.matmul(F16), ck.vector_add(F32)])
    assert sorted(u.has_cube for u in module.units.values()) == [False, True]
    monkeypatch.setenv("PYPTO_CPU_OPT", "-O1")
    assert "-O1" in compiler.cxx_flags() and units.kernel_flags(compiler.cxx_flags()) == compiler.cxx_flags()
    monkeypatch.setenv("PYPTO_CPU_OPT", "-O9")
    with pytest.raises(BackendUnavailableError, match="PYPTO_CPU_OPT"):
        compiler.cxx_flags()


def test_build_jobs(monkeypatch):
    monkeypatch.setenv("PYPTO_BUILD_JOBS", "3")
    assert units.jobs() == 3
    monkeypatch.delenv("PYPTO_BUILD_JOBS")
    assert units.jobs() >= 1

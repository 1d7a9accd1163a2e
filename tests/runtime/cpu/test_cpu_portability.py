"""The cpu backend on x86-64 hosts other than this one (PYPTO_CPU_MARCH): generated C++ builds without a
warning for hosts without AVX-512 (baseline SSE2 and AVX2), with -Wshadow besides -Wall -Wextra, and
kernels built for them give torch's answer."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pypto import dtypes
from pypto.codegen import generate_module
from pypto.runtime.cpu import compiler
from pypto.testing import instructions
from pypto.testing import kernels as ck

# Baseline SSE2 and AVX2 (this host: every other test). AVX2 -- the host CI may have -- runs in the quick suite;
# the rest, full g++ builds of every instruction for another host, run in CI's slow step (.ci/run).
TARGETS = [pytest.param("x86-64", marks=pytest.mark.slow), "x86-64-v3"]


def module_files():
    ks = [ck.matmul_relu(dtypes.float16)]
    for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
        ks += [ck.softmax_rows(dt), ck.rms_norm(dt), ck.matmul(dt), instructions.vector_kernel(dt)[0]]
    return generate_module(ks).files


@pytest.mark.parametrize("march", TARGETS)
def test_build_is_warning_free_on_every_x86_level(march, monkeypatch):
    monkeypatch.setenv("PYPTO_CPU_MARCH", march)
    flags = compiler.cxx_flags() + ("-Wshadow",)
    assert f"-march={march}" in flags
    result = compiler.build(module_files(), flags=flags)
    assert "warning" not in result.log.lower(), result.log


PROGRAMS = textwrap.dedent('''
    import torch, pypto
    import pypto.nn.functional as F

    @pypto.jit(backend="cpu")
    def mm(a: pypto.Tensor[[pypto.DYNAMIC, 96], pypto.float16], b: pypto.Tensor[[96, 72], pypto.float16]):
        return pypto.matmul(a, b)

    @pypto.jit(backend="cpu")
    def norm(x: pypto.Tensor[[pypto.DYNAMIC, 200], pypto.bfloat16], w: pypto.Tensor[[200], pypto.bfloat16]):
        return F.silu(F.rms_norm(x, w, eps=1e-6))

    @pypto.jit(backend="cpu")
    def soft(x: pypto.Tensor[[pypto.DYNAMIC, 130], pypto.float16]):
        return F.softmax(x, dim=-1)

    torch.manual_seed(0)
    for rows in (1, 37, 130):
        a, b = torch.randn(rows, 96, dtype=torch.float16), torch.randn(96, 72, dtype=torch.float16)
        torch.testing.assert_close(mm(a, b).float(), a.float() @ b.float(), rtol=2e-3, atol=2e-2)
        x, w = torch.randn(rows, 200, dtype=torch.bfloat16), torch.randn(200, dtype=torch.bfloat16)
        xf = x.float()
        ref = torch.nn.functional.silu(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
        torch.testing.assert_close(norm(x, w).float(), ref, rtol=2e-2, atol=2e-2)
        s = torch.randn(rows, 130, dtype=torch.float16)
        torch.testing.assert_close(soft(s).float(), torch.softmax(s.float(), -1), rtol=2e-3, atol=1e-3)
    from pypto.runtime.cpu import compiler
    print("builds", compiler.STATS.builds)
''')


@pytest.mark.slow
@pytest.mark.parametrize("march", ["x86-64", "x86-64-v3"])
def test_kernels_built_for_another_host_match_torch(march, tmp_path):
    """A fresh process and cache, so that no kernel built for this host is reused."""
    env = dict(os.environ, PYPTO_CPU_MARCH=march, PYPTO_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", PROGRAMS], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "builds 0" not in proc.stdout
    logs = list(tmp_path.rglob("build.log"))
    assert logs and all("warning" not in p.read_text().lower() for p in logs)
    assert all(f"-march={march}" in p.read_text() for p in tmp_path.rglob("build.cmd"))

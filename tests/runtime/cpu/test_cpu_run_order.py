"""A cpu program's answer does not depend on what ran before it in the process.

Random program 150 of tests/fuzz was wrong (output [7], gelu of the sum of three row maxima, lost
one of them) whenever another cpu program had run first. The runtime's thread-local variables are
GNU unique symbols, bound to the first kernel library loaded, so a later library's own TLS block
(col_reduce's scratch) was first touched inside its kernel; with TLS descriptors
(-mtls-dialect=gnu2) that access is a call glibc's resolver (before glibc bug 31372 was fixed)
returns from with the vector registers clobbered, and g++ had a row maximum in one of them. Kernel
libraries are now built with the __tls_get_addr dialect (pypto/runtime/cpu/compiler.py).
"""
from __future__ import annotations

import platform
import shutil
import subprocess

import pytest
import torch

import pypto
from pypto.runtime import cpu
from pypto.testing import kernels as ck

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 4 - 2).half()


def test_a_program_after_another_program_matches_torch():
    @pypto.jit(backend="cpu")
    def first(a: pypto.Tensor[[4, 8], pypto.float32]):
        return a * 2.0

    # fuzz program 150; its kernel is built here, so its library is loaded after first's
    @pypto.jit(backend="cpu")
    def program(x0: pypto.Tensor[[3, 7], pypto.float16], x1: pypto.Tensor[[7], pypto.float16]):
        v3 = pypto.amax(pypto.relu(x0 / 1.5), -1)
        v5 = (v3 / 1.5).sum(-1, keepdim=True)
        return pypto.concat([x1, pypto.view(pypto.gelu(v5), [1], [0])], 0)

    a = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(first(a), a * 2.0, rtol=0, atol=0)
    x0, x1 = _rand(3, 7, seed=0), _rand(7, seed=1)
    maxima = torch.relu(x0.float() / 1.5).amax(-1) / 1.5
    want = torch.cat([x1.float(), torch.nn.functional.gelu(maxima.sum(-1, keepdim=True))])
    # fp16 rounding of each step: a few ulp at ~1.6; a lost row maximum is off by 0.5
    torch.testing.assert_close(program(x0, x1).float(), want, rtol=2e-3, atol=2e-3)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the x86-64 TLS dialect")
def test_kernel_libraries_use_no_tls_descriptors():
    """Every kernel library reads the runtime's TLS (the running core); through __tls_get_addr (its
    DTPMOD64 / DTPOFF64 relocations), never a descriptor call, whose resolver may clobber the vector
    registers a kernel keeps live across it."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("needs readelf (binutils) to list the library's relocations")
    kernels, _ = cpu.build([ck.scale_rows()])
    library, _ = kernels.entries["scale_rows"]
    relocations = subprocess.run([readelf, "--relocs", "--wide", library.path], capture_output=True,
                                 text=True, check=True).stdout
    assert "R_X86_64_DTPMOD64" in relocations
    assert "TLSDESC" not in relocations, f"{library.path} reaches thread-local storage through TLS descriptors"

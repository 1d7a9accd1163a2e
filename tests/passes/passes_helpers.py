"""Shared helpers for the lowering tests: run a function on the sim backend and on the reference
interpreter and compare, at the tolerances stated per dtype."""
from __future__ import annotations

import torch

import pypto
from pypto.passes.pipeline import lower

# (rtol, atol) per result dtype: fp32 to 1e-6 relative; fp16/bf16 to a few ulps of their precision
TOL = {torch.float32: (1e-6, 1e-6), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def assert_match(out, ref, tol=None):
    if isinstance(ref, (tuple, list)):
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            assert_match(o, r, tol)
        return
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    if not ref.dtype.is_floating_point:
        assert torch.equal(out, ref), (out, ref)
        return
    rtol, atol = tol or TOL[ref.dtype]
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol, equal_nan=True)


def sim_vs_reference(fn, *args, tol=None, **jit_options):
    """Compile ``fn`` for sim and reference, run both on ``args``, compare; returns the sim jit function."""
    sim = pypto.jit(fn, backend="sim", **jit_options)
    ref = pypto.jit(fn, backend="reference")
    sim_args, ref_args = [a.clone() for a in args], [a.clone() for a in args]
    out = sim(*sim_args)
    expected = ref(*ref_args)
    if expected is None:
        assert out is None
    else:
        assert_match(out, expected, tol)
    assert_match(sim_args, ref_args, tol)          # arguments written in place
    return sim


def lowered(fn, *args, verify=True, **kw):
    """The ExecutionGraph of ``fn`` traced on ``args`` (verified between passes)."""
    g = pypto.jit(fn, backend="reference").trace(*args)
    return lower(g, verify=verify, **kw)


def aiv_kernels(eg):
    return [k for k in eg.kernels.values() if any(str(b.core) == "AIV" for b in k.blocks)]


def aic_kernels(eg):
    return [k for k in eg.kernels.values() if any(str(b.core) == "AIC" for b in k.blocks)]


def gm_workspaces(eg):
    return [b for b in eg.buffers.values() if b.role == "workspace"]


def rand(shape, dtype=torch.float32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * (hi - lo) + lo).to(dtype)

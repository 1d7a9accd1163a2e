"""Tile choices of dynamic sizes and of one-step K loops (issue 14: the Tensor-level GDN kernel).

* A dynamic size counts each of its symbols as ``ASSUMED_DYNAMIC`` (tile_choice._est): a flattened
  [T * 2048] is not the size of a lone T, and its vector tiles are not cut to one 128-element tile per core.
* A matmul whose K fits one tile (no K loop to ping-pong) double-buffers its tile loop instead
  (to_blocks.lower_program), tails of the unrolled loop included.
Numbers against torch on sim.
"""
from __future__ import annotations

import pytest
import torch

import pypto
from pypto import symbolic as sym
from pypto.frontend import api as P
from pypto.passes import tile_choice


def test_dynamic_size_estimate_counts_each_symbol():
    T = sym.dynamic("T")
    A = tile_choice.ASSUMED_DYNAMIC
    assert tile_choice._est(2048 * T) == 2048 * A
    assert tile_choice._est(sym.ceildiv(T, 64)) == -(-A // 64)
    assert tile_choice._est(T) == A
    assert tile_choice._est(96) == 96


def scale_rows(x: pypto.Tensor[[pypto.DYNAMIC, 2048], pypto.float32]):
    return x * 2.0 + 1.0


@pytest.mark.parametrize("T", [1, 77, 300])
def test_flattened_dynamic_rows_get_wide_tiles(T):
    f = pypto.jit(scale_rows, backend="sim")
    x = torch.randn(T, 2048, generator=torch.Generator().manual_seed(T))
    torch.testing.assert_close(f(x), x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    (d,) = [d for d in pypto.last_report().decisions.values() if d.get("kind") == "vector"]
    elements = 1
    for v in d["tile"].values():
        elements *= v
    assert elements >= 2048, d["tile"]


def batched_mm(a, b):
    return P.matmul(a, b)


@pytest.mark.parametrize("batch, dtype, tol", [(37, torch.float32, 1e-5), (50, torch.float16, 2e-3),
                                               (25, torch.bfloat16, 1e-2)])
def test_one_step_k_matmul_ping_pongs_its_tiles(batch, dtype, tol):
    """[batch, 64, 64] @ [batch, 64, 128]: K = 64 is one step; batch tiles > cores leave an odd tail."""
    g = torch.Generator().manual_seed(batch)
    a, b = torch.randn(batch, 64, 64, generator=g).to(dtype), torch.randn(batch, 64, 128, generator=g).to(dtype)
    out = pypto.jit(batched_mm, backend="sim")(a, b)
    ref = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol * 8)
    (d,) = [d for d in pypto.last_report().decisions.values() if d.get("kind") == "matmul"]
    steps = -(-64 // d["tile"]["k"])
    if steps == 1 and batch > pypto.load_machine("a2a3").num_aic:
        assert d["pipelining"] == 2, d


def wide_projection(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.bfloat16], w: pypto.Tensor[[256, 64], pypto.bfloat16]):
    import pypto.nn.functional as F
    return F.linear(x, w)


@pytest.mark.parametrize("T", [1, 200])
def test_one_step_k_whose_accumulator_fills_l0c_runs_single_buffered(T):
    """K = 64 is one step; a 128 x 256 fp32 accumulator (bf16 operands) is all of a2a3's L0C, so a second copy does not
    fit: the tile loop stays single-buffered instead of failing in the memory planner (GDN decode's
    projections hit this)."""
    f = pypto.jit(wide_projection, backend="sim", machine="a2a3")
    g = torch.Generator().manual_seed(T)
    x, w = torch.randn(T, 64, generator=g).bfloat16(), torch.randn(256, 64, generator=g).bfloat16()
    torch.testing.assert_close(f(x, w).float(), (x.float() @ w.float().T).bfloat16().float(), rtol=1e-2, atol=1e-2)

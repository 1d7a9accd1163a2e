"""The tile chooser never picks tiles the memory planner cannot place: when its UB estimate is short
(broadcast operands expanded into int64 temps, say), the group is re-tiled smaller or, when its
smallest tiles leave no room for a second copy, runs single-buffered."""
import torch

import pypto
from .passes_helpers import lowered, sim_vs_reference


def causal_softmax(s):
    v = s * 0.125
    L, S = s.shape[-2], s.shape[-1]
    rows = pypto.reshape(pypto.arange(L), L, 1)
    cols = pypto.reshape(pypto.arange(S), 1, S)
    return pypto.cast(pypto.softmax(pypto.where(cols <= rows, v, float("-inf")), -1), pypto.float16)


def test_causal_mask_softmax_over_4096_keys_runs_single_buffered():
    # a whole 4096-wide row of fp32 plus two int64 expansions of the mask: one copy fits, two do not
    x = torch.randn(100, 4096)
    eg = lowered(causal_softmax, x)
    (kernel,) = eg.kernels.values()
    assert "pipeline" not in str(kernel)
    sim_vs_reference(causal_softmax, x)


def test_causal_sdpa_4096_compiles():
    # was: CompileError "block mul_div_2: tiles need 204864 bytes of ub, over its 196608 bytes"
    q = torch.randn(1, 1, 4096, 64, dtype=torch.float16)
    f = pypto.jit(lambda q, k, v: pypto.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                  backend="sim", timing_only=True)
    out = f(q, q, q)
    assert out.shape == q.shape

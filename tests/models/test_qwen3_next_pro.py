"""The Professional-mode chunked gated delta rule (models/qwen3_next/pro_kernels.py) against the
token-by-token oracle ``recurrent_gated_delta_rule_ref`` (fp32 torch, written from the equations),
on the sim and cpu backends.

Relative RMS error (||actual - expected||_2 / ||expected||_2) of outputs and final states: at most 1e-5
for fp32 inputs (every matmul in fp32) and 5e-3 for bf16 inputs (fp16 matmul operands by default,
bf16 ones on request, fp32 accumulation and an fp32 state). Small dims (K = V = 32, H = 1, HV = 2)
keep the runs short; compiling is what costs: about 10 s of pl compilation per kernel configuration
(mostly event-id allocation) plus g++ on the cpu backend, so the extra configurations are marked slow.
"""
import pytest
import torch
import torch.nn.functional as F

import pypto
from models.qwen3_next import GDNArgumentError, chunk_gated_delta_rule
from models.qwen3_next import pro_kernels
from models.qwen3_next.reference import recurrent_gated_delta_rule_ref

from gdn_data import gdn_inputs

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}
DIMS = dict(H=1, HV=2, K=32, V=32)


def rel_err(actual, expected):
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


def check(backend, inputs, tol, **kwargs):
    q, k, v, g, beta, S0 = inputs
    ref_kw = {n: x for n, x in kwargs.items() if n in ("cu_seqlens", "scale")}
    l2 = kwargs.pop("use_qk_l2norm_in_kernel", True)
    o_ref, S_ref = recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                                  use_qk_l2norm_in_kernel=l2, **ref_kw)
    o, S = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                  use_qk_l2norm_in_kernel=l2, backend=backend, impl="pro", **kwargs)
    assert o.dtype == v.dtype and o.shape == v.shape
    assert S.dtype == torch.float32 and S.shape == S_ref.shape
    assert rel_err(o, o_ref) <= tol, f"output {rel_err(o, o_ref):.2e}"
    assert rel_err(S, S_ref) <= tol, f"final state {rel_err(S, S_ref):.2e}"
    return o, S


@pytest.mark.parametrize("backend", ["sim", "cpu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
def test_pro_matches_recurrent_oracle(backend, dtype, T, with_state):
    inputs = gdn_inputs(1, T, DIMS["H"], DIMS["HV"], DIMS["K"], DIMS["V"], dtype, seed=T, with_state=with_state)
    check(backend, inputs, TOL[dtype])


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_pro_batch_and_varlen(backend, monkeypatch):
    # three batch rows (six (row, head) tasks) on four clusters: some run two tasks; odd and even chunk counts
    monkeypatch.setattr(pro_kernels, "block_dim_for", lambda tasks, machine: min(tasks, 4))
    check(backend, gdn_inputs(3, 150, 1, 2, 32, 32, torch.float32, seed=3), 1e-5, scale=0.3)
    check(backend, gdn_inputs(3, 250, 1, 2, 32, 32, torch.float32, seed=9), 1e-5)
    # three packed sequences (one shorter than a chunk, one spanning chunk boundaries)
    inputs = gdn_inputs(1, 150, 1, 2, 32, 32, torch.float32, seed=4, N=3)
    check(backend, inputs, 1e-5, cu_seqlens=torch.tensor([0, 17, 80, 150]))


@pytest.mark.slow            # one more kernel configuration to compile (about 10 s)
def test_pro_without_l2norm_in_kernel():
    q, k, v, g, beta, S0 = gdn_inputs(1, 90, 1, 2, 32, 32, torch.float32, seed=8)
    check("sim", (q, F.normalize(k, dim=-1), v, g, beta, S0), 1e-5, use_qk_l2norm_in_kernel=False)


def test_pro_strong_decay_and_repeated_keys():
    """e^g down to e^-30 (the decay is masked before exp), and identical keys with beta near 1 and no
    decay (the inverse's powers would grow like binomial coefficients; block merging stays exact)."""
    check("sim", gdn_inputs(1, 130, 1, 2, 32, 32, torch.float32, seed=11, decay="strong"), 1e-5)
    q, k, v, g, beta, S0 = gdn_inputs(1, 64, 1, 2, 32, 32, torch.float32, seed=2)
    k = k[:, :1].expand_as(k).contiguous()
    check("sim", (q, k, v, torch.zeros_like(g), torch.full_like(beta, 0.99), S0), 1e-5)


@pytest.mark.slow            # two more kernel configurations to compile
def test_pro_bf16_operands_and_smaller_chunks():
    inputs = gdn_inputs(1, 100, 1, 2, 32, 32, torch.bfloat16, seed=5)
    check("sim", inputs, TOL[torch.bfloat16], cube_dtype=pypto.bfloat16)
    check("sim", gdn_inputs(1, 70, 1, 2, 32, 32, torch.float32, seed=6), 1e-5, chunk_size=16)


def test_impl_selection():
    q, k, v, g, beta, _ = gdn_inputs(1, 8, 1, 2, 32, 48, torch.float32)
    assert pro_kernels.supports(q, k, v, 64) is not None                  # K != V: not the pro path
    with pytest.raises(GDNArgumentError, match="impl='pro' does not support"):
        chunk_gated_delta_rule(q, k, v, g, beta, backend="sim", impl="pro")
    with pytest.raises(GDNArgumentError, match="impl must be"):
        chunk_gated_delta_rule(q, k, v, g, beta, backend="sim", impl="triton")
    q, k, v, g, beta, _ = gdn_inputs(1, 8, 1, 2, 32, 32, torch.float32)
    assert pro_kernels.supports(q, k, v, 64) is None and pro_kernels.supports(q, k, v, 48) is not None

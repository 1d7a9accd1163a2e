"""The phased chunked gated delta rule (models/qwen3_next/prefill_kernels.py: chunk-parallel preparation,
then the state recurrence over V column blocks) against the token-by-token oracle
``recurrent_gated_delta_rule_ref`` (fp32 torch). Relative RMS error of outputs and final states: at most
1e-5 for fp32 inputs and 5e-3 for bf16 inputs (fp16 matmul operands, fp32 accumulation and state).
Small dims (K = V = 32, H = 1, HV = 2: HV/H = 2) keep the runs short."""
import pytest
import torch

from models.qwen3_next import GDNArgumentError
from models.qwen3_next import prefill_kernels as pk
from models.qwen3_next.reference import recurrent_gated_delta_rule_ref

from gdn_data import gdn_inputs

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}


def rel_err(actual, expected):
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


def run(inputs, backend="sim", cu_seqlens=None, v_block=None, scale=None, decay_seed=None):
    q, k, v, g, beta, S0 = inputs
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    scale = K ** -0.5 if scale is None else scale
    ref_kw = {} if cu_seqlens is None else {"cu_seqlens": torch.tensor(cu_seqlens)}
    o_ref, S_ref = recurrent_gated_delta_rule_ref(q, k, v, g, beta, scale=scale, initial_state=S0,
                                                  output_final_state=True, use_qk_l2norm_in_kernel=True, **ref_kw)
    state = S0.clone().float() if S0 is not None else torch.zeros(N, HV, K, V)
    o = torch.zeros_like(v)
    seqs = None if cu_seqlens is None else [(n, cu_seqlens[n], cu_seqlens[n + 1] - cu_seqlens[n]) for n in range(N)]
    pk.chunk_gated_delta_rule_phases(q, k, v, g, beta, scale=scale, state=state, o=o, sequences=seqs,
                                     use_qk_l2norm=True, chunk_size=64, backend=backend, v_block=v_block)
    return rel_err(o, o_ref), rel_err(state, S_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T", [1, 65, 200])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
def test_phases_match_recurrent_oracle(dtype, T, with_state):
    eo, es = run(gdn_inputs(1, T, 1, 2, 32, 32, dtype, seed=T, with_state=with_state))
    assert eo <= TOL[dtype] and es <= TOL[dtype], (eo, es)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_phases_column_blocks_batch_and_strong_decay(dtype):
    # two column blocks of 16 per head, two batch rows (8 state chains), decays down to e^-30 per token
    eo, es = run(gdn_inputs(2, 130, 1, 2, 32, 32, dtype, seed=5, decay="strong"), v_block=16, scale=0.3)
    assert eo <= TOL[dtype] and es <= TOL[dtype], (eo, es)


def test_phases_varlen():
    cu = [0, 70, 71, 200]                              # three sequences: a tail, one token, two chunks + a tail
    eo, es = run(gdn_inputs(1, 200, 1, 2, 32, 32, torch.float32, seed=7, N=3), cu_seqlens=cu)
    assert eo <= 1e-5 and es <= 1e-5, (eo, es)


def test_phases_cpu():
    eo, es = run(gdn_inputs(1, 100, 1, 2, 32, 32, torch.bfloat16, seed=11), backend="cpu", v_block=16)
    assert eo <= 5e-3 and es <= 5e-3, (eo, es)


def test_phases_bad_column_block():
    q, k, v, g, beta, _ = gdn_inputs(1, 8, 1, 2, 32, 32, torch.float32)
    with pytest.raises(GDNArgumentError, match="column block") as info:
        pk.chunk_gated_delta_rule_phases(q, k, v, g, beta, scale=0.1, state=torch.zeros(1, 2, 32, 32),
                                         o=torch.zeros_like(v), sequences=None, use_qk_l2norm=True, chunk_size=64,
                                         backend="sim", v_block=24)
    assert "test_gdn_prefill_phases.py" in str(info.value)

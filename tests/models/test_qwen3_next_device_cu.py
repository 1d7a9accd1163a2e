"""The varlen Gated DeltaNet with cu_seqlens a device tensor (issue 16): ``device_cu_seqlens=True``
makes cu_seqlens an int32 argument of the kernel, whose control program reads every sequence's start
and length (pypto.item) and loops over them; checked against the torch oracle on sim and cpu (chunked
and recurrent rules, fp32 and bf16, an empty sequence, two packings with one compilation)."""
import pytest
import torch

from models.qwen3_next import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from models.qwen3_next.functional import kernel_function
from models.qwen3_next.reference import recurrent_gated_delta_rule_ref

from gdn_data import gdn_inputs

RULES = {"chunk": chunk_gated_delta_rule, "recurrent": fused_recurrent_gated_delta_rule}
TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}


def rel_err(actual, expected):
    return ((actual.float() - expected.float()).norm() / expected.float().norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("backend", ["sim", "cpu"])
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_varlen_gdn_reads_cu_seqlens_on_the_device(backend, rule, dtype):
    # B = 1 packs N = 3 sequences; H = 1 key head, HV = 2 value heads, K = V = 16
    q, k, v, g, beta, S0 = gdn_inputs(1, 70, 1, 2, 16, 16, dtype, seed=11, N=3)
    counts = []
    for cu in ([0, 9, 40, 70], [0, 0, 66, 70]):        # tails of the 64-token chunks; an empty sequence
        cu = torch.tensor(cu, dtype=torch.int32)
        o_ref, S_ref = recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                                      use_qk_l2norm_in_kernel=True, cu_seqlens=cu.long())
        o, S = RULES[rule](q, k, v, g, beta, initial_state=S0, output_final_state=True,
                           use_qk_l2norm_in_kernel=True, cu_seqlens=cu, backend=backend, device_cu_seqlens=True)
        assert o.dtype == v.dtype and S.dtype == torch.float32
        assert rel_err(o, o_ref) <= TOL[dtype] and rel_err(S, S_ref) <= TOL[dtype]
        counts.append(kernel_function(f"{rule}_cu", backend).trace_count)
        if int(cu[1]) == 0:
            assert torch.equal(S[0], S0[0].float())      # an empty sequence keeps its initial state
    assert counts[0] == counts[1]                         # the lengths are data: one compilation

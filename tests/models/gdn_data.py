"""Random Gated DeltaNet inputs shared by the model tests."""
import torch
import torch.nn.functional as F


def gdn_inputs(B, T, H, HV, K, V, dtype, seed=0, N=None, with_state=True, decay="mild"):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, HV, V, generator=gen)
    if decay == "mild":
        g = F.logsigmoid(torch.randn(B, T, HV, generator=gen) + 2.0)
    else:                      # e^g down to e^-30, and tokens without decay
        g = -30.0 * torch.rand(B, T, HV, generator=gen)
        g[:, ::7] = 0.0
    beta = torch.rand(B, T, HV, generator=gen)
    S0 = 0.5 * torch.randn(N or B, HV, K, V, generator=gen) if with_state else None
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    return q, k, v, g, beta, S0

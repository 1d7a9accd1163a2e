"""Tests of the plain-torch Gated DeltaNet oracles in models/qwen3_next/reference.py.

Each oracle is compared with an independent computation written here: a float64 token loop in
the product form S_t = e^{g_t} (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T (the reference
uses the delta form), torch's conv1d, torch.linalg's triangular solve, and a float64 per-head
layer built from un-fused weights that this file packs into the HF layout itself.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from models.qwen3_next.reference import (
    GDNCache,
    Qwen3NextGDNConfig,
    causal_conv1d_ref,
    causal_conv1d_update_ref,
    chunk_gated_delta_rule_ref,
    gated_deltanet_layer_ref,
    hf_weight_shapes,
    make_random_weights,
    recurrent_gated_delta_rule_ref,
    split_projection_weights,
    split_qkvz_ba,
    unit_lower_triangular_inverse,
)

from gdn_data import gdn_inputs as make_gdn_inputs

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}


def rel_err(actual, expected):
    """Relative RMS error ||actual - expected||_2 / ||expected||_2, in float64."""
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


# ----------------------------------------------------------------------------------------------
# Independent float64 oracle of the gated delta rule
# ----------------------------------------------------------------------------------------------

def naive_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, l2norm=False):
    """Token loop in float64, product form, one sequence per batch row. Returns (o, S)."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(K)
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    key_head = torch.tensor([h // (HV // H) for h in range(HV)])
    S = torch.zeros(B, HV, K, V, dtype=torch.float64) if initial_state is None else initial_state.double().clone()
    eye = torch.eye(K, dtype=torch.float64)
    o = torch.zeros(B, T, HV, V, dtype=torch.float64)
    for t in range(T):
        kt, qt = k[:, t, key_head], q[:, t, key_head]                     # [B, HV, K]
        bt = beta[:, t, :, None, None]
        transition = torch.exp(g[:, t])[..., None, None] * (eye - bt * kt[..., :, None] * kt[..., None, :])
        S = transition @ S + bt * kt[..., :, None] * v[:, t, :, None, :]
        o[:, t] = scale * (qt[..., None, :] @ S).squeeze(-2)
    return o, S


RULES = {"recurrent": recurrent_gated_delta_rule_ref, "chunk": chunk_gated_delta_rule_ref}


# ----------------------------------------------------------------------------------------------
# Gated delta rule
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T", [1, 63, 64, 65, 1000])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
def test_rules_match_naive_loop(dtype, T, with_state):
    q, k, v, g, beta, S0 = make_gdn_inputs(2, T, 2, 4, 32, 32, dtype, seed=T, with_state=with_state)
    o_ref, S_ref = naive_gated_delta_rule(q, k, v, g, beta, initial_state=S0, l2norm=True)
    for name, rule in RULES.items():
        o, S = rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert o.dtype == dtype and o.shape == v.shape
        assert S.dtype == torch.float32 and S.shape == (2, 4, 32, 32)
        assert rel_err(o, o_ref) <= TOL[dtype], name
        assert rel_err(S, S_ref) <= TOL[dtype], name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_varlen_three_sequences(dtype):
    cu = torch.tensor([0, 17, 80, 150])                       # lengths 17, 63, 70
    q, k, v, g, beta, S0 = make_gdn_inputs(1, 150, 2, 4, 32, 32, dtype, seed=7, N=3)
    outs, states = [], []
    for n in range(3):
        s, e = int(cu[n]), int(cu[n + 1])
        o_n, S_n = naive_gated_delta_rule(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e],
                                          initial_state=S0[n:n + 1], l2norm=True)
        outs.append(o_n)
        states.append(S_n)
    o_ref, S_ref = torch.cat(outs, dim=1), torch.cat(states, dim=0)
    for name, rule in RULES.items():
        o, S = rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, cu_seqlens=cu,
                    use_qk_l2norm_in_kernel=True)
        assert S.shape == (3, 4, 32, 32)
        assert rel_err(o, o_ref) <= TOL[dtype], name
        assert rel_err(S, S_ref) <= TOL[dtype], name


def test_varlen_equals_separate_calls_and_allows_empty_sequence():
    cu = torch.tensor([0, 5, 5, 40])                           # the middle sequence is empty
    q, k, v, g, beta, S0 = make_gdn_inputs(1, 40, 1, 2, 16, 16, torch.float32, seed=3, N=3)
    o, S = chunk_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                      cu_seqlens=cu, use_qk_l2norm_in_kernel=True, chunk_size=16)
    assert torch.equal(S[1], S0[1])
    o2, S2 = chunk_gated_delta_rule_ref(q[:, 5:], k[:, 5:], v[:, 5:], g[:, 5:], beta[:, 5:],
                                        initial_state=S0[2:], output_final_state=True,
                                        use_qk_l2norm_in_kernel=True, chunk_size=16)
    assert rel_err(o[:, 5:], o2) <= 1e-6 and rel_err(S[2:], S2) <= 1e-6


@pytest.mark.parametrize("H,HV", [(2, 2), (1, 4), (2, 8)])
def test_head_group_ratios(H, HV):
    q, k, v, g, beta, S0 = make_gdn_inputs(1, 70, H, HV, 16, 8, torch.float32, seed=H * 10 + HV)
    o_ref, S_ref = naive_gated_delta_rule(q, k, v, g, beta, initial_state=S0, l2norm=True)
    for name, rule in RULES.items():
        o, S = rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert rel_err(o, o_ref) <= 1e-5 and rel_err(S, S_ref) <= 1e-5, name


@pytest.mark.parametrize("chunk_size", [16, 32, 64, 128])
def test_chunk_sizes(chunk_size):
    q, k, v, g, beta, S0 = make_gdn_inputs(2, 150, 2, 4, 16, 16, torch.float32, seed=chunk_size)
    o_ref, S_ref = recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                                  use_qk_l2norm_in_kernel=True)
    o, S = chunk_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, chunk_size=chunk_size)
    assert rel_err(o, o_ref) <= 1e-5 and rel_err(S, S_ref) <= 1e-5


def test_strong_decay_does_not_overflow():
    q, k, v, g, beta, S0 = make_gdn_inputs(1, 200, 2, 4, 16, 16, torch.float32, seed=11, decay="strong")
    o_ref, S_ref = naive_gated_delta_rule(q, k, v, g, beta, initial_state=S0, l2norm=True)
    for name, rule in RULES.items():
        o, S = rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert torch.isfinite(o).all() and torch.isfinite(S).all(), name
        assert rel_err(o, o_ref) <= 1e-5 and rel_err(S, S_ref) <= 1e-5, name


def test_explicit_scale_without_in_kernel_l2norm():
    q, k, v, g, beta, S0 = make_gdn_inputs(2, 90, 2, 4, 16, 16, torch.float32, seed=5)
    k = F.normalize(k, dim=-1)            # unnormalised keys would make the recurrence unstable
    o_ref, S_ref = naive_gated_delta_rule(q, k, v, g, beta, scale=0.3, initial_state=S0)
    for name, rule in RULES.items():
        o, S = rule(q, k, v, g, beta, scale=0.3, initial_state=S0, output_final_state=True)
        assert rel_err(o, o_ref) <= 1e-5 and rel_err(S, S_ref) <= 1e-5, name


def test_final_state_only_when_asked():
    q, k, v, g, beta, _ = make_gdn_inputs(1, 10, 1, 1, 8, 8, torch.float32, with_state=False)
    for rule in RULES.values():
        assert rule(q, k, v, g, beta)[1] is None


def test_unit_lower_triangular_inverse():
    gen = torch.Generator().manual_seed(0)
    for n, block in [(64, 16), (50, 16), (7, 16), (33, 8)]:
        A = 0.3 * torch.randn(3, n, n, generator=gen, dtype=torch.float64)
        M = torch.eye(n, dtype=torch.float64) + A.tril(-1)
        expected = torch.linalg.solve_triangular(M, torch.eye(n, dtype=torch.float64).expand(3, n, n), upper=False)
        X = unit_lower_triangular_inverse(A, block=block)    # the upper part of A must be ignored
        assert torch.allclose(X, expected, atol=1e-10, rtol=1e-10), (n, block)


@pytest.mark.parametrize("rule", list(RULES.values()), ids=list(RULES))
def test_layout_errors(rule):
    q, k, v, g, beta, S0 = make_gdn_inputs(2, 8, 2, 4, 8, 8, torch.float32)
    with pytest.raises(ValueError, match="multiple of the number of key heads"):
        rule(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3])
    with pytest.raises(ValueError, match="B == 1"):
        rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 4, 8]))
    with pytest.raises(ValueError, match="initial_state"):
        rule(q, k, v, g, beta, initial_state=S0[:1])
    with pytest.raises(ValueError, match="g must be"):
        rule(q, k, v, g[:, :, :2], beta)
    with pytest.raises(ValueError, match="cu_seqlens"):
        rule(q[:1], k[:1], v[:1], g[:1], beta[:1], cu_seqlens=torch.tensor([0, 5, 7]))


# ----------------------------------------------------------------------------------------------
# Causal conv1d
# ----------------------------------------------------------------------------------------------

def torch_conv(x, weight, bias, history=None):
    """SiLU(depthwise conv) via F.conv1d on [B, D, T]; history [B, D, W-1] precedes x."""
    D, W = weight.shape
    xt = x.double().transpose(1, 2)
    if history is None:
        history = torch.zeros(x.shape[0], D, W - 1, dtype=torch.float64)
    xx = torch.cat([history.double(), xt], dim=-1)
    y = F.conv1d(xx, weight.double()[:, None, :], None if bias is None else bias.double(), groups=D)
    return F.silu(y).transpose(1, 2), xx[..., -(W - 1):]


@pytest.mark.parametrize("T", [1, 2, 9])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
def test_causal_conv1d_matches_torch_conv(T, with_state):
    gen = torch.Generator().manual_seed(T)
    B, D, W = 2, 12, 4
    x = torch.randn(B, T, D, generator=gen)
    weight, bias = torch.randn(D, W, generator=gen), torch.randn(D, generator=gen)
    state = torch.randn(B, D, W - 1, generator=gen) if with_state else None
    y_ref, final_ref = torch_conv(x, weight, bias, state)
    y, final = causal_conv1d_ref(x, weight, bias, initial_state=state, output_final_state=True)
    assert y.shape == (B, T, D) and final.shape == (B, D, W - 1)
    assert rel_err(y, y_ref) <= 1e-6 and rel_err(final, final_ref) <= 1e-7
    # no padding trick: explicit left zero-padding through conv1d's own padding argument
    if not with_state:
        y_pad = F.conv1d(x.transpose(1, 2), weight[:, None, :], bias, padding=W - 1, groups=D)[..., :T]
        assert rel_err(y, F.silu(y_pad).transpose(1, 2)) <= 1e-6


def test_causal_conv1d_without_activation_and_dtype():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 6, 4, generator=gen).to(torch.bfloat16)
    weight = torch.randn(4, 3, generator=gen)
    y, final = causal_conv1d_ref(x, weight, activation=None)
    assert y.dtype == torch.bfloat16 and final is None
    y_ref = F.conv1d(x.double().transpose(1, 2), weight.double()[:, None], padding=2, groups=4)[..., :6]
    assert rel_err(y, y_ref.transpose(1, 2)) <= 5e-3
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d_ref(x, weight, activation="gelu")


@pytest.mark.parametrize("state_len", [3, 4], ids=["W-1", "W"])
def test_conv_update_matches_full_conv(state_len):
    gen = torch.Generator().manual_seed(state_len)
    B, T, T0, D, W = 2, 9, 4, 10, 4
    x = torch.randn(B, T, D, generator=gen)
    weight, bias = torch.randn(D, W, generator=gen), torch.randn(D, generator=gen)
    y_full, final_full = causal_conv1d_ref(x, weight, bias, output_final_state=True)
    y0, state = causal_conv1d_ref(x[:, :T0], weight, bias, output_final_state=True)
    conv_state = torch.cat([torch.zeros(B, D, state_len - (W - 1)), state], dim=-1)   # HF keeps W columns
    ys = [y0] + [causal_conv1d_update_ref(x[:, t], conv_state, weight, bias)[:, None] for t in range(T0, T)]
    assert rel_err(torch.cat(ys, dim=1), y_full) <= 1e-6
    assert torch.equal(conv_state[..., -(W - 1):], final_full)
    assert torch.equal(conv_state[..., -1], x[:, -1])


# ----------------------------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------------------------

def unfused_weights(cfg, seed):
    """Per-head float64 weights, and the same packed into HF's grouped layout by this test."""
    gen = torch.Generator().manual_seed(seed)
    H, HV, K, V, W, hid = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                           cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim, cfg.hidden_size)
    r = HV // H

    def rnd(*shape, std=1.0):
        return std * torch.randn(*shape, generator=gen, dtype=torch.float64)

    u = dict(wq=rnd(H, K, hid, std=hid ** -0.5), wk=rnd(H, K, hid, std=hid ** -0.5),
             wv=rnd(HV, V, hid, std=hid ** -0.5), wz=rnd(HV, V, hid, std=hid ** -0.5),
             wb=rnd(HV, hid, std=hid ** -0.5), wa=rnd(HV, hid, std=hid ** -0.5),
             cq=rnd(H, K, W, std=0.5), ck=rnd(H, K, W, std=0.5), cv=rnd(HV, V, W, std=0.5),
             A_log=torch.log(1 + 8 * torch.rand(HV, generator=gen, dtype=torch.float64)),
             dt_bias=rnd(HV, std=0.5), norm=1 + rnd(V, std=0.1), wo=rnd(hid, HV, V, std=(HV * V) ** -0.5))
    qkvz_rows, ba_rows = [], []
    for h in range(H):
        group = range(h * r, (h + 1) * r)
        qkvz_rows += [u["wq"][h], u["wk"][h]] + [u["wv"][j] for j in group] + [u["wz"][j] for j in group]
        ba_rows += [u["wb"][j:j + 1] for j in group] + [u["wa"][j:j + 1] for j in group]
    hf = {
        "in_proj_qkvz.weight": torch.cat(qkvz_rows),
        "in_proj_ba.weight": torch.cat(ba_rows),
        "conv1d.weight": torch.cat([u["cq"].reshape(-1, W), u["ck"].reshape(-1, W), u["cv"].reshape(-1, W)])[:, None],
        "dt_bias": u["dt_bias"], "A_log": u["A_log"], "norm.weight": u["norm"],
        "out_proj.weight": u["wo"].reshape(hid, HV * V),
    }
    return u, {name: t.float() for name, t in hf.items()}


def naive_layer(x, u, cfg):
    """Float64 layer from per-head weights: projections, per-channel causal conv, gates, naive rule."""
    x = x.double()
    B, T, _ = x.shape
    H, HV, W = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_conv_kernel_dim

    def conv_silu(y, cw):  # y [B, T, heads, dim], cw [heads, dim, W]
        out = torch.zeros_like(y)
        for t in range(T):
            for w in range(W):
                s = t - (W - 1) + w
                if s >= 0:
                    out[:, t] += cw[..., w] * y[:, s]
        return F.silu(out)

    q = conv_silu(torch.einsum("hkd,btd->bthk", u["wq"], x), u["cq"])
    k = conv_silu(torch.einsum("hkd,btd->bthk", u["wk"], x), u["ck"])
    v = conv_silu(torch.einsum("hvd,btd->bthv", u["wv"], x), u["cv"])
    z = torch.einsum("hvd,btd->bthv", u["wz"], x)
    b = torch.einsum("hd,btd->bth", u["wb"], x)
    a = torch.einsum("hd,btd->bth", u["wa"], x)
    g = -torch.exp(u["A_log"]) * torch.log1p(torch.exp(a + u["dt_bias"]))
    beta = 1 / (1 + torch.exp(-b))
    o, _ = naive_gated_delta_rule(q, k, v, g, beta, l2norm=True)
    o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * u["norm"] * F.silu(z)
    return torch.einsum("dhv,bthv->btd", u["wo"], o)


def test_layer_matches_naive_per_head_layer():
    cfg = Qwen3NextGDNConfig.small()
    u, hf = unfused_weights(cfg, seed=1)
    x = torch.randn(2, 70, cfg.hidden_size, generator=torch.Generator().manual_seed(2))
    y = gated_deltanet_layer_ref(x, hf, cfg)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y, naive_layer(x, u, cfg)) <= 1e-5


def test_split_helpers_follow_hf_grouped_layout():
    cfg = Qwen3NextGDNConfig(hidden_size=8, linear_num_key_heads=2, linear_num_value_heads=6,
                             linear_key_head_dim=4, linear_value_head_dim=3)
    u, hf = unfused_weights(cfg, seed=4)
    u32 = {name: w.float().double() for name, w in u.items()}      # hf holds u rounded to float32
    x = torch.randn(5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    q, k, v, z, b, a = split_qkvz_ba(x @ hf["in_proj_qkvz.weight"].double().T,
                                     x @ hf["in_proj_ba.weight"].double().T, cfg)
    assert torch.allclose(q, torch.einsum("hkd,nd->nhk", u32["wq"], x))
    assert torch.allclose(k, torch.einsum("hkd,nd->nhk", u32["wk"], x))
    assert torch.allclose(v, torch.einsum("hvd,nd->nhv", u32["wv"], x))
    assert torch.allclose(z, torch.einsum("hvd,nd->nhv", u32["wz"], x))
    assert torch.allclose(b, x @ u32["wb"].T) and torch.allclose(a, x @ u32["wa"].T)
    split = split_projection_weights(hf, cfg)              # hf holds u rounded to float32
    for name in ("wq", "wk", "wv", "wz", "wb", "wa"):
        assert torch.equal(split[name], u[name].float().reshape(split[name].shape)), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_prefill_then_decode_equals_longer_prefill(dtype):
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=dtype, seed=3)
    x = torch.randn(2, 73, cfg.hidden_size, generator=torch.Generator().manual_seed(5)).to(dtype)
    y_full = gated_deltanet_layer_ref(x, weights, cfg)
    cache = GDNCache()
    ys = [gated_deltanet_layer_ref(x[:, :70], weights, cfg, cache=cache)]
    assert cache.conv_state.shape == (2, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1)
    assert cache.recurrent_state.shape == (2, 4, 32, 32) and cache.recurrent_state.dtype == torch.float32
    for t in range(70, 73):
        ys.append(gated_deltanet_layer_ref(x[:, t:t + 1], weights, cfg, cache=cache))
    y = torch.cat(ys, dim=1)
    assert y.dtype == dtype
    assert rel_err(y, y_full) <= TOL[dtype]
    assert rel_err(y[:, 70:], y_full[:, 70:]) <= TOL[dtype]


def test_layer_chunked_continuation_equals_one_prefill():
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, seed=6)
    x = torch.randn(1, 90, cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    cache_a, cache_b = GDNCache(), GDNCache()
    y_full = gated_deltanet_layer_ref(x, weights, cfg, cache=cache_a)
    y1 = gated_deltanet_layer_ref(x[:, :40], weights, cfg, cache=cache_b)
    y2 = gated_deltanet_layer_ref(x[:, 40:], weights, cfg, cache=cache_b)
    assert rel_err(torch.cat([y1, y2], dim=1), y_full) <= 1e-5
    assert rel_err(cache_b.recurrent_state, cache_a.recurrent_state) <= 1e-5
    assert torch.equal(cache_b.conv_state, cache_a.conv_state)


def test_config_and_weight_shapes():
    cfg = Qwen3NextGDNConfig()
    shapes = hf_weight_shapes(cfg)
    assert shapes["in_proj_qkvz.weight"] == (12288, 2048)
    assert shapes["in_proj_ba.weight"] == (64, 2048)
    assert shapes["conv1d.weight"] == (8192, 1, 4)
    assert shapes["out_proj.weight"] == (2048, 4096)
    assert shapes["norm.weight"] == (128,) and shapes["A_log"] == (32,) and shapes["dt_bias"] == (32,)
    small = Qwen3NextGDNConfig.small()
    w = make_random_weights(small, dtype=torch.bfloat16, seed=0)
    assert {n: tuple(t.shape) for n, t in w.items()} == hf_weight_shapes(small)
    assert w["in_proj_qkvz.weight"].dtype == torch.bfloat16 and w["A_log"].dtype == torch.float32
    assert torch.equal(w["out_proj.weight"], make_random_weights(small, dtype=torch.bfloat16, seed=0)["out_proj.weight"])
    assert Qwen3NextGDNConfig.from_hf_config({"hidden_size": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                                              "vocab_size": 10}).linear_num_value_heads == 4
    with pytest.raises(ValueError, match="multiple"):
        Qwen3NextGDNConfig(linear_num_key_heads=16, linear_num_value_heads=24)

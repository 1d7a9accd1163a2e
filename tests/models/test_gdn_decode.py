"""The fused GDN decode kernel (models/qwen3_next/decode_kernel.py): one step of conv update, gates, l2norm and
the recurrent delta rule for B sequences whose states are slots of a pool, against the recurrent oracle of
reference.py (conv update, gates and rule applied to the gathered slots), and the layer's decode path on it."""
import pytest
import torch

from models.qwen3_next import GDNCache, Qwen3NextGatedDeltaNet, Qwen3NextGDNConfig, decode_kernel
from models.qwen3_next.functional import GDNArgumentError
from models.qwen3_next.reference import (causal_conv1d_update_ref, gated_deltanet_layer_ref, gdn_gates,
                                         make_random_weights, recurrent_gated_delta_rule_ref)

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3, torch.float16: 5e-3}


def rel_rms(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def inputs(B, H, HV, K, V, W, slots, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    D = 2 * H * K + HV * V
    x = torch.randn(B, D, generator=gen).to(dtype)
    a = torch.randn(B, HV, generator=gen).to(dtype)
    b = torch.randn(B, HV, generator=gen).to(dtype)
    conv_w = ((torch.rand(D, W, generator=gen) * 2 - 1) / W ** 0.5).to(dtype)
    A_log = torch.log(torch.rand(HV, generator=gen) * 16 + 1e-3)
    dt_bias = torch.randn(HV, generator=gen)
    conv_pool = torch.randn(slots, D, W - 1, generator=gen).to(dtype)
    state_pool = torch.randn(slots, HV, K, V, generator=gen) * 0.1
    idx = torch.randperm(slots, generator=gen)[:B].to(torch.int32)          # a shuffled slot table
    return x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, idx


def oracle(x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, idx, H):
    """o [B, HV, V] and the pools after the step, from the reference pieces on the gathered slots."""
    B = x.shape[0]
    _, HV, K, V = state_pool.shape
    sel = idx.long()
    conv = conv_pool[sel].clone()
    y = causal_conv1d_update_ref(x, conv, conv_w, None, activation="silu")
    q, k, v = y[:, :H * K], y[:, H * K:2 * H * K], y[:, 2 * H * K:]
    g, beta = gdn_gates(a, b, A_log, dt_bias)
    o, S = recurrent_gated_delta_rule_ref(q.reshape(B, 1, H, K), k.reshape(B, 1, H, K), v.reshape(B, 1, HV, V),
                                          g[:, None], beta[:, None], initial_state=state_pool[sel],
                                          output_final_state=True, use_qk_l2norm_in_kernel=True)
    conv_after, state_after = conv_pool.clone(), state_pool.clone()
    conv_after[sel], state_after[sel] = conv, S
    return o[:, 0], conv_after, state_after


def check(B, H, HV, K, V, dtype, backend="sim", W=4, slots=None, seed=0):
    args = inputs(B, H, HV, K, V, W, slots or B + 3, dtype, seed)
    o_ref, conv_ref, state_ref = oracle(*args, H)
    x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, idx = args
    before = state_pool.clone(), conv_pool.clone()
    o = decode_kernel.fused_recurrent_decode(x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, idx,
                                             num_key_heads=H, backend=backend)
    tol = TOL[dtype]
    assert o.dtype == dtype and o.shape == (B, HV, V)
    assert rel_rms(o, o_ref) <= tol
    assert rel_rms(state_pool, state_ref) <= tol          # the slots updated, the others untouched
    assert rel_rms(conv_pool, conv_ref) <= tol
    untouched = [s for s in range(state_pool.shape[0]) if s not in idx.tolist()]
    assert torch.equal(state_pool[untouched], before[0][untouched])
    assert torch.equal(conv_pool[untouched], before[1][untouched])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("B", [1, 3, 32])
def test_small_heads_against_the_oracle(B, dtype):
    check(B, H=2, HV=4, K=32, V=32, dtype=dtype)      # HV/H = 2; B=32: 4 launches of 8 sequences (every slot scalar)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_default_head_dims(dtype):
    check(3, H=2, HV=4, K=128, V=128, dtype=dtype, seed=1)    # Qwen3-Next's K = V = 128: 4 column blocks


def test_fp16():
    check(3, H=2, HV=4, K=32, V=32, dtype=torch.float16, seed=4)


def test_unequal_dims_and_a_short_conv():
    check(3, H=1, HV=2, K=48, V=16, dtype=torch.float32, W=2, seed=2)


def test_cpu():
    check(3, H=2, HV=4, K=32, V=64, dtype=torch.bfloat16, backend="cpu", seed=3)


def test_index_out_of_range_is_a_clear_error():
    x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, idx = inputs(2, 1, 2, 16, 16, 4, 3, torch.float32)
    for bad, what in ((torch.tensor([0, 3], dtype=torch.int32), "state_indices\\[1\\] = 3 is outside"),
                      (torch.tensor([-1, 0], dtype=torch.int32), "state_indices\\[0\\] = -1 is outside"),
                      (torch.tensor([1, 1], dtype=torch.int32), "name a slot twice")):
        with pytest.raises(GDNArgumentError, match=what) as e:
            decode_kernel.fused_recurrent_decode(x, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, bad,
                                                 num_key_heads=1)
        assert e.value.loc.file == __file__


# ----------------------------------------------------------------------------------------------
def _layer(dtype, backend, **kw):
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=dtype, seed=3)
    return cfg, weights, Qwen3NextGatedDeltaNet.from_hf(cfg, weights, **kw).compile(backend=backend)


@pytest.mark.parametrize("backend", ["sim", "reference"])
def test_layer_decodes_slots_of_a_pool(backend):
    """layer(x, cache, state_indices): the fused kernel on sim (the Tensor-level rule on the gathered slots on
    the reference backend, which says why) against the plain-torch layer on the same slots."""
    dtype = torch.bfloat16
    cfg, weights, layer = _layer(dtype, backend)
    gen = torch.Generator().manual_seed(4)
    slots = 6
    conv = torch.randn(slots, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1, generator=gen).to(dtype)
    state = torch.randn(slots, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                        generator=gen) * 0.1
    idx = torch.tensor([5, 0, 3], dtype=torch.int32)
    cache = GDNCache(conv.clone(), state.clone())
    ref = GDNCache(conv[idx.long()].clone(), state[idx.long()].clone())
    for step in range(2):
        x = torch.randn(3, 1, cfg.hidden_size, generator=gen).to(dtype)
        y = layer(x, cache, state_indices=idx)
        y_ref = gated_deltanet_layer_ref(x, weights, cfg, cache=ref)
        assert rel_rms(y, y_ref) <= TOL[dtype], step
    impl, why = layer.core_impl
    assert impl == ("pro" if backend == "sim" else "tensor")
    assert (why is None) == (backend == "sim") and (backend == "sim" or "reference" in why)
    assert rel_rms(cache.recurrent_state[idx.long()], ref.recurrent_state) <= TOL[dtype]
    assert rel_rms(cache.conv_state[idx.long()], ref.conv_state) <= TOL[dtype]
    others = [1, 2, 4]
    assert torch.equal(cache.recurrent_state[others], state[others])
    assert torch.equal(cache.conv_state[others], conv[others])


def test_layer_bad_indices_name_the_callers_line():
    cfg, _, layer = _layer(torch.float32, "sim")
    cache = GDNCache(torch.zeros(2, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1),
                     torch.zeros(2, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim))
    x = torch.zeros(1, 1, cfg.hidden_size)
    with pytest.raises(GDNArgumentError, match="outside the state pool's 2 slots") as e:
        layer(x, cache, state_indices=torch.tensor([2]))
    assert e.value.loc.file == __file__
    with pytest.raises(GDNArgumentError, match="apply to a decode step") as e:
        layer(torch.zeros(1, 2, cfg.hidden_size), cache, state_indices=torch.tensor([0]))
    assert e.value.loc.file == __file__

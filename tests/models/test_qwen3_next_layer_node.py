"""The GDN layer's prefill core as one graph node: the Professional-mode kernel (pro_kernels) inside the traced
forward where it supports the layer, the Tensor-level kernels otherwise (``layer.core_impl`` says which and
why). Against the plain-torch layer of reference.py at the tolerances of test_qwen3_next_pypto.py."""
import pytest
import torch

import pypto
from models.qwen3_next import GDNCache, Qwen3NextGatedDeltaNet, Qwen3NextGDNConfig
from models.qwen3_next.reference import gated_deltanet_layer_ref, make_random_weights

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def make(dtype, backend, seed=3, **kw):
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=dtype, seed=seed)
    return cfg, weights, Qwen3NextGatedDeltaNet.from_hf(cfg, weights, **kw).compile(backend=backend)


def _ops(layer, *args):
    g = layer.trace(*args)
    return [g.node(n)["attrs"]["kernel"].name for n in g.nodes() if g.op(n) == "custom_kernel"]


@pytest.mark.parametrize("backend", ["sim", pytest.param("cpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_prefill_runs_the_pl_kernel_as_a_node(backend, dtype):
    cfg, weights, layer = make(dtype, backend)
    gen = torch.Generator().manual_seed(5)
    for T in (73, 64):                      # a tail chunk (73 = 64 + 9), then a whole one: one trace
        x = torch.randn(2, T, cfg.hidden_size, generator=gen).to(dtype)
        y = layer(x)
        assert layer.core_impl == ("pro", None)
        assert y.dtype == dtype and y.shape == x.shape
        assert rel_err(y, gated_deltanet_layer_ref(x, weights, cfg)) <= TOL[dtype], T
    assert _ops(layer, x) == ["gdn_chunk_pro"]


def test_prefill_with_a_cache_updates_the_state_through_the_node_then_decodes():
    cfg, weights, layer = make(torch.float32, "sim", seed=4)
    x = torch.randn(1, 70, cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    cache, cache_ref = GDNCache(), GDNCache()
    for s in (slice(0, 40), slice(40, 69), slice(69, 70)):     # prefill, continue, a decode step (fused kernel)
        y = layer(x[:, s], cache)
        assert layer.core_impl == ("pro", None), s
        assert rel_err(y, gated_deltanet_layer_ref(x[:, s], weights, cfg, cache=cache_ref)) <= 1e-5, s
    layer(x[:, :30], GDNCache())                 # a prefill again (its trace cached): the record follows the call
    assert layer.core_impl == ("pro", None)
    assert rel_err(cache.recurrent_state, cache_ref.recurrent_state) <= 1e-5
    assert rel_err(cache.conv_state, cache_ref.conv_state) <= 1e-5


def test_falls_back_with_the_reason():
    cfg, weights, layer = make(torch.float32, "reference")
    x = torch.randn(1, 20, cfg.hidden_size, generator=torch.Generator().manual_seed(7))
    y = layer(x)
    assert layer.core_impl[0] == "tensor" and "backend 'reference'" in layer.core_impl[1]
    assert rel_err(y, gated_deltanet_layer_ref(x, weights, cfg)) <= 1e-5
    assert _ops(layer, x) == []
    _, _, odd = make(torch.float32, "sim", chunk_size=48)                   # not a power of two
    odd.trace(x)
    assert odd.core_impl[0] == "tensor" and "chunk size 48" in odd.core_impl[1]
    _, _, forced = make(torch.float32, "sim", impl="tensor")
    forced.trace(x)
    assert forced.core_impl == ("tensor", "impl='tensor' asked for")


def test_impl_pro_where_unsupported_is_an_error():
    _, _, layer = make(torch.float32, "reference", impl="pro")
    with pytest.raises(pypto.ShapeError, match="impl='pro' does not support this layer: backend 'reference'"):
        layer.trace(torch.randn(1, 8, Qwen3NextGDNConfig.small().hidden_size))
    with pytest.raises(ValueError, match="impl must be"):
        Qwen3NextGatedDeltaNet(Qwen3NextGDNConfig.small(), impl="fast")


def test_the_report_of_a_fallback_run_says_why():
    """issue 15 item 1: the fallback's reason is a note of the run's report, not only layer.core_impl; a run
    on the pl kernel notes no fallback, and a cached trace's reruns keep the note."""
    cfg, weights, odd = make(torch.float32, "sim", chunk_size=48)          # not a power of two: Tensor level
    x = torch.randn(1, 20, cfg.hidden_size, generator=torch.Generator().manual_seed(8))
    for _ in range(2):                                                     # the second run: the cached trace
        y = odd(x)
        notes = [n for n in pypto.last_report().notes if "core: Tensor-level kernels" in n]
        assert len(notes) == 1 and "prefill" in notes[0] and "chunk size 48" in notes[0], pypto.last_report().notes
    assert rel_err(y, gated_deltanet_layer_ref(x, weights, cfg)) <= 1e-5
    _, _, fast = make(torch.float32, "sim")
    fast(x)
    assert fast.core_impl == ("pro", None)
    assert not [n for n in pypto.last_report().notes if "Tensor-level kernels" in n]

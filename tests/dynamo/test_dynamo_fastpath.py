"""torch's fused transformer fast path (nn.TransformerEncoderLayer / nn.MultiheadAttention in eval under
no_grad: aten._transformer_encoder_layer_fwd, aten._native_multi_head_attention) is decomposed
(pypto/fx/fastpath.py) and runs in pypto, against eager's fused kernel; with a mask it stays fused."""
import pytest
import torch

import pypto.dynamo as pd

FUSED = ("aten._transformer_encoder_layer_fwd.default", "aten._native_multi_head_attention.default")
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _layer(norm_first, activation, dtype):
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0, norm_first=norm_first,
                                            activation=activation).eval().to(dtype)


def _assert_close(got, want, dtype):
    scale = want.abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= TOL[dtype] * max(scale, 1.0)


def _check(model, inputs, options, dtype, dynamic=True):
    assert torch.backends.mha.get_fastpath_enabled()
    pd.reset()
    with torch.no_grad():
        fast = torch.compile(model, backend="pypto", dynamic=dynamic, options=options)
        for x in inputs:
            _assert_close(fast(x), model(x), dtype)      # eager: torch's fused kernel
    return pd.records


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_encoder_layer_fast_path_runs_in_pypto(backend):
    model = _layer(False, "relu", torch.float32)
    inputs = [torch.randn(2, 7, 32), torch.randn(2, 33, 32)]        # one graph for both lengths (a tail)
    records = _check(model, inputs, {"backend": backend}, torch.float32)
    assert len(records) == 1
    (record,) = records
    assert record.captured_ops == record.total_ops > 40
    assert pd.counters["fallbacks"] == 0 and pd.counters["run_fallbacks"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_encoder_layer_fast_path_pre_norm_gelu(dtype):
    model = _layer(True, "gelu", dtype)
    records = _check(model, [torch.randn(3, 9, 32, dtype=dtype)], {"backend": "reference"}, dtype)
    ops = [op for r in records for op, _ in r.eager_ops]
    assert not any(op in FUSED for op in ops), ops
    assert sum(r.captured_ops for r in records) > 40


def test_native_multi_head_attention_decomposed():
    """nn.MultiheadAttention's own fast path is not what dynamo sees (it keeps multi_head_attention_forward
    whole); the fused op, as the encoder layer's fast path and user code call it, is decomposed."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()

    class FusedSelfAttention(torch.nn.Module):
        def forward(self, x):
            return torch._native_multi_head_attention(x, x, x, 32, 4, mha.in_proj_weight, mha.in_proj_bias,
                                                      mha.out_proj.weight, mha.out_proj.bias, None, False)[0]

    model = FusedSelfAttention().eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        _assert_close(model(x), mha(x, x, x, need_weights=False)[0], torch.float32)    # the fused op is MHA
    records = _check(model, [x, torch.randn(2, 11, 32)], {"backend": "reference"}, torch.float32)
    (record,) = records
    assert record.captured_ops == record.total_ops > 10


def test_masked_fast_path_stays_fused_and_right():
    model = _layer(False, "relu", torch.float32)
    x = torch.randn(2, 6, 32)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    pd.reset()
    with torch.no_grad():
        fast = torch.compile(model, backend="pypto", options={"backend": "reference"})
        got, want = fast(x, src_key_padding_mask=padding), model(x, src_key_padding_mask=padding)
    # the fused kernel leaves padded rows as it likes (nested tensors); compare the real ones
    _assert_close(got[0], want[0], torch.float32)
    _assert_close(got[1, :4], want[1, :4], torch.float32)
    ops = [op for r in pd.records for op, _ in r.eager_ops]
    assert FUSED[0] in ops

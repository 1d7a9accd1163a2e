"""pypto.nn layers vs their torch.nn equivalents: torch weights loaded through state_dict, fp32/fp16/bf16,
several batch/sequence sizes served by ONE compilation."""
import pytest
import torch
import torch.nn as tnn

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [(1, 5), (2, 7), (3, 33)]          # (batch, sequence): unequal, so duck sizing keeps one trace


class CausalConv(pypto.Module):
    """Qwen3-Next's short conv: depthwise, padding K-1, keep the first T outputs, SiLU."""

    def __init__(self, channels, kernel):
        super().__init__()
        self.conv1d = nn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel - 1, bias=False)

    def forward(self, x):
        return F.silu(self.conv1d(x)[..., :x.shape[-1]])

    def default_dynamic_dims(self, arg, rank):
        return (0, 2)


class TorchCausalConv(tnn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.conv1d = tnn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel - 1, bias=False)

    def forward(self, x):
        return tnn.functional.silu(self.conv1d(x)[..., :x.shape[-1]])


def hidden(b, t, dt):
    return torch.randn(b, t, 16).to(dt)


def channels_first(c):
    return lambda b, t, dt: torch.randn(b, c, t).to(dt)


def ids(b, t, dt):
    return torch.randint(0, 11, (b, t))


# name: (pypto layer, torch layer, input maker (batch, seq, dtype) -> tensor)
CASES = {
    "linear": (lambda: nn.Linear(16, 24), lambda: tnn.Linear(16, 24), hidden),
    "linear_nobias": (lambda: nn.Linear(16, 8, bias=False), lambda: tnn.Linear(16, 8, bias=False), hidden),
    "rmsnorm": (lambda: nn.RMSNorm(16, eps=1e-6), lambda: tnn.RMSNorm(16, eps=1e-6), hidden),
    "rmsnorm_default_eps": (lambda: nn.RMSNorm([16]), lambda: tnn.RMSNorm([16]), hidden),
    "layernorm": (lambda: nn.LayerNorm(16), lambda: tnn.LayerNorm(16), hidden),
    "layernorm_2d": (lambda: nn.LayerNorm((7, 16)), lambda: tnn.LayerNorm((7, 16)),
                     lambda b, t, dt: torch.randn(b, 7, 16).to(dt)),
    "layernorm_nobias": (lambda: nn.LayerNorm(16, bias=False), lambda: tnn.LayerNorm(16, bias=False), hidden),
    "embedding": (lambda: nn.Embedding(11, 8, padding_idx=0), lambda: tnn.Embedding(11, 8, padding_idx=0), ids),
    "conv1d_causal_depthwise": (lambda: CausalConv(6, 4), lambda: TorchCausalConv(6, 4), channels_first(6)),
    "conv1d_grouped": (lambda: nn.Conv1d(6, 4, 3, groups=2, padding=1), lambda: tnn.Conv1d(6, 4, 3, groups=2, padding=1),
                       channels_first(6)),
    "conv1d_dense_dilated": (lambda: nn.Conv1d(5, 3, 2, dilation=2, padding=2),
                             lambda: tnn.Conv1d(5, 3, 2, dilation=2, padding=2), channels_first(5)),
    "silu": (nn.SiLU, tnn.SiLU, hidden),
    "gelu": (nn.GELU, tnn.GELU, hidden),
    "gelu_tanh": (lambda: nn.GELU("tanh"), lambda: tnn.GELU("tanh"), hidden),
    "softplus_beta": (lambda: nn.Softplus(2.0, 4.0), lambda: tnn.Softplus(2.0, 4.0),
                      lambda b, t, dt: (torch.randn(b, t, 16) * 4).to(dt)),
    "mlp": (lambda: nn.Sequential(nn.RMSNorm(16, eps=1e-6), nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 16)),
            lambda: tnn.Sequential(tnn.RMSNorm(16, eps=1e-6), tnn.Linear(16, 32), tnn.SiLU(), tnn.Linear(32, 16)),
            hidden),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_layer_matches_torch(case, dtype, assert_close):
    make, make_torch, make_input = CASES[case]
    ref = make_torch().to(dtype).eval()
    mod = make().to(dtype)
    mod.load_state_dict(ref.state_dict())
    for b, t in SIZES:
        x = make_input(b, t, dtype)
        with torch.no_grad():
            expected = ref(x)
        assert_close(mod(x), expected, dtype)
    assert mod.compiled.trace_count == 1, "one compilation must serve every batch/sequence size"


def test_state_dict_keys_match_torch():
    for case, (make, make_torch, _) in CASES.items():
        ours, theirs = make().state_dict(), make_torch().state_dict()
        assert list(ours) == list(theirs), case
        assert [tuple(v.shape) for v in ours.values()] == [tuple(v.shape) for v in theirs.values()], case


def test_default_init_distributions_like_torch():
    lin = nn.Linear(64, 32)
    assert lin.weight.abs().max() <= 1 / 8 and lin.bias.abs().max() <= 1 / 8
    conv = nn.Conv1d(4, 4, 4, groups=4)
    assert conv.weight.abs().max() <= 1 / 2
    emb = nn.Embedding(10, 1000, padding_idx=3)
    assert torch.all(emb.weight[3] == 0) and 0.9 < emb.weight[4].std() < 1.1
    assert torch.all(nn.RMSNorm(8).weight == 1) and torch.all(nn.LayerNorm(8).bias == 0)


def test_layer_dtype_argument():
    assert nn.Linear(4, 4, dtype=pypto.float16).weight.dtype == torch.float16
    assert nn.RMSNorm(4, dtype=torch.bfloat16).weight.dtype == torch.bfloat16


def test_conv1d_unbatched_and_sequence_dims_dynamic(assert_close):
    conv = nn.Conv1d(3, 2, 3, padding=1)
    ref = tnn.Conv1d(3, 2, 3, padding=1)
    conv.load_state_dict(ref.state_dict())
    for t in (1, 5, 64):
        x = torch.randn(3, t)
        assert_close(conv(x), ref(x).detach())
    assert conv.compiled.trace_count == 1


def test_layer_repr():
    m = nn.Sequential(nn.Linear(4, 8, bias=False), nn.GELU("tanh"), nn.Conv1d(4, 4, 3, groups=4, bias=False))
    text = repr(m)
    assert "in_features=4, out_features=8, bias=False" in text
    assert "(1): GELU(approximate='tanh')" in text and "groups=4" in text

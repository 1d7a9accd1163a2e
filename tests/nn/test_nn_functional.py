"""pypto.nn.functional vs torch.nn.functional, traced with @pypto.jit (dynamic sequence dims)."""
import math

import pytest
import torch
import torch.nn.functional as TF

import pypto
import pypto.nn.functional as F

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
D = pypto.DYNAMIC


def run_dynamic(fn, make_args, lengths=(1, 7, 64)):
    """Run a jit function for several sequence lengths; return [(args, result)] and check one trace."""
    jf = pypto.jit(fn)
    out = [(args, jf(*args)) for args in (make_args(t) for t in lengths)]
    assert jf.trace_count == 1
    return out


# name: (pypto function of x, torch function of x)
UNARY = {
    "softmax": (lambda x: F.softmax(x, -1), lambda x: TF.softmax(x, -1)),
    "softmax_dim0": (lambda x: F.softmax(x, dim=0), lambda x: TF.softmax(x, dim=0)),
    "softmax_fp32_out": (lambda x: F.softmax(x, -1, dtype=pypto.float32), lambda x: TF.softmax(x, -1, dtype=torch.float32)),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda x: TF.log_softmax(x, -1)),
    "silu": (F.silu, TF.silu),
    "relu": (F.relu, TF.relu),
    "sigmoid": (F.sigmoid, torch.sigmoid),
    "tanh": (F.tanh, torch.tanh),
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "softplus": (F.softplus, TF.softplus),
    "softplus_beta_threshold": (lambda x: F.softplus(x * 8, beta=0.5, threshold=3.0),
                                lambda x: TF.softplus(x * 8, beta=0.5, threshold=3.0)),
    "l2norm": (lambda x: F.l2norm(x, dim=-1, eps=1e-6),
               lambda x: (x.float() * torch.rsqrt((x.float() ** 2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)),
    "normalize": (lambda x: F.normalize(x, dim=-1), lambda x: TF.normalize(x, dim=-1)),
    "rms_norm_no_weight": (lambda x: F.rms_norm(x, [32], eps=1e-6), lambda x: TF.rms_norm(x, [32], eps=1e-6)),
    "layer_norm_no_affine": (lambda x: F.layer_norm(x, (32,)), lambda x: TF.layer_norm(x, (32,))),
    "dropout_eval": (lambda x: F.dropout(x, 0.5, training=False), lambda x: x),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_functions(name, dtype, assert_close):
    ours, theirs = UNARY[name]

    def fn(x: pypto.Tensor[[D, 32], None]):
        return ours(x)

    for (x,), y in run_dynamic(fn, lambda t: (torch.randn(t, 32).to(dtype),)):
        assert_close(y, theirs(x), y.dtype if name == "softmax_fp32_out" else dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_norms_with_weights(dtype, assert_close):
    w, b = torch.randn(32).to(dtype), torch.randn(32).to(dtype)

    def fn(x: pypto.Tensor[[D, 32], None], w: pypto.Tensor[[32], None], b: pypto.Tensor[[32], None]):
        return F.rms_norm(x, w, eps=1e-6), F.rms_norm(x, (32,), w), F.layer_norm(x, [32], w, b, eps=1e-5)

    for (x, _, _), (r1, r2, ln) in run_dynamic(fn, lambda t: (torch.randn(t, 32).to(dtype), w, b)):
        assert_close(r1, TF.rms_norm(x, [32], w, eps=1e-6), dtype)
        assert_close(r2, TF.rms_norm(x, [32], w), dtype)                  # eps=None: the dtype's epsilon
        assert_close(ln, TF.layer_norm(x, [32], w, b, eps=1e-5), dtype)


def test_norm_over_two_trailing_dims(assert_close):
    w = torch.randn(3, 8)

    def fn(x: pypto.Tensor[[D, 3, 8], pypto.float32]):
        return F.rms_norm(x, (3, 8), w, eps=1e-5), F.layer_norm(x, (3, 8), w, None)

    for (x,), (r, ln) in run_dynamic(fn, lambda t: (torch.randn(t, 3, 8),)):
        assert_close(r, TF.rms_norm(x, (3, 8), w, eps=1e-5))
        assert_close(ln, TF.layer_norm(x, (3, 8), w))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_and_embedding(dtype, assert_close):
    w, b = torch.randn(24, 32).to(dtype), torch.randn(24).to(dtype)
    table = torch.randn(50, 16).to(dtype)

    def fn(x: pypto.Tensor[[D, 32], None], ids: pypto.Tensor[[2, D], pypto.int64]):
        return F.linear(x, w, b), F.linear(x, w), F.embedding(ids, table)

    def args(t):
        return torch.randn(t, 32).to(dtype), torch.randint(0, 50, (2, t))

    for (x, ids), (y, y0, e) in run_dynamic(fn, args):
        assert_close(y, TF.linear(x, w, b), dtype)
        assert_close(y0, TF.linear(x, w), dtype)
        assert torch.equal(e, TF.embedding(ids, table))


CONV = {  # name: (weight shape, kwargs)
    "depthwise_causal": ((8, 1, 4), dict(groups=8, padding=3)),
    "depthwise_same": ((8, 1, 3), dict(groups=8, padding="same")),
    "depthwise_dilated_bias": ((8, 1, 3), dict(groups=8, padding=2, dilation=2, bias=True)),
    "dense_valid": ((4, 8, 3), dict(padding="valid", bias=True)),
    "grouped": ((8, 4, 2), dict(groups=2, padding=1)),
    "pointwise": ((5, 8, 1), dict()),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CONV))
def test_conv1d(name, dtype, assert_close):
    wshape, kw = CONV[name]
    w = (torch.randn(wshape) / math.sqrt(wshape[1] * wshape[2])).to(dtype)
    b = torch.randn(wshape[0]).to(dtype) if kw.pop("bias", False) else None

    def fn(x: pypto.Tensor[[2, 8, D], None]):
        return F.conv1d(x, w, b, **kw)

    for (x,), y in run_dynamic(fn, lambda t: (torch.randn(2, 8, t + 4).to(dtype),), lengths=(1, 9, 40)):
        ref = TF.conv1d(x.float(), w.float(), None if b is None else b.float(), **kw).to(dtype)
        assert_close(y, ref, dtype)


def _qwen3_next_reference():
    """models/qwen3_next/reference.py loaded by path (a tests/*/models.py may shadow the package name)."""
    import importlib.util
    import sys
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "models" / "qwen3_next" / "reference.py"
    spec = importlib.util.spec_from_file_location("_qwen3_next_reference_for_nn_tests", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                 # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_causal_conv_matches_qwen3_next_oracle(assert_close):
    import inspect
    causal_conv1d_ref = _qwen3_next_reference().causal_conv1d_ref
    params = inspect.signature(causal_conv1d_ref).parameters
    w = torch.randn(8, 4) * 0.5

    def fn(x: pypto.Tensor[[2, D, 8], pypto.float32]):          # channels last, as the model keeps it
        T = x.shape[1]
        y = F.conv1d(pypto.transpose(x, 1, 2), pypto.reshape(w, 8, 1, 4), groups=8, padding=3)[..., :T]
        return pypto.transpose(F.silu(y), 1, 2)

    kwargs = {"activation": "silu"} if "activation" in params else {}
    for (x,), y in run_dynamic(fn, lambda t: (torch.randn(2, t, 8),)):
        ref = causal_conv1d_ref(x, w, **kwargs)
        ref = ref[0] if isinstance(ref, tuple) else ref
        if "activation" not in params:
            ref = TF.silu(ref)
        assert_close(y, ref)


SDPA = {  # name: (q heads, kv heads, kwargs)
    "causal": (4, 4, dict(is_causal=True)),
    "causal_scale": (4, 4, dict(is_causal=True, scale=0.1)),
    "full": (4, 4, dict()),
    "gqa_causal": (4, 2, dict(is_causal=True, enable_gqa=True)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SDPA))
def test_scaled_dot_product_attention(name, dtype, assert_close):
    hq, hkv, kw = SDPA[name]

    def fn(q: pypto.Tensor[[2, hq, D, 16], None], k: pypto.Tensor[[2, hkv, D, 16], None],
           v: pypto.Tensor[[2, hkv, D, 16], None]):
        return F.scaled_dot_product_attention(q, k, v, **kw)

    def args(t):
        return (torch.randn(2, hq, t, 16).to(dtype), torch.randn(2, hkv, t, 16).to(dtype),
                torch.randn(2, hkv, t, 16).to(dtype))

    for (q, k, v), y in run_dynamic(fn, args, lengths=(1, 7, 33)):
        ref = TF.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw).to(dtype)
        assert_close(y, ref, dtype)


def test_sdpa_masks_and_unequal_lengths(assert_close):
    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 9, 8), torch.randn(3, 9, 4)
    bool_mask = torch.rand(5, 9) > 0.3
    bool_mask[:, 0] = True
    float_mask = torch.randn(5, 9)

    @pypto.jit
    def fn(q, k, v, bm, fm):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                F.scaled_dot_product_attention(q, k, v, attn_mask=bm),
                F.scaled_dot_product_attention(q, k, v, attn_mask=fm, scale=0.5))

    causal, masked, added = fn(q, k, v, bool_mask, float_mask)
    assert_close(causal, TF.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert_close(masked, TF.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask))
    assert_close(added, TF.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.5))


def test_pad(assert_close):
    @pypto.jit
    def fn(x):
        return F.pad(x, (1, 2, 0, 1), value=3.0)

    x = torch.randn(2, 3, 4)
    assert_close(fn(x), TF.pad(x, (1, 2, 0, 1), value=3.0))


# ------------------------------------------------------------------ user errors
ERRORS = {  # name: (function of x [4, 8] f32, error type, message fragment)
    "linear_weight_rank": (lambda x: F.linear(x, torch.ones(8)), pypto.ShapeError, "weight must be 2-D"),
    "linear_bias_shape": (lambda x: F.linear(x, torch.ones(3, 8), torch.ones(4)), pypto.ShapeError,
                          "bias must have shape [3], found [4]"),
    "rms_norm_shape": (lambda x: F.rms_norm(x, (16,)), pypto.ShapeError, "expected the input's trailing dims"),
    "rms_norm_weight_twice": (lambda x: F.rms_norm(x, torch.ones(8), torch.ones(8)), pypto.TypeMismatchError,
                              "weight given twice"),
    "layer_norm_weight": (lambda x: F.layer_norm(x, (8,), torch.ones(4)), pypto.ShapeError,
                          "weight must have shape [8], found [4]"),
    "conv_stride": (lambda x: F.conv1d(x, torch.ones(4, 4, 1), stride=2), pypto.PyptoError, "expected stride=1"),
    "conv_groups": (lambda x: F.conv1d(x, torch.ones(4, 2, 1), groups=3), pypto.ShapeError, "groups=3 must divide"),
    "conv_weight": (lambda x: F.conv1d(x, torch.ones(4, 3, 1)), pypto.ShapeError, "expected weight [4, 4, K]"),
    "conv_too_short": (lambda x: F.conv1d(x, torch.ones(4, 4, 9)), pypto.ShapeError, "too short"),
    "conv_padding": (lambda x: F.conv1d(x, torch.ones(4, 4, 1), padding=-1), pypto.PyptoError,
                     "padding must be a non-negative int"),
    "embedding_float_ids": (lambda x: F.embedding(x, torch.ones(3, 3)), pypto.TypeMismatchError, "integer ids"),
    "sdpa_dropout": (lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.1), pypto.PyptoError,
                     "expected dropout_p=0"),
    "sdpa_gqa_heads": (lambda x: F.scaled_dot_product_attention(x.reshape(1, 4, 1, 8), x.reshape(1, 4, 1, 8)[:, :3],
                                                                x.reshape(1, 4, 1, 8)[:, :3], enable_gqa=True),
                       pypto.ShapeError, "multiple of key/value heads"),
    "dropout_training": (lambda x: F.dropout(x, 0.1), pypto.PyptoError, "expected p=0 or training=False"),
    "softplus_non_tensor": (lambda x: F.softplus([1.0]), pypto.TypeMismatchError, "expected a pypto.Tensor"),
    "pad_mode": (lambda x: F.pad(x, (1, 1), mode="reflect"), pypto.PyptoError, "only mode='constant'"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_functional_errors(name):
    fn, exc, fragment = ERRORS[name]
    with pytest.raises(exc) as e:
        pypto.jit(fn)(torch.randn(4, 8))
    assert fragment in str(e.value)
    assert e.value.loc is not None and e.value.loc.file == __file__


def test_symbolic_feature_dim_is_reported():
    def fn(x: pypto.Tensor[[4, D], pypto.float32]):
        return F.layer_norm(x, (8,))

    with pytest.raises(pypto.SymbolicError, match="must be a static size, found the symbolic size x_d1"):
        pypto.jit(fn)(torch.randn(4, 8))

"""``pypto.nn.functional``: torch.nn.functional-like layer functions over traced pypto tensors.

They check what a layer needs (static feature sizes, matching weights) and then call the pypto op
functions; the ops' meaning (and their decomposition for the compiler) lives in ``pypto/ops``.
Arguments may be traced ``pypto.Tensor`` values or torch tensors (captured as constants).

conv1d is composed of ops the compiler already has, tap by tap: the time axis is padded, and for
each kernel tap k the input window ``x[..., k*dilation : k*dilation + T_out]`` is weighted and
accumulated in fp32. Depthwise convolutions (groups == channels, Qwen3-Next's short conv) weight the
window elementwise with the tap's per-channel column (vector unit); grouped/dense ones multiply it by
the tap's [out, in] weight matrix (one matmul per tap and group, cube unit).
"""
from __future__ import annotations

import math
import numbers

import torch

from .. import dtypes, symbolic as sym
from ..errors import PyptoError, ShapeError, SymbolicError, TypeMismatchError
from ..frontend import api as P
from ..frontend.tensor import Tensor

__all__ = ["linear", "rms_norm", "layer_norm", "softmax", "log_softmax", "silu", "gelu", "relu", "sigmoid", "tanh",
           "softplus", "l2norm", "normalize", "embedding", "conv1d", "scaled_dot_product_attention", "dropout",
           "pad", "one_hot"]


def _tensor(x, fn: str, arg: str = "input") -> Tensor:
    return P.as_tensor(x, fn, arg)


def _opt(x, fn: str, arg: str):
    return None if x is None else _tensor(x, fn, arg)


def _static(d, fn: str, what: str) -> int:
    if not isinstance(d, int):
        raise SymbolicError(f"{fn}: {what} must be a static size, found the symbolic size {d}",
                            hint="mark only batch/sequence dims dynamic: Module.compile(dynamic={arg: dims}) "
                                 "or a pypto.Tensor[[...], dtype] annotation")
    return d


def _static_shape(shape, fn: str, what: str) -> tuple:
    return tuple(_static(d, fn, f"{what} dim {i}") for i, d in enumerate(shape))


def _is_tensor_like(x) -> bool:
    return isinstance(x, (Tensor, torch.Tensor))


def _check_param(t, shape: tuple, fn: str, arg: str) -> None:
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ShapeError(f"{fn}: {arg} must have shape {list(shape)}, found {list(t.shape)}")


# ------------------------------------------------------------------ linear and normalisation
def linear(input, weight, bias=None) -> Tensor:
    """``input @ weight.T + bias``; weight [out_features, in_features]."""
    x, w, b = _tensor(input, "linear"), _tensor(weight, "linear", "weight"), _opt(bias, "linear", "bias")
    if w.ndim != 2:
        raise ShapeError(f"linear: weight must be 2-D [out_features, in_features], found shape {list(w.shape)}")
    if b is not None:
        _check_param(b, (w.shape[0],), "linear", "bias")
    return P.linear(x, w, b)


def _normalized_shape(x: Tensor, normalized_shape, fn: str) -> tuple:
    if normalized_shape is None:
        normalized_shape = (x.shape[-1],)
    elif isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    shape = tuple(normalized_shape)
    n = len(shape)
    if n == 0 or n > x.ndim:
        raise ShapeError(f"{fn}: normalized_shape {list(shape)} must name 1..{x.ndim} trailing dims of the input "
                         f"(shape {list(x.shape)})")
    trailing = _static_shape(x.shape[-n:], fn, "normalized")
    if trailing != tuple(shape):
        raise ShapeError(f"{fn}: expected the input's trailing dims to be {list(shape)} (normalized_shape), "
                         f"found input shape {list(x.shape)}")
    return shape


def _over_trailing(fn_1d, x: Tensor, shape: tuple, params: list):
    """Apply a last-dim normalisation over several trailing dims by flattening them into one."""
    if len(shape) == 1:
        return fn_1d(x, *params)
    lead = x.shape[:-len(shape)]
    flat = math.prod(shape)
    y = fn_1d(P.reshape(x, *lead, flat), *[None if p is None else P.reshape(p, flat) for p in params])
    return P.reshape(y, *x.shape)


def rms_norm(input, normalized_shape=None, weight=None, eps: float | None = None) -> Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims (default: the
    last dim). Also callable as ``rms_norm(x, weight, eps=...)``. ``eps=None`` is the dtype's epsilon,
    as torch's."""
    x = _tensor(input, "rms_norm")
    if _is_tensor_like(normalized_shape):
        if weight is not None:
            raise TypeMismatchError("rms_norm: weight given twice (positionally and as weight=)")
        normalized_shape, weight = None, normalized_shape
    w = _opt(weight, "rms_norm", "weight")
    shape = _normalized_shape(x, normalized_shape if normalized_shape is not None or w is None else w.shape,
                              "rms_norm")
    _check_param(w, shape, "rms_norm", "weight")
    if eps is None:
        eps = torch.finfo(x.dtype.torch_dtype).eps if x.dtype.is_floating else torch.finfo(torch.float32).eps
    return _over_trailing(lambda t, wt: P.rms_norm(t, wt, eps=eps), x, shape, [w])


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    x = _tensor(input, "layer_norm")
    w, b = _opt(weight, "layer_norm", "weight"), _opt(bias, "layer_norm", "bias")
    shape = _normalized_shape(x, normalized_shape, "layer_norm")
    _check_param(w, shape, "layer_norm", "weight")
    _check_param(b, shape, "layer_norm", "bias")
    return _over_trailing(lambda t, wt, bt: P.layer_norm(t, (t.shape[-1],), wt, bt, eps=eps), x, shape, [w, b])


def l2norm(input, dim: int = -1, eps: float = 1e-6) -> Tensor:
    """``x * rsqrt(sum(x^2, dim) + eps)`` (flash-linear-attention's l2norm)."""
    return P.l2norm(_tensor(input, "l2norm"), dim=dim, eps=eps)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """torch's F.normalize for p=2: ``x / max(||x||_2, eps)``."""
    if p != 2:
        raise PyptoError(f"normalize: only p=2 is supported, found p={p}")
    x = _tensor(input, "normalize")
    norm = P.sqrt(P.sum(x * x, dim=dim, keepdim=True))
    return x / P.maximum(norm, eps)


# ------------------------------------------------------------------ softmax and activations
def _maybe_cast(x: Tensor, dtype) -> Tensor:
    return x if dtype is None else P.cast(x, dtype)


def softmax(input, dim: int, dtype=None) -> Tensor:
    return P.softmax(_maybe_cast(_tensor(input, "softmax"), dtype), dim)


def log_softmax(input, dim: int, dtype=None) -> Tensor:
    return P.log_softmax(_maybe_cast(_tensor(input, "log_softmax"), dtype), dim)


def silu(input) -> Tensor:
    return P.silu(_tensor(input, "silu"))


def relu(input) -> Tensor:
    return P.relu(_tensor(input, "relu"))


def sigmoid(input) -> Tensor:
    return P.sigmoid(_tensor(input, "sigmoid"))


def tanh(input) -> Tensor:
    return P.tanh(_tensor(input, "tanh"))


def gelu(input, approximate: str = "none") -> Tensor:
    return P.gelu(_tensor(input, "gelu"), approximate=approximate)


def softplus(input, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold`` (as torch)."""
    x = _tensor(input, "softplus")
    if beta == 1 and threshold == 20:
        return P.softplus(x)
    bx = x * beta if beta != 1 else x
    soft = P.softplus(bx)
    soft = soft / beta if beta != 1 else soft
    return P.where(bx > threshold, x, soft)


def dropout(input, p: float = 0.5, training: bool = True) -> Tensor:
    x = _tensor(input, "dropout")
    if training and p > 0:
        raise PyptoError(f"dropout: pypto compiles inference; expected p=0 or training=False, found p={p} "
                         "in training mode", hint="call module.eval()")
    return x


# ------------------------------------------------------------------ embedding, padding
def embedding(input, weight, padding_idx=None) -> Tensor:
    """Rows of ``weight`` [num_embeddings, dim] picked by the integer ids ``input`` (any shape)."""
    ids, w = _tensor(input, "embedding"), _tensor(weight, "embedding", "weight")
    if ids.dtype.is_floating or ids.dtype == dtypes.bool_:
        raise TypeMismatchError(f"embedding: expected integer ids, found {ids.dtype.name}")
    if w.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D [num_embeddings, dim], found shape {list(w.shape)}")
    flat = ids if ids.ndim == 1 else P.reshape(ids, -1)
    rows = P.index_select(w, 0, flat)
    return rows if ids.ndim == 1 else P.reshape(rows, *ids.shape, w.shape[1])


def one_hot(input, num_classes: int = -1) -> Tensor:
    """torch's F.one_hot (int64 [..., num_classes]); num_classes must be given: frontend/api_counting.py."""
    from ..frontend.api_counting import one_hot as traced_one_hot
    return traced_one_hot(input, num_classes)


def pad(input, pad, mode: str = "constant", value: float = 0.0) -> Tensor:
    """torch's F.pad, constant mode: ``pad`` = (last_left, last_right, prev_left, prev_right, ...)."""
    if mode != "constant":
        raise PyptoError(f"pad: only mode='constant' is supported, found {mode!r}")
    return P.pad(_tensor(input, "pad"), tuple(pad), value=value)


# ------------------------------------------------------------------ conv1d
def _conv_padding(padding, k_span: int, stride: int, fn: str) -> tuple[int, int]:
    if padding == "valid":
        return 0, 0
    if padding == "same":
        if stride != 1:
            raise PyptoError(f"{fn}: padding='same' needs stride=1, found stride={stride}")
        return k_span // 2, k_span - k_span // 2
    if isinstance(padding, (tuple, list)) and len(padding) == 1:
        padding = padding[0]
    if not isinstance(padding, numbers.Integral) or padding < 0:
        raise PyptoError(f"{fn}: padding must be a non-negative int, 'valid' or 'same', found {padding!r}")
    return int(padding), int(padding)


def _single(v, fn: str, what: str) -> int:
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    if not isinstance(v, numbers.Integral) or v < 1:
        raise PyptoError(f"{fn}: {what} must be a positive int, found {v!r}")
    return int(v)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """torch's F.conv1d: input [B, C_in, T] (or [C_in, T]), weight [C_out, C_in / groups, K]; stride 1.
    Causal depthwise conv (Qwen3-Next): ``conv1d(x, w, groups=C, padding=K - 1)[..., :T]``."""
    fn = "conv1d"
    x, w, b = _tensor(input, fn), _tensor(weight, fn, "weight"), _opt(bias, fn, "bias")
    stride, dilation = _single(stride, fn, "stride"), _single(dilation, fn, "dilation")
    if stride != 1:
        raise PyptoError(f"{fn}: expected stride=1 (strided windows are not supported yet), found stride={stride}")
    if x.ndim not in (2, 3):
        raise ShapeError(f"{fn}: expected input [batch, channels, time] or [channels, time], "
                         f"found shape {list(x.shape)}")
    if w.ndim != 3:
        raise ShapeError(f"{fn}: weight must be 3-D [out_channels, in_channels / groups, kernel], "
                         f"found shape {list(w.shape)}")
    c_out, c_per_group, k = _static_shape(w.shape, fn, "weight")
    c_in = _static(x.shape[-2], fn, "the input's channel dim (-2)")
    if not isinstance(groups, numbers.Integral) or groups < 1 or c_in % groups or c_out % groups:
        raise ShapeError(f"{fn}: groups={groups} must divide in_channels={c_in} and out_channels={c_out}")
    if c_per_group * groups != c_in:
        raise ShapeError(f"{fn}: expected weight [{c_out}, {c_in // groups}, K] for {c_in} input channels and "
                         f"groups={groups}, found weight shape {list(w.shape)}")
    if b is not None:
        _check_param(b, (c_out,), fn, "bias")
    unbatched = x.ndim == 2
    if unbatched:
        x = P.reshape(x, 1, c_in, x.shape[-1])
    span = dilation * (k - 1)
    left, right = _conv_padding(padding, span, stride, fn)
    t_in = x.shape[-1]
    t_out = sym.simplify(t_in + left + right - span)
    if isinstance(t_out, int) and t_out < 1:
        raise ShapeError(f"{fn}: the input is too short: time {t_in} + padding {left + right} is less than the "
                         f"kernel span {span + 1}")
    acc = dtypes.float32 if x.dtype.is_floating else x.dtype
    xp = _pad_time(P.cast(x, acc), left, right)
    wf = P.cast(w, acc)
    if groups == c_in and c_out == c_in:
        y = _depthwise(xp, wf, k, dilation, t_out)
    else:
        y = _grouped(xp, wf, k, dilation, t_out, groups, c_in // groups, c_out // groups)
    if b is not None:
        y = y + P.reshape(P.cast(b, acc), c_out, 1)
    y = P.cast(y, x.dtype)
    return P.reshape(y, c_out, t_out) if unbatched else y


def _pad_time(x: Tensor, left: int, right: int) -> Tensor:
    return x if left == 0 and right == 0 else P.pad(x, (left, right), value=0)


def _window(xp: Tensor, tap: int, dilation: int, t_out):
    start = tap * dilation
    return xp[..., start:start + t_out]


def _depthwise(xp: Tensor, w: Tensor, k: int, dilation: int, t_out) -> Tensor:
    y = None
    for tap in range(k):
        term = _window(xp, tap, dilation, t_out) * w[:, :, tap]        # [B, C, T] * [C, 1]
        y = term if y is None else y + term
    return y


def _grouped(xp: Tensor, w: Tensor, k: int, dilation: int, t_out, groups: int, cg: int, og: int) -> Tensor:
    outs = []
    for g in range(groups):
        xg = xp if groups == 1 else xp[:, g * cg:(g + 1) * cg, :]
        wg = w if groups == 1 else w[g * og:(g + 1) * og]
        y = None
        for tap in range(k):
            term = P.matmul(wg[:, :, tap], _window(xg, tap, dilation, t_out))    # [O, C] @ [B, C, T]
            y = term if y is None else y + term
        outs.append(y)
    return outs[0] if groups == 1 else P.cat(outs, dim=1)


# ------------------------------------------------------------------ attention
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """torch's SDPA: ``softmax(q @ k^T * scale + mask) @ v`` with q [..., L, E], k [..., S, E], v [..., S, Ev].
    Scores and softmax are computed in fp32; the result has the query's dtype. ``is_causal`` keeps
    key j for query i when j <= i (top-left aligned, as torch). ``enable_gqa`` shares each key/value
    head among query_heads / kv_heads consecutive query heads (dim -3)."""
    fn = "scaled_dot_product_attention"
    q, k, v = _tensor(query, fn, "query"), _tensor(key, fn, "key"), _tensor(value, fn, "value")
    if dropout_p:
        raise PyptoError(f"{fn}: expected dropout_p=0 (pypto compiles inference), found {dropout_p}")
    if is_causal and attn_mask is not None:
        raise PyptoError(f"{fn}: give either attn_mask or is_causal=True, not both")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ShapeError(f"{fn}: {name} must have rank >= 2 [..., seq, dim], found shape {list(t.shape)}")
    e = _static(q.shape[-1], fn, "the query's head dim")
    if enable_gqa:
        k, v = _repeat_kv(k, q, fn), _repeat_kv(v, q, fn)
    if scale is None:
        scale = 1.0 / math.sqrt(e)
    scores = P.matmul(q, k, out_dtype=dtypes.float32, b_trans=True) * scale
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        rows = P.reshape(P.arange(L), L, 1)
        cols = P.reshape(P.arange(S), 1, S)
        scores = P.where(cols <= rows, scores, float("-inf"))
    elif attn_mask is not None:
        m = _tensor(attn_mask, fn, "attn_mask")
        if m.dtype == dtypes.bool_:
            scores = P.where(m, scores, float("-inf"))
        else:
            scores = scores + P.cast(m, dtypes.float32)
    probs = P.softmax(scores, -1)
    return P.matmul(P.cast(probs, v.dtype), v)


def _repeat_kv(t: Tensor, q: Tensor, fn: str) -> Tensor:
    if t.ndim < 3 or q.ndim < 3:
        raise ShapeError(f"{fn}: enable_gqa needs a heads dim (-3) on query, key and value")
    hq, hkv = _static(q.shape[-3], fn, "query heads"), _static(t.shape[-3], fn, "key/value heads")
    if hq == hkv:
        return t
    if hq % hkv:
        raise ShapeError(f"{fn}: query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    lead, (s, d) = t.shape[:-3], t.shape[-2:]
    t5 = P.reshape(t, *lead, hkv, 1, s, d)
    return P.reshape(P.expand(t5, *lead, hkv, hq // hkv, s, d), *lead, hq, s, d)

"""Plain-torch (CPU) oracles for Qwen3-Next's Gated DeltaNet (GDN) layer.

Everything here is written from the equations, computes in fp32 internally, and is what the
pypto kernels in this package are verified and benchmarked against.

Gated delta rule, per value head, state S in R^{K x V} (fp32):

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
        = a_t S_{t-1} + beta_t k_t (v_t - a_t S_{t-1}^T k_t)^T,      a_t = exp(g_t)
    o_t = S_t^T (scale * q_t)

Layouts (the flash-linear-attention convention that vLLM and SGLang call):

    q, k           [B, T, H, K]
    v              [B, T, HV, V]      HV a multiple of H; value head h reads key head h // (HV // H)
    g, beta        [B, T, HV]         g = log-space decay (<= 0), beta in (0, 1)
    initial_state  [N, HV, K, V] fp32 N = B, or N = len(cu_seqlens) - 1 with packed sequences
    cu_seqlens     [N + 1] int        with B = 1: sequence n is tokens cu_seqlens[n]:cu_seqlens[n+1]
    o              [B, T, HV, V]      dtype of v; final state [N, HV, K, V] fp32

Short causal convolution (depthwise, channels last as Qwen3-Next applies it):

    x [B, T, D], weight [D, W]:  y[b, t, d] = act(bias[d] + sum_w weight[d, w] * x[b, t - (W - 1) + w, d])
    with x at negative times taken from the conv state (zeros when there is none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

__all__ = [
    "recurrent_gated_delta_rule_ref",
    "chunk_gated_delta_rule_ref",
    "unit_lower_triangular_inverse",
    "l2norm",
    "causal_conv1d_ref",
    "causal_conv1d_update_ref",
    "gated_rms_norm_ref",
    "gdn_gates",
    "Qwen3NextGDNConfig",
    "GDNCache",
    "hf_weight_shapes",
    "make_random_weights",
    "split_qkvz_ba",
    "split_projection_weights",
    "gated_deltanet_layer_ref",
]

L2NORM_EPS = 1e-6


# ----------------------------------------------------------------------------------------------
# Input validation
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _GDNDims:
    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int  # number of sequences (and of states)


def _check_gdn_inputs(q, k, v, g, beta, initial_state, cu_seqlens) -> _GDNDims:
    """Validate the gated-delta-rule layouts; raise ValueError naming what was expected."""
    for name, t, rank in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("g", g, 3), ("beta", beta, 3)):
        if t.dim() != rank:
            raise ValueError(f"{name} must have rank {rank}, got shape {tuple(t.shape)}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape [B, T, H, K], got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, K = q.shape
    if v.shape[:2] != (B, T):
        raise ValueError(f"v must be [B={B}, T={T}, HV, V], got {tuple(v.shape)}")
    HV, V = v.shape[2], v.shape[3]
    if H == 0 or HV % H != 0:
        raise ValueError(
            f"the number of value heads HV={HV} must be a multiple of the number of key heads H={H} "
            f"(q, k [B, T, H, K], v [B, T, HV, V])"
        )
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != (B, T, HV):
            raise ValueError(f"{name} must be [B, T, HV] = {(B, T, HV)}, got {tuple(t.shape)}")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens packs sequences along T and needs B == 1, got B={B}")
        cu = torch.as_tensor(cu_seqlens)
        if cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(f"cu_seqlens must be 1-D with at least 2 entries, got shape {tuple(cu.shape)}")
        if int(cu[0]) != 0 or int(cu[-1]) != T or bool((cu[1:] < cu[:-1]).any()):
            raise ValueError(f"cu_seqlens must be non-decreasing from 0 to T={T}, got {cu.tolist()}")
        N = cu.numel() - 1
    else:
        N = B
    if initial_state is not None and tuple(initial_state.shape) != (N, HV, K, V):
        raise ValueError(f"initial_state must be [N, HV, K, V] = {(N, HV, K, V)}, got {tuple(initial_state.shape)}")
    return _GDNDims(B, T, H, HV, K, V, N)


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dimension, in fp32."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _prepare_gdn(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel):
    """Shared front end: validate, cast to fp32, normalise, scale q, map key heads to value heads.

    Returns (dims, q, k, v, g, beta, S0, seq_bounds) with q, k [B, T, HV, K] fp32 (q already
    multiplied by scale), v [B, T, HV, V], g, beta [B, T, HV] fp32, S0 [N, HV, K, V] fp32 and
    seq_bounds the list of (batch row, start, end) of each of the N sequences.
    """
    d = _check_gdn_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    if scale is None:
        scale = d.K ** -0.5
    q, k = q.float(), k.float()
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    group = d.HV // d.H
    if group > 1:  # value head h reads key head h // group
        q = q.repeat_interleave(group, dim=2)
        k = k.repeat_interleave(group, dim=2)
    q = q * scale
    if initial_state is None:
        S0 = torch.zeros(d.N, d.HV, d.K, d.V, dtype=torch.float32)
    else:
        S0 = initial_state.float()
    if cu_seqlens is None:
        bounds = [(b, 0, d.T) for b in range(d.B)]
    else:
        cu = [int(c) for c in torch.as_tensor(cu_seqlens).tolist()]
        bounds = [(0, cu[n], cu[n + 1]) for n in range(d.N)]
    return d, q, k, v.float(), g.float(), beta.float(), S0, bounds


# ----------------------------------------------------------------------------------------------
# Recurrent (token-by-token) form: THE oracle
# ----------------------------------------------------------------------------------------------

def _recurrent_core(q, k, v, g, beta, S):
    """One sequence batch, token by token. q, k [B, L, HV, K]; v [B, L, HV, V]; g, beta [B, L, HV];
    S [B, HV, K, V] (consumed). Returns o [B, L, HV, V] fp32 and the final state."""
    L = q.shape[1]
    o = torch.empty(v.shape, dtype=torch.float32)
    for t in range(L):
        S = S * torch.exp(g[:, t])[..., None, None]
        k_t = k[:, t]
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, S)          # S^T k (after decay)
        delta = beta[:, t, :, None] * (v[:, t] - predicted)         # beta (v - a S^T k)
        S = S + k_t[..., :, None] * delta[..., None, :]
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S


def recurrent_gated_delta_rule_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
):
    """Token-by-token gated delta rule (see the module docstring for the math and layouts).

    Returns (o [B, T, HV, V] in v's dtype, final_state [N, HV, K, V] fp32 or None).
    """
    d, q, k, vf, g, beta, S0, bounds = _prepare_gdn(
        q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel)
    if cu_seqlens is None:  # every batch row is one sequence: run them together
        o, final = _recurrent_core(q, k, vf, g, beta, S0)
    else:
        o = torch.zeros(d.B, d.T, d.HV, d.V, dtype=torch.float32)
        final = torch.empty_like(S0)
        for n, (b, s, e) in enumerate(bounds):
            sl = slice(s, e)
            o_n, final[n] = _recurrent_core(q[b:b + 1, sl], k[b:b + 1, sl], vf[b:b + 1, sl],
                                            g[b:b + 1, sl], beta[b:b + 1, sl], S0[n:n + 1])
            o[b, sl] = o_n[0]
    return o.to(v.dtype), (final if output_final_state else None)


# ----------------------------------------------------------------------------------------------
# Chunked (WY / UT-transform) form
# ----------------------------------------------------------------------------------------------

def _forward_substitution_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I + A)^{-1} for strictly-lower A [..., m, m], row by row:
    X[r, :r] = -A[r, :r] X[:r, :r], X[r, r] = 1."""
    m = A.shape[-1]
    X = torch.eye(m, dtype=A.dtype).expand(A.shape).clone()
    for r in range(1, m):
        X[..., r, :r] = -(A[..., r:r + 1, :r] @ X[..., :r, :r]).squeeze(-2)
    return X


def unit_lower_triangular_inverse(A: torch.Tensor, block: int = 16) -> torch.Tensor:
    """(I + A)^{-1} for strictly-lower-triangular A [..., n, n], by blocked forward substitution.

    Diagonal blocks (size `block`) are inverted row by row; block row i below the diagonal is
    X[i, :i] = -X[i, i] (A[i, :i] X[:i, :i]), which follows from row i of (I + A) X = I.
    The upper part of A is ignored.
    """
    n = A.shape[-1]
    A = A.tril(-1)
    X = torch.zeros_like(A)
    for s in range(0, n, block):
        e = min(s + block, n)
        D = _forward_substitution_inverse(A[..., s:e, s:e])
        X[..., s:e, s:e] = D
        if s > 0:
            X[..., s:e, :s] = -(D @ (A[..., s:e, :s] @ X[..., :s, :s]))
    return X


def _pad_sequences(x: torch.Tensor, bounds, length: int) -> torch.Tensor:
    """Gather the N sequences of x [B, T, ...] into a zero-padded [N, length, ...] batch."""
    out = x.new_zeros((len(bounds), length) + tuple(x.shape[2:]))
    for n, (b, s, e) in enumerate(bounds):
        out[n, : e - s] = x[b, s:e]
    return out


def _chunk_core(q, k, v, g, beta, S, C):
    """Chunked gated delta rule on a padded batch.

    q, k [NC, N, HV, C, K]; v [NC, N, HV, C, V]; g, beta [NC, N, HV, C]; S [N, HV, K, V].
    Padding tokens must carry g = 0, beta = 0, k = v = 0: they then leave the state untouched,
    and the chunk's total decay G[-1] is that of its last valid token.

    Within a chunk with state S0 at its start and G_i = sum_{j<=i} g_j:
        S_i   = e^{G_i} S0 + sum_{j<=i} e^{G_i - G_j} k_j d_j^T
        d_j   = beta_j (v_j - e^{G_j} S0^T k_j - sum_{m<j} e^{G_j - G_m} (k_j . k_m) d_m)
    i.e. (I + A) D = diag(beta) V - diag(beta e^G) K S0 with A[j, m] = beta_j e^{G_j - G_m} k_j . k_m
    (m < j), so D = U - W S0 with U = (I + A)^{-1} diag(beta) V and W = (I + A)^{-1} diag(beta e^G) K.
    Then O = diag(e^G) Q S0 + (Q K^T * Gamma) D, Gamma[i, j] = e^{G_i - G_j} (j <= i), and
    S_next = e^{G_last} S0 + (K * e^{G_last - G})^T D.
    """
    NC = q.shape[0]
    G = g.cumsum(-1)                                               # in-chunk cumulative log decay
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    # mask BEFORE exp: G_i - G_j > 0 above the diagonal and may overflow
    decay = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")))
    A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    Tinv = unit_lower_triangular_inverse(A)
    U = Tinv @ (beta[..., None] * v)
    W = Tinv @ ((beta * torch.exp(G))[..., None] * k)
    attn = (q @ k.transpose(-1, -2)) * decay                      # lower triangular incl. diagonal
    q_decayed = q * torch.exp(G)[..., None]
    G_last = G[..., -1:]
    k_to_end = k * torch.exp(G_last - G)[..., None]
    chunk_decay = torch.exp(G_last)[..., None]                    # [NC, N, HV, 1, 1]
    o = torch.empty(v.shape, dtype=torch.float32)
    for c in range(NC):
        D = U[c] - W[c] @ S
        o[c] = q_decayed[c] @ S + attn[c] @ D
        S = chunk_decay[c] * S + k_to_end[c].transpose(-1, -2) @ D
    return o, S


def chunk_gated_delta_rule_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    chunk_size: int = 64,
):
    """Chunked gated delta rule in torch (same math, layouts and return values as
    `recurrent_gated_delta_rule_ref`; the algorithm is described in `_chunk_core`).

    Sequences are gathered into a zero-padded [N, NC * chunk_size] batch, so a tail chunk
    (length not a multiple of chunk_size) is an ordinary chunk whose padding does nothing.
    All heads, sequences and chunks are processed together except the state recurrence,
    which runs sequentially over chunks.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    d, q, k, vf, g, beta, S, bounds = _prepare_gdn(
        q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel)
    C = chunk_size
    longest = max(e - s for _, s, e in bounds)
    NC = -(-longest // C)

    def chunked(x):  # [B, T, HV, ...] -> [NC, N, HV, C, ...], chunk-major so that x[c] is contiguous
        x = _pad_sequences(x, bounds, NC * C)
        x = x.reshape((d.N, NC, C) + tuple(x.shape[2:]))
        return x.permute((1, 0, 3, 2) + tuple(range(4, x.dim()))).contiguous()

    qc, kc, vc = chunked(q), chunked(k), chunked(vf)
    gc, bc = chunked(g), chunked(beta)
    oc, S = _chunk_core(qc, kc, vc, gc, bc, S, C)
    o_padded = oc.permute(1, 0, 3, 2, 4).reshape(d.N, NC * C, d.HV, d.V)    # [N, L, HV, V]
    o = torch.zeros(d.B, d.T, d.HV, d.V, dtype=torch.float32)
    for n, (b, s, e) in enumerate(bounds):
        o[b, s:e] = o_padded[n, : e - s]
    return o.to(v.dtype), (S if output_final_state else None)


# ----------------------------------------------------------------------------------------------
# Short causal convolution
# ----------------------------------------------------------------------------------------------

def _activate(y: torch.Tensor, activation: Optional[str]) -> torch.Tensor:
    if activation in ("silu", "swish"):
        return F.silu(y)
    if activation is None:
        return y
    raise ValueError(f"activation must be 'silu', 'swish' or None, got {activation!r}")


def causal_conv1d_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Optional[str] = "silu",
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
):
    """Depthwise causal conv over time, channels last.

    x [B, T, D]; weight [D, W]; bias [D]; initial_state [B, D, W-1] = the W-1 inputs that
    precede x (oldest first; zeros if None).
    y[b, t, d] = act(bias[d] + sum_w weight[d, w] * xx[b, t + w, d]) where xx = [state, x] along time.
    Returns (y [B, T, D] in x's dtype, final_state [B, D, W-1] in x's dtype or None): the last W-1
    inputs of [state, x], i.e. the state to continue from.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, D] (channels last), got shape {tuple(x.shape)}")
    B, T, D = x.shape
    if weight.dim() != 2 or weight.shape[0] != D:
        raise ValueError(f"weight must be [D={D}, W], got shape {tuple(weight.shape)}")
    W = weight.shape[1]
    if initial_state is None:
        history = torch.zeros(B, D, W - 1, dtype=torch.float32)
    elif tuple(initial_state.shape) != (B, D, W - 1):
        raise ValueError(f"initial_state must be [B, D, W-1] = {(B, D, W - 1)}, got {tuple(initial_state.shape)}")
    else:
        history = initial_state.float()
    xx = torch.cat([history, x.float().transpose(1, 2)], dim=-1)   # [B, D, W-1+T]
    w = weight.float()
    y = sum(w[:, i, None] * xx[..., i: i + T] for i in range(W))
    if bias is not None:
        y = y + bias.float()[:, None]
    y = _activate(y, activation).transpose(1, 2).to(x.dtype)
    final = xx[..., T:].to(x.dtype) if output_final_state else None
    return y, final


def causal_conv1d_update_ref(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Optional[str] = "silu",
) -> torch.Tensor:
    """One decode step of the causal conv, updating conv_state in place (as vLLM does).

    x [B, D] (the new token); conv_state [B, D, S] with S >= W-1, oldest input first (vLLM keeps
    S = W-1, HuggingFace S = W; only the last W-1 columns are read); weight [D, W].
    y = act(bias + sum_w weight[:, w] * [conv_state[..., -(W-1):], x][..., w]); then conv_state is
    shifted left by one with x written into its last column. Returns y [B, D] in x's dtype.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be [B, D] (one token), got shape {tuple(x.shape)}")
    B, D = x.shape
    if weight.dim() != 2 or weight.shape[0] != D:
        raise ValueError(f"weight must be [D={D}, W], got shape {tuple(weight.shape)}")
    W = weight.shape[1]
    if conv_state.dim() != 3 or conv_state.shape[:2] != (B, D) or conv_state.shape[2] < W - 1:
        raise ValueError(f"conv_state must be [B={B}, D={D}, S >= W-1={W - 1}], got {tuple(conv_state.shape)}")
    S = conv_state.shape[2]
    window = torch.cat([conv_state[..., S - (W - 1):].float(), x.float()[..., None]], dim=-1)  # [B, D, W]
    y = (window * weight.float()).sum(-1)
    if bias is not None:
        y = y + bias.float()
    if S > 0:
        conv_state.copy_(torch.cat([conv_state[..., 1:], x[..., None].to(conv_state.dtype)], dim=-1))
    return _activate(y, activation).to(x.dtype)


# ----------------------------------------------------------------------------------------------
# The Gated DeltaNet layer (HuggingFace Qwen3-Next weights)
# ----------------------------------------------------------------------------------------------

@dataclass
class Qwen3NextGDNConfig:
    """The linear-attention part of a Qwen3-Next config (HF field names).

    Defaults are Qwen3-Next-80B-A3B's. H = linear_num_key_heads, HV = linear_num_value_heads,
    K = linear_key_head_dim, V = linear_value_head_dim, W = linear_conv_kernel_dim.
    """

    hidden_size: int = 2048
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6

    def __post_init__(self):
        H, HV = self.linear_num_key_heads, self.linear_num_value_heads
        if H <= 0 or HV % H != 0:
            raise ValueError(f"linear_num_value_heads={HV} must be a positive multiple of linear_num_key_heads={H}")
        if self.linear_conv_kernel_dim < 1:
            raise ValueError(f"linear_conv_kernel_dim must be >= 1, got {self.linear_conv_kernel_dim}")

    @classmethod
    def small(cls) -> "Qwen3NextGDNConfig":
        """A tiny config for tests: 2 key heads, 4 value heads (HV/H = 2), head dims 32."""
        return cls(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4)

    @classmethod
    def from_hf_config(cls, cfg) -> "Qwen3NextGDNConfig":
        """From a HF config object or dict (extra fields are ignored)."""
        get = cfg.get if isinstance(cfg, dict) else (lambda name, default=None: getattr(cfg, name, default))
        kwargs = {f: get(f) for f in cls.__dataclass_fields__ if get(f) is not None}
        return cls(**kwargs)

    @property
    def num_heads_per_group(self) -> int:
        """Value heads per key head (HV / H)."""
        return self.linear_num_value_heads // self.linear_num_key_heads

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: q, k, v concatenated."""
        return 2 * self.key_dim + self.value_dim


@dataclass
class GDNCache:
    """Per-layer decode cache.

    conv_state      [B, conv_dim, W-1], activation dtype: the last W-1 pre-conv q|k|v inputs.
    recurrent_state [B, HV, K, V] fp32.
    Both None until a prefill fills them.
    """

    conv_state: Optional[torch.Tensor] = None
    recurrent_state: Optional[torch.Tensor] = None

    @property
    def has_state(self) -> bool:
        return self.conv_state is not None and self.recurrent_state is not None


def hf_weight_shapes(config: Qwen3NextGDNConfig) -> dict:
    """HF state-dict names and shapes of one Qwen3NextGatedDeltaNet layer."""
    c = config
    return {
        "in_proj_qkvz.weight": (2 * c.key_dim + 2 * c.value_dim, c.hidden_size),
        "in_proj_ba.weight": (2 * c.linear_num_value_heads, c.hidden_size),
        "conv1d.weight": (c.conv_dim, 1, c.linear_conv_kernel_dim),
        "dt_bias": (c.linear_num_value_heads,),
        "A_log": (c.linear_num_value_heads,),
        "norm.weight": (c.linear_value_head_dim,),
        "out_proj.weight": (c.hidden_size, c.value_dim),
    }


def make_random_weights(config: Qwen3NextGDNConfig, dtype=torch.float32, seed: int = 0) -> dict:
    """A random HF-format state dict with activations of order one.

    Projections ~ N(0, 1/fan_in); conv ~ U(+-1/sqrt(W)) (torch's default); A = exp(A_log) ~ U(0, 16]
    and dt_bias = 1 as HF initialises them; norm.weight ~ 1 + N(0, 0.1^2) (HF uses ones; random
    here so that a misapplied weight shows). A_log and dt_bias stay fp32, as in the checkpoints.
    """
    gen = torch.Generator().manual_seed(seed)
    shapes = hf_weight_shapes(config)
    W = config.linear_conv_kernel_dim

    def normal(shape, std):
        return torch.randn(shape, generator=gen) * std

    w = {
        "in_proj_qkvz.weight": normal(shapes["in_proj_qkvz.weight"], config.hidden_size ** -0.5),
        "in_proj_ba.weight": normal(shapes["in_proj_ba.weight"], config.hidden_size ** -0.5),
        "conv1d.weight": (torch.rand(shapes["conv1d.weight"], generator=gen) * 2 - 1) / math.sqrt(W),
        "norm.weight": 1 + normal(shapes["norm.weight"], 0.1),
        "out_proj.weight": normal(shapes["out_proj.weight"], config.value_dim ** -0.5),
    }
    w = {name: t.to(dtype) for name, t in w.items()}
    A = (torch.rand(shapes["A_log"], generator=gen) * 16).clamp_min(1e-3)
    w["A_log"] = torch.log(A)
    w["dt_bias"] = torch.ones(shapes["dt_bias"])
    return w


def split_qkvz_ba(mixed_qkvz: torch.Tensor, mixed_ba: torch.Tensor, config: Qwen3NextGDNConfig):
    """Undo the grouped per-key-head layout of HF's fused projections.

    mixed_qkvz [..., H * (2K + 2 r V)] is, for each key head h (r = HV/H value heads per group):
    [q_h (K) | k_h (K) | v of value heads h*r..h*r+r-1 (r*V) | z of the same heads (r*V)].
    mixed_ba [..., H * 2r] is, per key head h: [b of its r value heads | a of its r value heads].
    Returns q, k [..., H, K]; v, z [..., HV, V]; b, a [..., HV].
    """
    c = config
    H, HV, K, V, r = (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                      c.linear_value_head_dim, c.num_heads_per_group)
    lead = mixed_qkvz.shape[:-1]
    qkvz = mixed_qkvz.reshape(lead + (H, 2 * K + 2 * r * V))
    q, k, v, z = torch.split(qkvz, [K, K, r * V, r * V], dim=-1)
    ba = mixed_ba.reshape(mixed_ba.shape[:-1] + (H, 2 * r))
    b, a = torch.split(ba, [r, r], dim=-1)
    v = v.reshape(lead + (HV, V))
    z = z.reshape(lead + (HV, V))
    b = b.reshape(mixed_ba.shape[:-1] + (HV,))
    a = a.reshape(mixed_ba.shape[:-1] + (HV,))
    return q, k, v, z, b, a


def split_projection_weights(weights: dict, config: Qwen3NextGDNConfig) -> dict:
    """De-interleave in_proj_qkvz / in_proj_ba into contiguous per-role matrices.

    Returns wq, wk [H*K, hidden], wv, wz [HV*V, hidden], wb, wa [HV, hidden] such that
    x @ wq.T, reshaped [..., H, K], equals the q of `split_qkvz_ba` (same for the others).
    """
    hidden = config.hidden_size
    # a weight matrix is the projection of the identity: split its rows like activations
    wq, wk, wv, wz, wb, wa = split_qkvz_ba(
        weights["in_proj_qkvz.weight"].T, weights["in_proj_ba.weight"].T, config)
    return {
        "wq": wq.reshape(hidden, -1).T.contiguous(),
        "wk": wk.reshape(hidden, -1).T.contiguous(),
        "wv": wv.reshape(hidden, -1).T.contiguous(),
        "wz": wz.reshape(hidden, -1).T.contiguous(),
        "wb": wb.T.contiguous(),
        "wa": wa.T.contiguous(),
    }


def gated_rms_norm_ref(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm(x) * weight * SiLU(gate) over the last dim, all in fp32; result in x's dtype."""
    xf = x.float()
    xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xn * weight.float() * F.silu(gate.float())).to(x.dtype)


def gdn_gates(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b), both fp32. a, b [..., HV]."""
    g = -torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float())
    return g, torch.sigmoid(b.float())


def gated_deltanet_layer_ref(
    hidden_states: torch.Tensor,
    weights: dict,
    config: Qwen3NextGDNConfig,
    cache: Optional[GDNCache] = None,
) -> torch.Tensor:
    """Qwen3-Next Gated DeltaNet layer in plain torch, HF weights (see `hf_weight_shapes`).

    hidden_states [B, T, hidden] -> [B, T, hidden] in its dtype. Projections run in the
    activation dtype; gates, conv, delta rule and norm compute in fp32.

    Modes: without a cache, a plain prefill. With a cache that holds no state yet, a prefill
    that fills it. With a filled cache: T == 1 is a decode step (conv update + recurrent rule),
    T > 1 continues the sequence (conv from the cached state + chunked rule from the cached
    state). The cache is updated in place.
    """
    c = config
    if hidden_states.dim() != 3 or hidden_states.shape[-1] != c.hidden_size:
        raise ValueError(f"hidden_states must be [B, T, {c.hidden_size}], got {tuple(hidden_states.shape)}")
    B, T, _ = hidden_states.shape
    dtype = hidden_states.dtype
    H, HV, K, V = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim

    mixed_qkvz = F.linear(hidden_states, weights["in_proj_qkvz.weight"].to(dtype))
    mixed_ba = F.linear(hidden_states, weights["in_proj_ba.weight"].to(dtype))
    q, k, v, z, b, a = split_qkvz_ba(mixed_qkvz, mixed_ba, c)
    mixed_qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1)   # [B, T, conv_dim]

    conv_w = weights["conv1d.weight"].reshape(c.conv_dim, c.linear_conv_kernel_dim)
    conv_b = weights.get("conv1d.bias")
    continuing = cache is not None and cache.has_state
    decode = continuing and T == 1
    if decode:
        mixed_qkv = causal_conv1d_update_ref(mixed_qkv[:, 0], cache.conv_state, conv_w, conv_b)[:, None]
    else:
        mixed_qkv, conv_state = causal_conv1d_ref(
            mixed_qkv, conv_w, conv_b, activation="silu",
            initial_state=cache.conv_state if continuing else None,
            output_final_state=cache is not None)
        if cache is not None:
            cache.conv_state = conv_state

    q, k, v = torch.split(mixed_qkv, [c.key_dim, c.key_dim, c.value_dim], dim=-1)
    q, k, v = q.reshape(B, T, H, K), k.reshape(B, T, H, K), v.reshape(B, T, HV, V)
    g, beta = gdn_gates(a, b, weights["A_log"], weights["dt_bias"])

    rule = recurrent_gated_delta_rule_ref if decode else chunk_gated_delta_rule_ref
    o, state = rule(q, k, v, g, beta,
                    initial_state=cache.recurrent_state if continuing else None,
                    output_final_state=cache is not None, use_qk_l2norm_in_kernel=True)
    if cache is not None:
        cache.recurrent_state = state

    o = gated_rms_norm_ref(o, z, weights["norm.weight"], c.rms_norm_eps)       # [B, T, HV, V]
    return F.linear(o.reshape(B, T, c.value_dim), weights["out_proj.weight"].to(dtype))

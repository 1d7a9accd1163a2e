"""Qwen3-Next's gated full attention in plain torch, written from its equations: the oracle of
``attention.Qwen3NextAttention``.

For one layer with H query heads and KVH key/value heads of size D (G = H / KVH), R = rotary_dim:

    [q_h | gate_h] = (x Wq^T + bq) per head h           (q_proj's rows: head h's query, then its gate)
    k = x Wk^T + bk,  v = x Wv^T + bv
    q_h <- RMSNorm(q_h) * (1 + wq),  k_h <- RMSNorm(k_h) * (1 + wk)      (fp32, rounded to x's dtype)
    rope on channels [0, R) of q and k: inv_freq_i = theta^(-2i / R), angle = position * inv_freq,
        cos / sin = [cos(angle), cos(angle)] / [sin .., sin ..]; y = y cos + rotate_half(y) sin
        with rotate_half([a, b]) = [-b, a] over the R channels
    o_h = softmax(q_h k_g^T / sqrt(D) + mask) v_g           with g = h // G (grouped-query attention)
        mask: key j visible to query i when j <= i and key j is a real token (attention_mask 1);
        a query sees its own key always (so a pad query has a finite, meaningless output)
    y = (o * sigmoid(gate)) Wo^T + bo

Every step is computed in fp32 from the weights and input given; the result is rounded to x's dtype.
"""
from __future__ import annotations

from typing import Optional

import torch


def rotary_inv_freq(rotary_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i / R) for i < R / 2, fp32."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))


def _rms_norm_zero_centred(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())


def _rope(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int, theta: float) -> torch.Tensor:
    """x [B, T, heads, D]; positions [B, T]."""
    angle = positions.float()[..., None] * rotary_inv_freq(rotary_dim, theta)          # [B, T, R/2]
    cos = torch.cat([angle.cos(), angle.cos()], -1)[:, :, None]
    sin = torch.cat([angle.sin(), angle.sin()], -1)[:, :, None]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = torch.cat([-rot[..., half:], rot[..., :half]], -1)
    return torch.cat([rot * cos + rotated * sin, rest], -1)


def visible_keys(attention_mask: Optional[torch.Tensor], B: int, T: int) -> torch.Tensor:
    """[B, T, T] bool: query i sees key j (causal, real keys only, and always itself)."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = (j <= i).expand(B, T, T)
    if attention_mask is not None:
        allowed = allowed & (attention_mask[:, None, :] != 0)
    return allowed | (j == i)


def attention_reference(weights: dict, config, hidden_states: torch.Tensor, position_ids: torch.Tensor,
                        attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One layer's output [B, T, hidden] from HF-named weights (``q_proj.weight`` ... ``k_norm.weight``)."""
    c = config
    H, KVH, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    B, T, _ = hidden_states.shape
    x = hidden_states.float()
    w = {k: v.float() for k, v in weights.items()}

    def proj(name):
        return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))

    qg = proj("q_proj").view(B, T, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(B, T, H * D)
    k = proj("k_proj").view(B, T, KVH, D)
    v = proj("v_proj").view(B, T, KVH, D)
    q = _rms_norm_zero_centred(q, w["q_norm.weight"], c.rms_norm_eps)
    k = _rms_norm_zero_centred(k, w["k_norm.weight"], c.rms_norm_eps)
    q = _rope(q, position_ids, c.rotary_dim, c.rope_theta)
    k = _rope(k, position_ids, c.rotary_dim, c.rope_theta)

    G = H // KVH
    q = q.permute(0, 2, 1, 3)                                              # [B, H, T, D]
    k = k.permute(0, 2, 1, 3).repeat_interleave(G, dim=1)
    v = v.permute(0, 2, 1, 3).repeat_interleave(G, dim=1)
    scores = q @ k.transpose(-1, -2) / D ** 0.5
    scores = scores.masked_fill(~visible_keys(attention_mask, B, T)[:, None], float("-inf"))
    o = (torch.softmax(scores, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, H * D)
    y = torch.nn.functional.linear(o * torch.sigmoid(gate), w["o_proj.weight"], w.get("o_proj.bias"))
    return y.to(hidden_states.dtype)

"""Decompositions of torch's fused transformer fast path, so that its parts reach pypto's rules.

``nn.TransformerEncoderLayer`` (and ``nn.MultiheadAttention``) in eval mode under ``no_grad`` call one
fused op, ``aten._transformer_encoder_layer_fwd`` (``aten._native_multi_head_attention``), that core ATen
does not decompose. Written out here as what the op computes (fused qkv projection, scaled dot-product
attention per head, output projection, then the residual / LayerNorm / feed-forward of the layer,
post-norm or pre-norm), AOT autograd decomposes the pieces further and pypto's rules take them.

Kept fused (the decomposition returns NotImplemented, the op stays in eager): nested-tensor inputs and
any attention mask (the fast path's mask kinds, merged key-padding and attention masks, follow the
fused kernel's own conventions), and ``need_weights=True`` for multi-head attention.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _attention(x: torch.Tensor, num_heads: int, qkv_weight, qkv_bias, proj_weight, proj_bias) -> torch.Tensor:
    """Self-attention of ``x`` [B, L, E] with a fused [3E, E] input projection, no mask."""
    b, length, embed = x.shape
    head = embed // num_heads
    qkv = torch.nn.functional.linear(x, qkv_weight, qkv_bias)
    q, k, v = (t.reshape(b, length, num_heads, head).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / head ** 0.5)
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    out = out.transpose(1, 2).reshape(b, length, embed)
    return torch.nn.functional.linear(out, proj_weight, proj_bias)


def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                  mask=None, mask_type=None):
    if mask is not None or src.is_nested or src.dim() != 3:
        return NotImplemented
    F = torch.nn.functional

    def norm1(t):
        return F.layer_norm(t, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def norm2(t):
        return F.layer_norm(t, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    def attention(t):
        return _attention(t, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)

    def feed_forward(t):
        hidden = F.linear(t, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    x = src
    if norm_first:
        x = x + attention(norm1(x))
        return x + feed_forward(norm2(x))
    x = norm1(x + attention(x))
    return norm2(x + feed_forward(x))


def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    # self-attention only: the fast path passes the same tensor three times
    if (mask is not None or need_weights or query.is_nested or query.dim() != 3
            or key is not query or value is not query):
        return NotImplemented
    out = _attention(query, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias)
    return out, None            # the fused op returns no weights when need_weights is False


DECOMPOSITIONS = {
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
    aten._native_multi_head_attention.default: native_multi_head_attention,
}

"""The whole Qwen3-Next causal LM in plain torch, from the equations, over a HuggingFace-format state dict: the
oracle of ``model.Qwen3NextForCausalLM``. Each block is its own plain-torch reference (``reference`` for the GDN
layer, ``attention_reference``, ``moe_reference``); this module adds the embedding, the zero-centred norms, the
residual stream and the LM head. It keeps no caches: ``generate_ref`` runs the whole sequence again for every
new token, so it checks the model's cached decode without sharing its logic.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from . import attention_reference, moe_reference
from .config import Qwen3NextConfig
from .reference import gated_deltanet_layer_ref


def zero_centred_rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * (1 + weight) in fp32, rounded once to x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * (1.0 + weight.float())).to(x.dtype)


def _sub(weights: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Left padding's positions: each real token's index among its row's real tokens; pads 0."""
    return (attention_mask.long().cumsum(1) - 1).clamp_min(0)


def forward_ref(input_ids: torch.Tensor, weights: dict, config, attention_mask: Optional[torch.Tensor] = None,
                dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Logits [B, T, vocab] (fp32) of ``input_ids`` [B, T]; ``attention_mask`` [B, T] 1 real / 0 left pad.
    Activations in ``dtype`` (default: the embedding's)."""
    c = Qwen3NextConfig.from_any(config)
    emb = weights["model.embed_tokens.weight"]
    dtype = dtype or emb.dtype
    B, T = input_ids.shape
    mask = torch.ones(B, T, dtype=torch.long) if attention_mask is None else attention_mask.long()
    position_ids = positions_from_mask(mask)
    x = emb.to(dtype)[input_ids]
    gdn_cfg = c.gdn_config()
    for i, kind in enumerate(c.layer_types):
        p = f"model.layers.{i}."
        h = zero_centred_rms_norm_ref(x, weights[p + "input_layernorm.weight"], c.rms_norm_eps)
        if kind == "linear_attention":
            h = (h * mask[:, :, None]).to(dtype)             # pads zeroed before the linear attention
            h = gated_deltanet_layer_ref(h, _sub(weights, p + "linear_attn."), gdn_cfg)
        else:
            h = attention_reference.attention_reference(_sub(weights, p + "self_attn."), c, h, position_ids,
                                                        attention_mask=mask)
        x = x + h
        h = zero_centred_rms_norm_ref(x, weights[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        mlp = _sub(weights, p + "mlp.")
        if c.is_sparse_layer(i):
            h = moe_reference.sparse_moe_block(h, mlp, c.num_experts_per_tok, c.norm_topk_prob)
        else:
            h = moe_reference.swiglu_mlp(h, *(mlp[f"{n}_proj.weight"].to(dtype) for n in ("gate", "up", "down")))
        x = x + h
    x = zero_centred_rms_norm_ref(x, weights["model.norm.weight"], c.rms_norm_eps)
    head = weights.get("lm_head.weight", emb) if not c.tie_word_embeddings else emb
    return F.linear(x, head.to(dtype)).float()


def generate_ref(input_ids: torch.Tensor, weights: dict, config, max_new_tokens: int,
                 attention_mask: Optional[torch.Tensor] = None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Greedy tokens: prompt + ``max_new_tokens`` [B, T + n], each token the argmax of a full forward."""
    out = input_ids.clone()
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.clone()
    for _ in range(max_new_tokens):
        nxt = forward_ref(out, weights, config, attention_mask=mask, dtype=dtype)[:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None].to(out.dtype)], 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return out


def random_hf_weights(config, dtype=torch.float32, seed: int = 0) -> dict:
    """A random HuggingFace-format state dict of the whole model: normal weights scaled so that activations stay
    O(1), norms' zero-centred weights small, GDN gates from the GDN reference's generator."""
    from .reference import make_random_weights
    c = Qwen3NextConfig.from_any(config)
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape, std):
        return (torch.randn(*shape, generator=gen) * std).to(dtype)

    out = {"model.embed_tokens.weight": normal(c.vocab_size, c.hidden_size, std=1.0),
           "model.norm.weight": normal(c.hidden_size, std=0.1)}
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = normal(c.vocab_size, c.hidden_size, std=c.hidden_size ** -0.5)
    for i, kind in enumerate(c.layer_types):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = normal(c.hidden_size, std=0.1)
        out[p + "post_attention_layernorm.weight"] = normal(c.hidden_size, std=0.1)
        if kind == "linear_attention":
            gdn = make_random_weights(c.gdn_config(), dtype=dtype, seed=seed * 1000 + i)
            out.update({p + "linear_attn." + k: v for k, v in gdn.items()})
        else:
            H, KVH, D, hid = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
            shapes = {"q_proj": (2 * H * D, hid), "k_proj": (KVH * D, hid), "v_proj": (KVH * D, hid),
                      "o_proj": (hid, H * D)}
            for name, shape in shapes.items():
                out[f"{p}self_attn.{name}.weight"] = normal(*shape, std=shape[1] ** -0.5)
                if c.attention_bias:
                    out[f"{p}self_attn.{name}.bias"] = normal(shape[0], std=0.02)
            out[p + "self_attn.q_norm.weight"] = normal(D, std=0.1)
            out[p + "self_attn.k_norm.weight"] = normal(D, std=0.1)
        if c.is_sparse_layer(i):
            mlp = moe_reference.random_state(c, dtype=dtype, generator=gen)
        else:
            I = c.intermediate_size
            mlp = {"gate_proj.weight": normal(I, c.hidden_size, std=c.hidden_size ** -0.5),
                   "up_proj.weight": normal(I, c.hidden_size, std=c.hidden_size ** -0.5),
                   "down_proj.weight": normal(c.hidden_size, I, std=I ** -0.5)}
        out.update({p + "mlp." + k: v for k, v in mlp.items()})
    return out

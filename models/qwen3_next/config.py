"""``Qwen3NextConfig``: the fields of a whole Qwen3-Next model, with transformers' names and defaults.

Any object or dict with the same field names converts (``Qwen3NextConfig.from_any``): a transformers
``Qwen3NextConfig``, a JSON dict of a checkpoint's config, or this class itself. transformers stays optional.
Defaults are Qwen3-Next-80B-A3B's; ``tiny()`` is the small config the tests run.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Optional

from .reference import Qwen3NextGDNConfig

_GDN = Qwen3NextGDNConfig()          # the linear-attention fields' defaults are the GDN layer's
LAYER_TYPES = ("linear_attention", "full_attention")


def _default_rope() -> dict:
    return {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}


@dataclass
class Qwen3NextConfig:
    vocab_size: int = 151936
    hidden_size: int = _GDN.hidden_size
    intermediate_size: int = 5632            # the dense MLP of mlp_only_layers / non-sparse layers
    num_hidden_layers: int = 48
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = _GDN.rms_norm_eps
    tie_word_embeddings: bool = False
    rope_parameters: dict = field(default_factory=_default_rope)
    attention_bias: bool = False
    linear_conv_kernel_dim: int = _GDN.linear_conv_kernel_dim
    linear_key_head_dim: int = _GDN.linear_key_head_dim
    linear_value_head_dim: int = _GDN.linear_value_head_dim
    linear_num_key_heads: int = _GDN.linear_num_key_heads
    linear_num_value_heads: int = _GDN.linear_num_value_heads
    decoder_sparse_step: int = 1
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    num_experts_per_tok: int = 10
    num_experts: int = 512
    norm_topk_prob: bool = True
    mlp_only_layers: list = field(default_factory=list)
    layer_types: Optional[list] = None       # None: three linear_attention layers, then one full_attention

    def __post_init__(self):
        if self.layer_types is None:
            self.layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                for i in range(self.num_hidden_layers)]
        self.layer_types = list(self.layer_types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                             f"num_hidden_layers={self.num_hidden_layers}")
        bad = sorted({t for t in self.layer_types if t not in LAYER_TYPES})
        if bad:
            raise ValueError(f"layer_types: unknown {bad}; expected {' / '.join(LAYER_TYPES)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} must be in [1, num_experts="
                             f"{self.num_experts}]")
        rope = _default_rope()
        rope.update(self.rope_parameters or {})
        self.rope_parameters = rope

    # ------------------------------------------------------------------ conversion
    @classmethod
    def from_any(cls, cfg) -> "Qwen3NextConfig":
        """From this class, a transformers config, or a dict (unknown fields ignored, missing ones defaulted)."""
        if isinstance(cfg, cls):
            return cfg
        get = cfg.get if isinstance(cfg, dict) else (lambda name, default=None: getattr(cfg, name, default))
        kwargs = {f.name: get(f.name) for f in fields(cls) if get(f.name) is not None}
        if "rope_parameters" not in kwargs:       # older configs keep rope_theta / partial_rotary_factor flat
            flat = {k: get(k) for k in ("rope_theta", "partial_rotary_factor") if get(k) is not None}
            if flat:
                kwargs["rope_parameters"] = flat
        return cls(**kwargs)

    def to_hf(self):
        """The same config as a transformers ``Qwen3NextConfig`` (needs transformers)."""
        from transformers import Qwen3NextConfig as HFConfig
        return HFConfig(**{f.name: getattr(self, f.name) for f in fields(self)})

    def gdn_config(self) -> Qwen3NextGDNConfig:
        """The linear-attention fields, as the GDN layer takes them."""
        return Qwen3NextGDNConfig.from_hf_config(self)

    @classmethod
    def tiny(cls, **overrides) -> "Qwen3NextConfig":
        """A small model for tests and the demo: 4 layers (3 GDN, 1 gated attention), 8 experts top-2."""
        base = cls(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                   linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
                   linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
                   shared_expert_intermediate_size=32, num_experts_per_tok=2, num_experts=8)
        return replace(base, **overrides) if overrides else base

    # ------------------------------------------------------------------ derived
    @property
    def rotary_dim(self) -> int:
        """Leading channels of each head that get the rotary embedding (partial_rotary_factor of head_dim)."""
        return int(self.head_dim * self.rope_parameters["partial_rotary_factor"])

    @property
    def rope_theta(self) -> float:
        return float(self.rope_parameters["rope_theta"])

    def is_sparse_layer(self, layer_idx: int) -> bool:
        """Whether layer ``layer_idx``'s MLP is the sparse MoE block (else the dense MLP), as transformers decides."""
        return (layer_idx not in self.mlp_only_layers and self.num_experts > 0
                and (layer_idx + 1) % self.decoder_sparse_step == 0)

"""Qwen3-Next's Gated DeltaNet layer in pypto: the kernels (chunked prefill, recurrent decode, short
causal conv) with flash-linear-attention's signatures, the layer as a pypto.nn Module, and the
plain-torch oracles they are verified against (``reference``)."""
from .functional import (GDNArgumentError, causal_conv1d, causal_conv1d_update, chunk_gated_delta_rule,
                         fused_recurrent_gated_delta_rule)
from .layer import Qwen3NextGatedDeltaNet
from .reference import GDNCache, Qwen3NextGDNConfig

__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d", "causal_conv1d_update",
           "Qwen3NextGatedDeltaNet", "Qwen3NextGDNConfig", "GDNCache", "GDNArgumentError"]

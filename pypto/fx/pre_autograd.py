"""Rewrites of the graph dynamo captured, made before AOT autograd differentiates it.

``scaled_dot_product_attention``: on CPU, autograd sees SDPA as ``_scaled_dot_product_flash_attention_for_cpu``
(its backward, ``..._for_cpu_backward``, takes the forward's logsumexp). torch's decomposition of that
forward returns the attention weights where the logsumexp belongs: right for inference, a wrong
gradient in training (dx off by whole units on a pre-norm block, issue 19). pypto therefore never
uses that decomposition (``EXCLUDED_DECOMPOSITIONS``), and replaces each dropout-free SDPA call with
torch's own math definition (``aten._scaled_dot_product_attention_math``) before autograd: the forward
and the backward are then plain matmul / softmax / where graphs that pypto partitions like any other,
and autograd derives the backward from the math itself. A call with dropout stays as it is (flash
forward and backward, in eager)."""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("pypto.dynamo")

aten = torch.ops.aten

# decompositions that are wrong under autograd (see above); inductor excludes the same one
EXCLUDED_DECOMPOSITIONS = (aten._scaled_dot_product_flash_attention_for_cpu.default,)

_SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention without dropout, by torch's math definition (what the
    decomposition of the CPU flash kernel computes, fully masked rows giving 0). A bool mask becomes
    the additive one (0 where True, -inf where False), as SDPA does before it calls the math kernel."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(attn_mask.logical_not(),
                                                                              float("-inf"))
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, 0.0, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


def _dropout_free(node: torch.fx.Node) -> bool:
    p = node.kwargs.get("dropout_p", node.args[4] if len(node.args) > 4 else 0.0)
    return isinstance(p, (int, float)) and p == 0


def rewrite_sdpa(gm: torch.fx.GraphModule) -> int:
    """Replace every dropout-free SDPA call of ``gm`` with ``sdpa_math``; returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA_TARGETS and _dropout_free(node):
            node.target = sdpa_math
            count += 1
    if count:
        gm.recompile()
        log.debug("pypto: %d scaled_dot_product_attention call(s) differentiated from their math definition",
                  count)
    return count

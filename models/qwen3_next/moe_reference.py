"""Plain-torch oracle of Qwen3-Next's sparse mixture-of-experts block, written from its equations.

For each token x (a row of hidden_states [B, T, hidden] flattened to [N, hidden]):

    p      = softmax(x Wr^T)                       fp32, over num_experts
    (w, e) = top-k of p                            k = num_experts_per_tok; w / sum(w) when norm_topk_prob
    y      = sum_j w_j MLP_{e_j}(x) + sigmoid(x g^T) MLP_shared(x)
    MLP(x) = W_down (SiLU(W_gate x) * (W_up x))    SwiGLU

Weights are one layer's ``mlp.`` state dict in HuggingFace's names and layouts (transformers 5):
``gate.weight`` [E, hidden], ``experts.gate_up_proj`` [E, 2 * I, hidden] (gate rows, then up rows),
``experts.down_proj`` [E, hidden, I], ``shared_expert.{gate,up,down}_proj.weight``,
``shared_expert_gate.weight`` [1, hidden]. Every product is in the weights' dtype, as transformers runs it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def swiglu_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """W_down (SiLU(W_gate x) * (W_up x)) with nn.Linear's [out, in] weights."""
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def route(x: torch.Tensor, router_weight: torch.Tensor, top_k: int, norm_topk_prob: bool):
    """(router logits [N, E] in x's dtype, routing weights [N, k] in x's dtype, expert ids [N, k] int64).
    The softmax is fp32; ties in top-k go to the lower expert id."""
    logits = F.linear(x, router_weight)
    probs = torch.softmax(logits.float(), dim=-1)
    # a stable descending sort: equal probabilities keep expert order (torch.topk leaves ties unspecified)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = torch.gather(probs, 1, order)
    if norm_topk_prob:
        weights = weights / weights.sum(-1, keepdim=True)
    return logits, weights.to(x.dtype), order


def expert_counts(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Tokens routed to each expert, int32 [E] (from the [N, k] expert ids)."""
    return torch.bincount(experts.reshape(-1), minlength=num_experts).to(torch.int32)


def sparse_moe_block(hidden_states: torch.Tensor, state: dict, top_k: int, norm_topk_prob: bool = True,
                     return_router_logits: bool = False):
    """The block on [B, T, hidden] (or [N, hidden]) with HF's ``mlp.`` weights ``state``."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    logits, weights, experts = route(x, state["gate.weight"], top_k, norm_topk_prob)
    gate_up, down = state["experts.gate_up_proj"], state["experts.down_proj"]
    inter = down.shape[-1]
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        token, slot = torch.nonzero(experts == e, as_tuple=True)
        if token.numel() == 0:
            continue
        y = swiglu_mlp(x[token], gate_up[e, :inter], gate_up[e, inter:], down[e])
        out.index_add_(0, token, y * weights[token, slot, None])
    shared = swiglu_mlp(x, state["shared_expert.gate_proj.weight"], state["shared_expert.up_proj.weight"],
                        state["shared_expert.down_proj.weight"])
    out = out + torch.sigmoid(F.linear(x, state["shared_expert_gate.weight"])) * shared
    out = out.reshape(shape)
    return (out, logits) if return_router_logits else out


def random_state(config, dtype=torch.float32, generator=None, scale: float = 1.0) -> dict:
    """Random HF-layout weights of one block (std ~ 1/sqrt(fan_in) times ``scale``)."""
    E, H = config.num_experts, config.hidden_size
    I, S = config.moe_intermediate_size, config.shared_expert_intermediate_size

    def w(*shape):
        return (torch.randn(*shape, generator=generator) * scale / shape[-1] ** 0.5).to(dtype)

    return {"gate.weight": w(E, H), "experts.gate_up_proj": w(E, 2 * I, H), "experts.down_proj": w(E, H, I),
            "shared_expert.gate_proj.weight": w(S, H), "shared_expert.up_proj.weight": w(S, H),
            "shared_expert.down_proj.weight": w(H, S), "shared_expert_gate.weight": w(1, H)}

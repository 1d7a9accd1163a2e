"""Plain torch.nn models for the torch.compile backend tests (tiny sizes: dynamo compiles are slow)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(1 + 0.1 * torch.randn(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class RMSNormSwiGLU(nn.Module):
    """x + SwiGLU(RMSNorm(x))."""

    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.norm, self.mlp = RMSNorm(d), SwiGLU(d, hidden)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class CausalAttention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class TransformerLayer(nn.Module):
    """Pre-norm block: LayerNorm -> causal attention -> residual, RMSNorm -> SwiGLU -> residual."""

    def __init__(self, d=16, heads=2, hidden=32):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = CausalAttention(d, heads)
        self.ffn = RMSNormSwiGLU(d, hidden)

    def forward(self, x):
        return self.ffn(x + self.attn(self.ln(x)))


class WithUnsupportedOp(nn.Module):
    """Linear -> an op pypto has no rule for (cumprod) -> Linear: the graph must split around it."""

    def __init__(self, d=16):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = torch.cumprod(1 + 0.1 * h, dim=-1)
        return self.fc2(h).exp()


MODELS = {"mlp": MLP, "rmsnorm_swiglu": RMSNormSwiGLU, "causal_attention": CausalAttention,
          "transformer_layer": TransformerLayer}


class IndexingAndScans(nn.Module):
    """Embedding, max over a dim (values and indices), cumsum, pad, gather, argmax, isnan/isinf."""

    def __init__(self, vocab=10, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)

    def forward(self, ids, x):
        e = self.emb(ids)
        values, indices = e.max(-1)
        padded = F.pad(torch.cumsum(e, dim=1), (1, 2), value=0.5)
        picked = torch.gather(x, 1, ids % x.shape[1])
        flags = (x.isnan() | x.isinf()).float()
        return values + indices.float() + padded.sum(-1) + picked + x.argmax(-1, keepdim=True).float() + flags

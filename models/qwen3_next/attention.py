"""``Qwen3NextAttention``: Qwen3-Next's gated full-attention layer as a ``pypto.nn.Module``, with decode through
a paged KV cache (``kv_cache.PagedKVCache``). The equations are in ``attention_reference`` (its oracle).

Weights have HuggingFace's names and shapes (``q_proj`` of 2 * heads * head_dim rows: per head its query then
its output gate; ``k_proj``, ``v_proj``, ``o_proj``, biases when ``attention_bias``; ``q_norm`` / ``k_norm``
weights zero-centred, applied as (1 + w)), so ``load_state_dict`` takes a layer's ``self_attn.`` keys as they
are and ``hf_state_dict`` gives them back.

``attn(hidden_states [B, T, hidden], position_ids [B, T], attention_mask=None, cache=None)``:
  * no cache, or a cache that holds nothing yet for this layer: prefill, causal over the T tokens. Prompts of
    different lengths are left padded (attention_mask [B, T], 1 real, 0 pad; position_ids from the caller,
    HF's cumsum(mask) - 1); pad keys are masked and a pad query's output is meaningless (finite: it sees
    itself). With a cache, the real tokens' keys and values (after norm and rope) are written into pages.
  * a cache that holds this layer's tokens and T == 1: one decode step per sequence. The step's key and value
    go into the next slot of the sequence's pages, then the query attends over all its pages. attention_mask,
    if given, covers this call's tokens only (the cache knows each sequence's real length).

The decode kernel is this module's traced forward (``decode=True``). Its control program reads
``seq_lens[b].item()`` (tokens stored) and ``block_table[b, j].item()`` (page j of sequence b) on the
device: the loop over a sequence's pages has ceildiv(seq_lens[b] + 1, block_size) iterations, each page is a
view at the row its table entry gives, the last one with the valid rows only. Attention over the pages is an
online softmax (running max, sum and fp32 accumulator per query row, rescaled page by page): it reads each page
once where it lies and needs no [B, max_len] gather buffer, whose size would have to be the longest sequence.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Optional

import torch

import pypto
import pypto.nn as nn
import pypto.nn.functional as F
from pypto.errors import ShapeError, SourceLoc, TypeMismatchError, user_entry
from pypto.frontend.context import is_tracing

from .attention_reference import rotary_inv_freq
from .config import Qwen3NextConfig
from .kv_cache import CacheError, PagedKVCache

_HERE = os.path.dirname(os.path.abspath(__file__))


def _caller() -> Optional[SourceLoc]:
    """The user's line that called into this package (frames of pypto and of models/qwen3_next skipped)."""
    from pypto.errors import _is_internal
    frame = sys._getframe(1)
    while frame is not None:
        f = os.path.abspath(frame.f_code.co_filename)
        if not _is_internal(f) and not f.startswith(_HERE + os.sep):
            return SourceLoc(f, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


class ZeroCentredRMSNorm(nn.Module):
    """RMSNorm over the last dim in fp32 with weight stored zero-centred (applied as 1 + w), result in x's
    dtype: Qwen3NextRMSNorm's form."""

    def __init__(self, dim: int, eps: float, dtype=torch.float32):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim, dtype=dtype))

    def forward(self, x):
        xf = pypto.cast(x, pypto.float32)
        xn = xf * pypto.rsqrt(pypto.mean(xf * xf, -1, keepdim=True) + self.eps)
        return pypto.cast(xn * (pypto.cast(self.weight, pypto.float32) + 1.0), x.dtype)


class Qwen3NextAttention(nn.Module):
    def __init__(self, config, layer_idx: int = 0, dtype=torch.float32):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        self.layer_idx = layer_idx
        H, KVH, D, hid = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
        if c.rotary_dim % 2 or not 0 < c.rotary_dim <= D:
            raise ShapeError(f"Qwen3NextAttention: rotary_dim={c.rotary_dim} (head_dim * partial_rotary_factor) must "
                             f"be even and in (0, head_dim={D}]", loc=_caller())
        bias = c.attention_bias
        self.q_proj = nn.Linear(hid, 2 * H * D, bias=bias, dtype=dtype)
        self.k_proj = nn.Linear(hid, KVH * D, bias=bias, dtype=dtype)
        self.v_proj = nn.Linear(hid, KVH * D, bias=bias, dtype=dtype)
        self.o_proj = nn.Linear(H * D, hid, bias=bias, dtype=dtype)
        self.q_norm = ZeroCentredRMSNorm(D, c.rms_norm_eps, dtype)
        self.k_norm = ZeroCentredRMSNorm(D, c.rms_norm_eps, dtype)
        self.register_buffer("inv_freq", rotary_inv_freq(c.rotary_dim, c.rope_theta), persistent=False)

    # ------------------------------------------------------------------ weights
    def hf_state_dict(self) -> dict:
        """HF's keys of one layer's ``self_attn.`` (without the prefix): the names here are HF's already."""
        return dict(self.state_dict())

    def _cast_floating(self, tdt: torch.dtype) -> None:
        keep = self.inv_freq.clone()                      # the rotary frequencies stay fp32
        super()._cast_floating(tdt)
        self.inv_freq = keep

    # ------------------------------------------------------------------ calling
    def default_dynamic_dims(self, arg: str, rank: int):
        if arg in ("hidden_states", "position_ids", "attention_mask"):     # decode drops the seq dim
            with_seq = rank == (3 if arg == "hidden_states" else 2)
            return {0: "batch", 1: "seq"} if with_seq else {0: "batch"}
        if arg in ("block_table", "seq_lens", "new_lens"):
            return {0: "batch"}
        return ()

    @user_entry
    def __call__(self, hidden_states, position_ids, attention_mask=None, cache: Optional[PagedKVCache] = None):
        if is_tracing():
            if cache is not None:
                raise CacheError("Qwen3NextAttention: a paged cache is used from eager calls, not inside a trace",
                                 loc=_caller())
            return self.forward(hidden_states, position_ids, attention_mask)
        B, T = self._check(hidden_states, position_ids, attention_mask)
        if cache is not None and not cache.allocated:
            cache.allocate(B)
        if cache is not None and cache.batch != B:
            raise CacheError(f"Qwen3NextAttention: the cache holds {cache.batch} sequences, hidden_states has "
                             f"batch {B}", loc=_caller())
        mask = None if attention_mask is None else attention_mask.to(torch.int32)
        if cache is None:
            return nn.Module.__call__(self, hidden_states, position_ids.to(torch.int32), mask)
        lens = cache.lengths(self.layer_idx)
        kp, vp = self._pages(cache)
        if cache.is_empty(self.layer_idx):
            new_lens = (mask.sum(1) if mask is not None else torch.full((B,), T)).to(torch.int32)
            self._reserve(cache, new_lens)
            out = nn.Module.__call__(self, hidden_states, position_ids.to(torch.int32), mask, kp, vp,
                                     cache.block_table, None, new_lens)
            cache.advance(self.layer_idx, new_lens)
            return out
        if T != 1:
            raise ShapeError(f"Qwen3NextAttention: a cache that holds tokens takes one new token per sequence "
                             f"(decode), found T={T}", loc=_caller(),
                             hint="prefill into an empty cache (allocate it again), then decode token by token")
        if mask is not None and int(mask.min()) == 0:
            raise ShapeError("Qwen3NextAttention: a decode step's attention_mask marks its token as a pad",
                             loc=_caller(), hint="the cache keeps real tokens only; every decode token is real")
        new_lens = (lens + 1).to(torch.int32)
        self._reserve(cache, new_lens)
        out = nn.Module.__call__(self, hidden_states[:, 0], position_ids[:, 0].to(torch.int32), None, kp, vp,
                                 cache.block_table, lens.clone(), None, True)
        cache.advance(self.layer_idx, new_lens)
        return out.unsqueeze(1)

    def _reserve(self, cache, new_lens):
        try:
            cache.reserve(self.layer_idx, new_lens)
        except CacheError as e:
            raise CacheError(e.message, loc=_caller(), hint=e.hint) from None

    def _pages(self, cache):
        c = self.config
        if cache.kv_heads != c.num_key_value_heads or cache.head_dim != c.head_dim:
            raise CacheError(f"Qwen3NextAttention: the cache's pages are for {cache.kv_heads} kv heads of "
                             f"{cache.head_dim}, this layer has {c.num_key_value_heads} of {c.head_dim}", loc=_caller())
        kp, vp = cache.k_pages[self.layer_idx], cache.v_pages[self.layer_idx]
        if kp.dtype != self.q_proj.weight.dtype:
            raise TypeMismatchError(f"Qwen3NextAttention: the cache's pages are {kp.dtype}, the layer's weights "
                                    f"{self.q_proj.weight.dtype}", loc=_caller())
        NB, BS = kp.shape[:2]
        return kp.view(NB, BS, -1), vp.view(NB, BS, -1)          # [pages, block_size, kv_heads * head_dim]

    def _check(self, x, pos, mask):
        loc = _caller()
        hid = self.config.hidden_size
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != hid:
            raise ShapeError(f"Qwen3NextAttention: hidden_states must be [batch, seq, {hid}], found "
                             f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}", loc=loc)
        B, T = x.shape[:2]
        if not isinstance(pos, torch.Tensor) or tuple(pos.shape) != (B, T):
            raise ShapeError(f"Qwen3NextAttention: position_ids must be [batch, seq] = [{B}, {T}], found "
                             f"{list(pos.shape) if isinstance(pos, torch.Tensor) else type(pos).__name__}", loc=loc)
        if pos.dtype.is_floating_point or pos.dtype == torch.bool:
            raise TypeMismatchError(f"Qwen3NextAttention: position_ids must be integers, found {pos.dtype}", loc=loc)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (B, T):
                raise ShapeError(f"Qwen3NextAttention: attention_mask must be [batch, seq] = [{B}, {T}], found "
                                 f"{list(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__}",
                                 loc=loc)
            m = mask.to(torch.int64)
            if bool(((m != 0) & (m != 1)).any()) or bool((m[:, 1:] < m[:, :-1]).any()):
                raise ShapeError("Qwen3NextAttention: attention_mask must be left padded: per row 0s (pads) then "
                                 "1s (real tokens)", loc=loc)
        return B, T

    # ------------------------------------------------------------------ the traced program
    def forward(self, hidden_states, position_ids, attention_mask=None, k_pages=None, v_pages=None,
                block_table=None, seq_lens=None, new_lens=None, decode: bool = False):
        """Prefill: hidden_states [B, T, hidden], position_ids [B, T]; with pages, the real tokens' k / v are
        written to them (new_lens[b] real tokens at the end of row b). Decode: hidden_states [B, hidden],
        position_ids [B], seq_lens [B] the tokens each sequence has stored. Pages [blocks, block_size,
        kv_heads * head_dim]; block_table [B, max_blocks] int32."""
        c = self.config
        H, KVH, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = hidden_states
        lead = list(x.shape[:-1])                                      # [B, T] (prefill) or [B] (decode)
        q2 = self.q_proj(x).reshape(*lead, H, 2 * D)
        q = self.q_norm(_last(q2, 0, D))
        gate = _last(q2, D, 2 * D).reshape(*lead, H * D)
        k = self.k_norm(self.k_proj(x).reshape(*lead, KVH, D))
        v = self.v_proj(x).reshape(*lead, KVH, D)
        cos, sin = self._rotary(position_ids)
        q, k = _rope(q, cos, sin, c.rotary_dim), _rope(k, cos, sin, c.rotary_dim)

        if decode:
            o = self._decode_attention(q, k, v, k_pages, v_pages, block_table, seq_lens)
        else:
            if k_pages is not None:
                self._store_prompt(k, k_pages, block_table, new_lens)
                self._store_prompt(v, v_pages, block_table, new_lens)
            o = self._prefill_attention(q, k, v, attention_mask)
        o = pypto.cast(pypto.cast(o, pypto.float32) * pypto.sigmoid(pypto.cast(gate, pypto.float32)), x.dtype)
        return self.o_proj(o)

    def _rotary(self, position_ids):
        """cos, sin [*lead, 1, R] fp32 of the positions (both halves repeat the frequencies, HF's layout)."""
        lead = list(position_ids.shape)
        angle = pypto.cast(position_ids, pypto.float32).reshape(*lead, 1) * self.inv_freq
        cos, sin = pypto.cos(angle), pypto.sin(angle)
        R = self.config.rotary_dim
        return (pypto.concat([cos, cos], -1).reshape(*lead, 1, R), pypto.concat([sin, sin], -1).reshape(*lead, 1, R))

    def _prefill_attention(self, q, k, v, attention_mask):
        """q [B, T, H, D], k / v [B, T, KVH, D] -> [B, T, H * D]."""
        B, T, H, D = q.shape
        qh, kh, vh = (pypto.permute(t, (0, 2, 1, 3)) for t in (q, k, v))
        if attention_mask is None:
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
        else:
            rows = pypto.arange(T).reshape(T, 1)
            cols = pypto.arange(T).reshape(1, T)
            real_key = attention_mask.reshape(B, 1, 1, T) != 0
            visible = pypto.logical_or(pypto.logical_and(cols <= rows, real_key), cols == rows)
            o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=visible, enable_gqa=True)
        return pypto.permute(o, (0, 2, 1, 3)).reshape(B, T, H * D)

    def _store_prompt(self, kv, pages, block_table, new_lens):
        """Row b's last new_lens[b] tokens of kv [B, T, KVH, D] into its pages, block by block."""
        B, T = kv.shape[0], kv.shape[1]
        BS, W = pages.shape[1], pages.shape[2]
        flat = kv.reshape(B, T, W)
        for b in pypto.loop(B):
            n = new_lens[b].item()
            for j in pypto.loop(pypto.ceildiv(n, BS)):
                page = block_table[b, j].item()
                rows = pypto.min(BS, n - j * BS)
                part = pypto.view(flat, [1, BS, W], [b, T - n + j * BS, 0], valid_shape=[1, rows, W])
                pypto.assemble(part, [page, 0, 0], pages)

    def _decode_attention(self, q, k, v, k_pages, v_pages, block_table, seq_lens):
        """q [B, H, D], k / v [B, KVH, D] of the new token -> [B, H * D]: the new k / v go to slot seq_lens[b]
        of sequence b's pages, then each group of H / KVH query heads runs an online softmax over its pages."""
        B, H, D = q.shape
        KVH = k.shape[1]
        G = H // KVH
        BS, W = k_pages.shape[1], k_pages.shape[2]
        scale = 1.0 / math.sqrt(D)
        q2 = q.reshape(B * H, D)
        k2, v2 = k.reshape(B, 1, W), v.reshape(B, 1, W)
        out = pypto.zeros([B * H, D], dtype=pypto.float32)
        for b in pypto.loop(B):
            stored = seq_lens[b].item()
            slot = [block_table[b, stored // BS].item(), stored % BS, 0]
            pypto.assemble(pypto.view(k2, [1, 1, W], [b, 0, 0]), slot, k_pages)
            pypto.assemble(pypto.view(v2, [1, 1, W], [b, 0, 0]), slot, v_pages)
            n = stored + 1
            for h in range(KVH):
                qg = pypto.view(q2, [G, D], [b * H + h * G, 0])
                m_run = pypto.full([G, 1], float("-inf"), dtype=pypto.float32)
                l_run = pypto.zeros([G, 1], dtype=pypto.float32)
                acc = pypto.zeros([G, D], dtype=pypto.float32)
                for j in pypto.loop(pypto.ceildiv(n, BS)):
                    page = block_table[b, j].item()
                    rows = pypto.min(BS, n - j * BS)
                    kb = pypto.view(k_pages, [1, BS, D], [page, 0, h * D], valid_shape=[1, rows, D]).reshape(rows, D)
                    vb = pypto.view(v_pages, [1, BS, D], [page, 0, h * D], valid_shape=[1, rows, D]).reshape(rows, D)
                    s = pypto.matmul(qg, kb, b_trans=True, out_dtype=pypto.float32) * scale       # [G, rows]
                    m_old = m_run[:, :]
                    m_new = pypto.maximum(m_old, pypto.amax(s, -1, keepdim=True))
                    p = pypto.exp(s - m_new)
                    alpha = pypto.exp(m_old - m_new)
                    pypto.assemble(l_run[:, :] * alpha + pypto.sum(p, -1, keepdim=True), [0, 0], l_run)
                    pv = pypto.matmul(pypto.cast(p, vb.dtype), vb, out_dtype=pypto.float32)
                    pypto.assemble(acc[:, :] * alpha + pv, [0, 0], acc)
                    pypto.assemble(m_new, [0, 0], m_run)
                pypto.assemble(acc / l_run, [b * H + h * G, 0], out)
        return pypto.cast(out, q.dtype).reshape(B, H * D)


def _last(t, start: int, stop: int):
    """t[..., start:stop]."""
    return t[tuple([slice(None)] * (t.ndim - 1) + [slice(start, stop)])]


def _rope(x, cos, sin, R: int):
    """HF's rotate_half rotary embedding on the first R channels of x [..., heads, D], in fp32."""
    xf = pypto.cast(x, pypto.float32)
    rot, rest = _last(xf, 0, R), _last(xf, R, x.shape[-1])
    half = R // 2
    rotated = pypto.concat([-_last(rot, half, R), _last(rot, 0, half)], -1)
    parts = [rot * cos + rotated * sin] + ([rest] if R < x.shape[-1] else [])
    return pypto.cast(pypto.concat(parts, -1) if len(parts) > 1 else parts[0], x.dtype)

"""The whole Qwen3-Next decoder in pypto.nn: ``Qwen3NextForCausalLM`` (embedding, the decoder layers, the final
norm, the LM head) with HuggingFace weights and greedy generation through the layers' caches.

A decoder layer (as transformers' Qwen3NextDecoderLayer):

    h = input_layernorm(x)                        zero-centred RMSNorm: x_hat * (1 + w), in fp32
    x = x + mixer(h)                              GDN (linear_attention) or gated attention (full_attention)
    x = x + mlp(post_attention_layernorm(x))      sparse MoE, or the dense MLP (config.is_sparse_layer)

How it runs: each step is a compiled pypto program on the module's backend — the embedding, a layer's input
norm, its token mixer (which owns its cache: ``GDNCache`` for a GDN layer, ``PagedKVCache`` for attention), the
layer's residual + post norm + MLP + residual (``Qwen3NextDecoderLayer.forward``, one graph with the MLP or MoE
inlined), the final norm and the LM head. The model's own call sequences them in Python (as a serving loop
does) so that the mixers can take their caches; ``compile(...)`` sets the options of every part.

Left padding (batches of prompts of different lengths, as transformers' generate): ``attention_mask`` [B, T]
(1 real, 0 pad). Attention masks the pad keys; a GDN layer's input is zeroed at pad positions before the
projections (as transformers does), so pads leave no trace in its state. Positions are
``cumsum(mask) - 1`` (pads 0). A pad position's logits are don't-care.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

import torch

import pypto
import pypto.nn as nn
import pypto.nn.functional as F
from pypto.errors import PyptoError, ShapeError, SourceLoc, TypeMismatchError
from pypto.frontend.context import is_tracing
from pypto.nn.module import IncompatibleKeys, StateDictError
from pypto.runtime.progress import progress

from .attention import Qwen3NextAttention
from .config import Qwen3NextConfig
from .kv_cache import PagedKVCache
from .layer import Qwen3NextGatedDeltaNet
from .moe import Qwen3NextMLP, Qwen3NextSparseMoeBlock
from .reference import GDNCache

_HERE = os.path.dirname(os.path.abspath(__file__))


class ModelInputError(PyptoError):
    """Input ids, masks or generation arguments the model cannot take."""


def _caller() -> Optional[SourceLoc]:
    """The user's frame that called into this model (neither this package, pypto, torch nor the stdlib)."""
    from pypto.errors import _is_internal
    frame = sys._getframe(1)
    while frame is not None:
        f = frame.f_code.co_filename
        if not os.path.abspath(f).startswith(_HERE + os.sep) and not _is_internal(f):
            return SourceLoc(f, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _fp32(x):
    return x if x.dtype == pypto.float32 else pypto.cast(x, pypto.float32)


class Qwen3NextRMSNorm(nn.Module):
    """RMSNorm with a zero-centred weight (stored as HF stores it, zeros at init; applied as 1 + w), in fp32,
    the product rounded once to the input's dtype. ``norm(x, residual)`` adds first and returns
    ``(x + residual, norm(x + residual))``: the residual stream's add fused with the next norm."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, dtype=torch.float32):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=dtype))

    def forward(self, hidden_states, residual=None):
        if residual is not None:
            hidden_states = hidden_states + residual
        x = _fp32(hidden_states)
        x = x * pypto.rsqrt(pypto.mean(x * x, -1, keepdim=True) + self.eps)
        normed = pypto.cast(x * (_fp32(self.weight) + 1.0), hidden_states.dtype)
        return normed if residual is None else (hidden_states, normed)

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return tuple(range(rank - 1))

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class Qwen3NextEmbedding(nn.Embedding):
    """embed_tokens: each token's row copied from the table at its id, read as a data scalar by the control
    program, so a step moves its N rows. (F.embedding's index_select is a one-hot sum over the vocab, which
    reads the whole [151936, 2048] table: 622 MB, 2.9 ms of a 1-token decode step on a2a3.)"""

    def forward(self, input):
        B, T, H = input.shape[0], input.shape[1], self.embedding_dim
        out = pypto.zeros([B * T, H], dtype=self.weight.dtype)
        for b in pypto.loop(B):
            for t in pypto.loop(T):
                row = input[b, t].item()
                pypto.assemble(pypto.view(self.weight, [1, H], [row, 0]), [b * T + t, 0], out)
        return pypto.reshape(out, [B, T, H])


class _ZeroPads(nn.Module):
    """h with the rows of padding positions zeroed: the GDN layer's input under left padding."""

    def forward(self, hidden_states, keep):
        return hidden_states * pypto.cast(keep, hidden_states.dtype)

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return (0, 1)


class Qwen3NextDecoderLayer(nn.Module):
    """One decoder layer. Called eagerly, ``layer(x, position_ids, attention_mask, cache, residual=r)`` runs it
    on the residual stream x + r and returns ``(mlp_output, residual)``, whose sum is the layer's output (the
    last add is left to the next layer's input norm, fused); r None for the first layer. Its ``forward`` (the
    layer inlined in an enclosing trace, no cache) returns the output itself."""

    def __init__(self, config, layer_idx: int, dtype=torch.float32):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        self.layer_idx = layer_idx
        self.layer_type = c.layer_types[layer_idx]
        if self.layer_type == "linear_attention":
            self.linear_attn = Qwen3NextGatedDeltaNet(c.gdn_config(), dtype=dtype)
        else:
            self.self_attn = Qwen3NextAttention(c, layer_idx, dtype=dtype)
        if c.is_sparse_layer(layer_idx):
            self.mlp = Qwen3NextSparseMoeBlock(c, dtype=dtype)
        else:
            self.mlp = Qwen3NextMLP(c, intermediate_size=c.intermediate_size, dtype=dtype)
        self.input_layernorm = Qwen3NextRMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dtype)
        self.post_attention_layernorm = Qwen3NextRMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dtype)
        self._zero_pads = _ZeroPads()

    @property
    def mixer(self):
        return self.linear_attn if self.layer_type == "linear_attention" else self.self_attn

    def __call__(self, hidden_states, position_ids, attention_mask=None, cache=None, residual=None, pads=None):
        """``pads`` [B, T, 1] (0 at pad positions) zeroes a GDN layer's input (a left-padded prefill); the
        attention layer takes ``attention_mask`` (this call's tokens) instead."""
        if is_tracing():
            return self.forward(hidden_states, position_ids, attention_mask)
        if residual is None:
            x, h = hidden_states, self.input_layernorm(hidden_states)
        else:
            x, h = self.input_layernorm(hidden_states, residual)
        if self.layer_type == "linear_attention":
            if pads is not None:
                h = self._zero_pads(h, pads)
            mixed = self.linear_attn(h, cache)
        else:
            mixed = self.self_attn(h, position_ids, attention_mask=attention_mask, cache=cache)
        x, h = self.post_attention_layernorm(mixed, x)
        return self.mlp(h), x

    def forward(self, hidden_states, position_ids, attention_mask=None):
        h = self.input_layernorm(hidden_states)
        if self.layer_type == "linear_attention":
            if attention_mask is not None:
                h = h * pypto.cast(pypto.unsqueeze(attention_mask, -1), h.dtype)
            mixed = self.linear_attn(h)
        else:
            mixed = self.self_attn(h, position_ids, attention_mask)
        x, h = self.post_attention_layernorm(mixed, hidden_states)
        return x + self.mlp(h)


class Qwen3NextModel(nn.Module):
    """Embedding, decoder layers and the final norm (HF's ``model.`` prefix)."""

    def __init__(self, config, dtype=torch.float32):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        self.embed_tokens = Qwen3NextEmbedding(c.vocab_size, c.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList([Qwen3NextDecoderLayer(c, i, dtype=dtype) for i in range(c.num_hidden_layers)])
        self.norm = Qwen3NextRMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=dtype)

    def forward(self, input_ids, attention_mask=None, caches=None, position_ids=None):
        raise PyptoError("Qwen3NextModel runs inside Qwen3NextForCausalLM: call the causal LM")


class Qwen3NextForCausalLM(nn.Module):
    """The causal LM. ``model(input_ids [B, T], attention_mask=None) -> logits [B, T, vocab]``;
    ``model.generate(input_ids, max_new_tokens)`` greedy, prompt + new tokens as transformers returns them."""

    def __init__(self, config, dtype=torch.float32):
        super().__init__()
        c = self.config = Qwen3NextConfig.from_any(config)
        self.model = Qwen3NextModel(c, dtype=dtype)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False, dtype=dtype)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    # ------------------------------------------------------------------ compiling
    def compile(self, **options):
        """Set the compile options (backend=, machine=, dump=, timing_only=, trace=) of every part."""
        nn.Module.compile(self, **options)
        for m in self.modules():
            if m is not self:
                m.compile(**options)
        return self

    # ------------------------------------------------------------------ weights
    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load a HuggingFace Qwen3NextForCausalLM state dict (or this model's ``hf_state_dict()``): each
        layer's ``linear_attn.`` / ``self_attn.`` / ``mlp.`` entries go to that block's own loader.
        With tie_word_embeddings, ``lm_head.weight`` may be left out."""
        if not hasattr(state_dict, "items"):
            raise TypeMismatchError(f"load_state_dict: expected a mapping of names to tensors, found "
                                    f"{type(state_dict).__name__}", loc=_caller())
        sd = dict(state_dict)
        if self.config.tie_word_embeddings:
            head = sd.pop("lm_head.weight", None)
            if head is not None and "model.embed_tokens.weight" not in sd:
                sd["model.embed_tokens.weight"] = head
        missing, unexpected = [], []
        for prefix, block in self._blocks():
            part = {k[len(prefix):]: sd.pop(k) for k in [k for k in sd if k.startswith(prefix)]}
            result = block.load_state_dict(part, strict=strict, assign=assign)
            if result is not None:
                missing += [prefix + k for k in result.missing_keys]
                unexpected += [prefix + k for k in result.unexpected_keys]
        result = nn.Module.load_state_dict(self, sd, strict=False, assign=assign)
        blocks = tuple(p for p, _ in self._blocks())
        missing += [k for k in result.missing_keys if not k.startswith(blocks)
                    and not (self.config.tie_word_embeddings and k == "lm_head.weight")]
        unexpected += result.unexpected_keys
        if strict and (missing or unexpected):
            raise StateDictError("error(s) loading the state dict into Qwen3NextForCausalLM:\n    " + "\n    ".join(
                [f"missing key '{k}'" for k in missing] + [f"unexpected key '{k}'" for k in unexpected]),
                loc=_caller())
        return IncompatibleKeys(missing, unexpected)

    def hf_state_dict(self) -> dict:
        """The weights in HuggingFace's names and layouts (transformers' Qwen3NextForCausalLM loads them)."""
        blocks = self._blocks()
        prefixes = tuple(p for p, _ in blocks)
        out = {k: v for k, v in self.state_dict().items() if not k.startswith(prefixes)}
        for prefix, block in blocks:
            part = block.hf_state_dict() if hasattr(block, "hf_state_dict") else block.state_dict()
            out.update({prefix + k: v for k, v in part.items()})
        return out

    def _blocks(self):
        """(HF key prefix, block) of every token mixer and MLP: the blocks with their own HF layouts."""
        out = []
        for i, layer in enumerate(self.model.layers):
            name = "linear_attn" if layer.layer_type == "linear_attention" else "self_attn"
            out += [(f"model.layers.{i}.{name}.", layer.mixer), (f"model.layers.{i}.mlp.", layer.mlp)]
        return out

    # ------------------------------------------------------------------ running
    def _check_ids(self, input_ids, attention_mask, loc):
        c = self.config
        if not isinstance(input_ids, torch.Tensor):
            raise TypeMismatchError(f"input_ids: expected a torch tensor [batch, seq], found "
                                    f"{type(input_ids).__name__}", loc=loc)
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ShapeError(f"input_ids: expected shape [batch, seq] with seq >= 1, found "
                             f"{list(input_ids.shape)}", loc=loc, hint="a single prompt is input_ids[None]")
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise TypeMismatchError(f"input_ids: expected integer token ids, found {input_ids.dtype}", loc=loc)
        bad = (input_ids < 0) | (input_ids >= c.vocab_size)
        if bool(bad.any()):
            b, t = (int(i) for i in bad.nonzero()[0])
            raise ModelInputError(f"input_ids[{b}, {t}] = {int(input_ids[b, t])} is not a token id: expected "
                                  f"0 <= id < vocab_size = {c.vocab_size}", loc=loc)
        if attention_mask is not None:
            if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(input_ids.shape):
                found = list(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else \
                    type(attention_mask).__name__
                raise ShapeError(f"attention_mask: expected shape {list(input_ids.shape)} (input_ids'), found "
                                 f"{found}", loc=loc)
            m = attention_mask.to(torch.int64)
            if bool(((m != 0) & (m != 1)).any()):
                raise ModelInputError("attention_mask: expected 1 (token) or 0 (padding) entries", loc=loc)
            if bool((m[:, 1:] < m[:, :-1]).any()):
                raise ModelInputError("attention_mask: padding must be on the left (0s before 1s in every row), "
                                      "as transformers' generate pads", loc=loc)
            if bool((m.sum(1) == 0).any()):
                raise ModelInputError("attention_mask: a row with no token", loc=loc)

    def new_caches(self, batch: int, max_len: int, block_size: int = 16) -> list:
        """The caches of ``batch`` sequences of up to ``max_len`` tokens, one entry per layer: a ``GDNCache`` per
        GDN layer; one ``PagedKVCache`` (pages of ``block_size`` tokens, enough for every sequence) that all
        attention layers share, each with its own pages."""
        c = self.config
        per_seq = -(-max_len // block_size)
        kv = PagedKVCache(c, num_blocks=batch * per_seq, block_size=block_size, dtype=self.dtype,
                          max_blocks_per_seq=per_seq).allocate(batch)
        return [GDNCache() if t == "linear_attention" else kv for t in c.layer_types]

    def __call__(self, input_ids, attention_mask=None, caches=None, position_ids=None, logits_to_keep: int = 0):
        if is_tracing():
            raise PyptoError("Qwen3NextForCausalLM cannot be traced inside another function: call it directly",
                             loc=_caller())
        loc = _caller()
        self._check_ids(input_ids, attention_mask, loc)
        return self.forward(input_ids, attention_mask, caches, position_ids, logits_to_keep)

    def forward(self, input_ids, attention_mask=None, caches=None, position_ids=None, logits_to_keep: int = 0):
        """Logits [B, T, vocab] of ``input_ids`` [B, T] (of the last ``logits_to_keep`` positions when > 0).
        With ``caches`` (``new_caches``) the call continues the sequences the caches hold (a prefill when they
        are empty, a decode step for T == 1) and updates them."""
        B, T = input_ids.shape
        ids = input_ids.to(torch.int32)
        pads = mask = None
        if attention_mask is not None:
            mask = attention_mask.to(torch.int32)
            if position_ids is None:
                position_ids = (mask.cumsum(1) - 1).clamp_min(0)
            if not bool(mask.all()):
                pads = mask[:, :, None]
        elif position_ids is None:
            position_ids = torch.arange(T, dtype=torch.int32).expand(B, T)
        layer_mask = None if pads is None else mask
        position_ids = position_ids.to(torch.int32).contiguous()
        x, residual = self.model.embed_tokens(ids), None
        for i, layer in enumerate(self.model.layers):
            x, residual = layer(x, position_ids, attention_mask=layer_mask,
                                cache=None if caches is None else caches[i], residual=residual, pads=pads)
        if logits_to_keep:
            x, residual = x[:, -logits_to_keep:].contiguous(), residual[:, -logits_to_keep:].contiguous()
        _, x = self.model.norm(x, residual)
        B, T, H = x.shape            # the head on [B * T, H] rows: its logits are the program's output as they are
        return self.lm_head(x.reshape(B * T, H)).reshape(B, T, -1)

    def generate(self, input_ids, max_new_tokens: int, attention_mask=None, backend: Optional[str] = None,
                 eos_token_id: Optional[int] = None, pad_token_id: int = 0):
        """Greedy generation: the prompt (left padded when ``attention_mask`` has pads) followed by
        ``max_new_tokens`` tokens, [B, T + max_new_tokens] as transformers' greedy ``generate``. One prefill, then
        one decode step per token through the layers' caches. ``backend`` recompiles every part for it.
        With ``eos_token_id``, a finished sequence continues with ``pad_token_id`` (as transformers)."""
        loc = _caller()
        self._check_ids(input_ids, attention_mask, loc)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ModelInputError(f"max_new_tokens: expected an int >= 0, found {max_new_tokens!r}", loc=loc)
        if backend is not None:
            self.compile(**{**self._compile_options, "backend": backend})
        B, T = input_ids.shape
        out = input_ids.clone()
        if max_new_tokens == 0:
            return out
        total = T + max_new_tokens
        if total > self.config.max_position_embeddings:
            raise ModelInputError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) = {total} tokens exceed "
                                  f"max_position_embeddings = {self.config.max_position_embeddings}", loc=loc)
        mask = torch.ones(B, T, dtype=torch.int32) if attention_mask is None else attention_mask.to(torch.int32)
        caches = self.new_caches(B, total)
        positions = (mask.cumsum(1) - 1).clamp_min(0)
        done = torch.zeros(B, dtype=torch.bool)
        with progress(total=max_new_tokens, desc="Qwen3-Next generate", unit="token") as bar:
            logits = self.forward(input_ids, attention_mask=mask if attention_mask is not None else None,
                                  caches=caches, position_ids=positions, logits_to_keep=1)
            for step in range(max_new_tokens):
                nxt = logits[:, -1].float().argmax(-1)
                if eos_token_id is not None:
                    nxt = torch.where(done, torch.full_like(nxt, pad_token_id), nxt)
                    done |= nxt == eos_token_id
                out = torch.cat([out, nxt[:, None].to(out.dtype)], 1)
                bar.update(1)
                if step + 1 == max_new_tokens or (eos_token_id is not None and bool(done.all())):
                    break
                positions = positions[:, -1:] + 1
                logits = self.forward(nxt[:, None], caches=caches, position_ids=positions)
        return out

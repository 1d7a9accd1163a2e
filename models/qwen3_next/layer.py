"""``Qwen3NextGatedDeltaNet``: the Gated DeltaNet layer of Qwen3-Next as a ``pypto.nn.Module``.

    mixed_qkv = x Wqkv^T   z = x Wz^T   b = x Wb^T   a = x Wa^T          (activation dtype)
    q, k, v   = split(SiLU(causal_conv1d(mixed_qkv)))                    (conv in fp32, result rounded)
    g = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b)            (fp32)
    o         = gated delta rule(l2norm(q), l2norm(k), v, g, beta)       (chunked; recurrent for decode)
    y         = out_proj(RMSNorm(o) * norm.weight * SiLU(z))

The chunked rule (prefill) is the Professional-mode kernel ``pro_kernels`` called as one node of the traced
forward on sim and cpu where ``pro_kernels.supports`` accepts the layer's dims, chunk size and dtype. A decode
step (T == 1 with a filled cache) runs the conv update, gates, l2norm and recurrent rule as the fused kernel of
``decode_kernel`` (one node per launch of a few sequences, each reading its state slot on the device:
``layer(x, cache, state_indices=...)`` with pools in the cache, as vLLM's ``ssm_state_indices``) where
``decode_kernel.supports`` accepts the dims. Else, and on the reference backend (whose oracle they are), the
Tensor-level kernels of ``kernels`` (with state_indices: on the slots gathered, then scattered back).
``layer.core_impl`` is ("pro", None) or ("tensor", why) for the last call, and the report of a run that fell
back says why (a line of ``pypto.last_report().notes``); ``impl=`` forces one.

HuggingFace fuses the projections into ``in_proj_qkvz`` / ``in_proj_ba`` with a grouped per-key-head
row order. This module keeps them de-interleaved (``in_proj_qkv`` whose rows are already in the conv's
channel order q | k | v, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``), so the projections produce
contiguous outputs and no shuffle runs per token; ``load_state_dict`` accepts HF state dicts (and
its own), ``hf_state_dict`` converts back. Every other key (``conv1d.weight``, ``dt_bias``, ``A_log``,
``norm.weight``, ``out_proj.weight``) has HF's name and shape.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

from pypto.frontend.context import is_tracing, note
from pypto.machine import machine_spec

from . import decode_kernel, kernels, pro_kernels
from .functional import _fail, default_per_head
from .reference import GDNCache, Qwen3NextGDNConfig, split_projection_weights

_HF_FUSED = ("in_proj_qkvz.weight", "in_proj_ba.weight")
_FP32_PARAMS = ("A_log", "dt_bias")          # stay fp32 whatever the module's dtype, as in checkpoints


class Qwen3NextGatedDeltaNet(nn.Module):
    """One GDN layer. ``layer(x)`` prefills; ``layer(x, cache)`` fills or continues a ``GDNCache``
    (T == 1 with a filled cache is a decode step through the fused decode kernel). x [B, T, hidden].
    ``layer(x, cache, state_indices=idx)`` (a decode step): the cache's conv_state [slots, conv_dim, W-1] and
    recurrent_state [slots, HV, K, V] are pools, sequence b's state is slot idx[b] (distinct slots)."""

    def __init__(self, config: Optional[Qwen3NextGDNConfig] = None, dtype=torch.float32, chunk_size: int = 64,
                 per_head: Optional[bool] = None, impl: Optional[str] = None):
        super().__init__()
        if impl not in (None, "pro", "tensor"):
            raise ValueError(f"impl must be 'pro', 'tensor' or None, got {impl!r}")
        # the prefill core: None = the pl kernel (pro_kernels) as one graph node where it supports the
        # layer (_pro_unsupported), else the Tensor-level kernels; core_impl says which the last call took
        self.impl = impl
        self._core_by_mode: dict = {}        # "prefill" | "decode" -> (impl, why), recorded when traced
        self._last_mode = "prefill"
        c = self.config = config or Qwen3NextGDNConfig()
        self.chunk_size = chunk_size
        self.per_head = per_head            # kernels' head layout; None: chosen by the backend
        hid = c.hidden_size
        self.in_proj_qkv = nn.Linear(hid, c.conv_dim, bias=False, dtype=dtype)
        self.in_proj_z = nn.Linear(hid, c.value_dim, bias=False, dtype=dtype)
        self.in_proj_b = nn.Linear(hid, c.linear_num_value_heads, bias=False, dtype=dtype)
        self.in_proj_a = nn.Linear(hid, c.linear_num_value_heads, bias=False, dtype=dtype)
        W = c.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(c.conv_dim, c.conv_dim, W, groups=c.conv_dim, padding=W - 1, bias=False, dtype=dtype)
        self.dt_bias = nn.Parameter(torch.ones(c.linear_num_value_heads))
        self.A_log = nn.Parameter(torch.zeros(c.linear_num_value_heads))
        self.norm = nn.RMSNorm(c.linear_value_head_dim, eps=c.rms_norm_eps, dtype=dtype)
        self.out_proj = nn.Linear(c.value_dim, hid, bias=False, dtype=dtype)

    @property
    def core_impl(self):
        """("pro", None) when the last call's core ran on the pl kernel node, else ("tensor", why)."""
        return self._core_by_mode.get(self._last_mode)

    # ------------------------------------------------------------------ weights
    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load this module's own state dict or a HuggingFace one (``in_proj_qkvz.weight`` /
        ``in_proj_ba.weight`` in the grouped per-key-head layout)."""
        if any(name in state_dict for name in _HF_FUSED):
            state_dict = dict(state_dict)
            split = split_projection_weights({name: state_dict.pop(name) for name in _HF_FUSED}, self.config)
            qkv = torch.cat([split["wq"], split["wk"], split["wv"]])
            state_dict.update({"in_proj_qkv.weight": qkv, "in_proj_z.weight": split["wz"],
                               "in_proj_b.weight": split["wb"], "in_proj_a.weight": split["wa"]})
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def hf_state_dict(self) -> dict:
        """The state dict in HuggingFace's names and fused, grouped projection layout."""
        c = self.config
        # where each HF row goes: split the row numbers as if they were weights
        def row_numbers(n):
            return torch.arange(n, dtype=torch.float64)[:, None].expand(n, c.hidden_size)
        rows_qkvz = row_numbers(2 * c.key_dim + 2 * c.value_dim)
        rows_ba = row_numbers(2 * c.linear_num_value_heads)
        idx = {n: t[:, 0].long() for n, t in split_projection_weights(
            {"in_proj_qkvz.weight": rows_qkvz, "in_proj_ba.weight": rows_ba}, c).items()}
        w = self.in_proj_qkv.weight.detach()
        qkvz = w.new_empty(rows_qkvz.shape[0], c.hidden_size)
        qkvz[torch.cat([idx["wq"], idx["wk"], idx["wv"]])] = w
        qkvz[idx["wz"]] = self.in_proj_z.weight.detach()
        ba = w.new_empty(rows_ba.shape[0], c.hidden_size)
        ba[idx["wb"]] = self.in_proj_b.weight.detach()
        ba[idx["wa"]] = self.in_proj_a.weight.detach()
        out = {k: v for k, v in self.state_dict().items() if not k.startswith("in_proj_")}
        out.update({"in_proj_qkvz.weight": qkvz, "in_proj_ba.weight": ba})
        return out

    @classmethod
    def from_hf(cls, config: Qwen3NextGDNConfig, state_dict: dict, dtype=None, **kwargs) -> "Qwen3NextGatedDeltaNet":
        dtype = dtype or state_dict["in_proj_qkvz.weight"].dtype
        layer = cls(config, dtype=dtype, **kwargs)
        layer.load_state_dict(state_dict)
        return layer

    def _cast_floating(self, tdt: torch.dtype) -> None:
        keep = {name: getattr(self, name).data.clone() for name in _FP32_PARAMS}
        super()._cast_floating(tdt)
        for name, data in keep.items():
            getattr(self, name).data = data

    # ------------------------------------------------------------------ calling
    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return (1,) if arg == "hidden_states" else ()          # the sequence length T

    def __call__(self, hidden_states, cache: Optional[GDNCache] = None, state_indices=None):
        if is_tracing() or cache is None:
            if not is_tracing():
                self._last_mode = "prefill"
            if state_indices is not None:
                _fail("state_indices name the slots of a cache's state pools: pass the cache too")
            return super().__call__(hidden_states)
        c = self.config
        B, T = hidden_states.shape[0], hidden_states.shape[1]
        decode = cache.has_state and T == 1
        if state_indices is not None and not decode:
            _fail("state_indices apply to a decode step (T == 1 with a filled cache); prefill each sequence "
                  "into a cache of its own")
        self._last_mode = "decode" if decode else "prefill"
        if decode:
            return self._decode(hidden_states, cache, state_indices)
        if not cache.has_state:                    # an empty cache starts from zero history and state
            cache.conv_state = torch.zeros(B, c.conv_dim, c.linear_conv_kernel_dim - 1, dtype=hidden_states.dtype)
            cache.recurrent_state = torch.zeros(B, c.linear_num_value_heads, c.linear_key_head_dim,
                                                c.linear_value_head_dim, dtype=torch.float32)
        # the kernel keeps the state 2-D, [B*HV*K, V]: a view of the cache's storage, written in place
        state = cache.recurrent_state.view(-1, c.linear_value_head_dim)
        return super().__call__(hidden_states, cache.conv_state, state, decode)

    def _decode(self, x, cache: GDNCache, state_indices):
        c = self.config
        B = x.shape[0]
        slots = cache.recurrent_state.shape[0]
        idx = torch.arange(B, dtype=torch.int32) if state_indices is None else torch.as_tensor(state_indices)
        decode_kernel.check_indices(idx, B, slots)
        if self._decode_unsupported(x.dtype) is None:
            state = cache.recurrent_state.view(-1, c.linear_value_head_dim)
            return super().__call__(x, cache.conv_state, state, True, idx.to(torch.int32).contiguous())
        if state_indices is not None:        # the Tensor-level rule on the gathered slots, scattered back
            idx = idx.long()
            sub = GDNCache(cache.conv_state[idx].contiguous(), cache.recurrent_state[idx].contiguous())
            y = self._decode(x, sub, None)
            cache.conv_state[idx] = sub.conv_state
            cache.recurrent_state[idx] = sub.recurrent_state
            return y
        state = cache.recurrent_state.view(-1, c.linear_value_head_dim)
        return super().__call__(x, cache.conv_state, state, True)

    def forward(self, hidden_states, conv_state=None, recurrent_state=None, decode: bool = False,
                state_indices=None):
        """conv_state [B, conv_dim, W-1] and recurrent_state [B*HV*K, V] fp32 are read and updated in
        place when given (the cache); without them the layer starts from zeros. With state_indices [B]
        (a decode step on the fused kernel) they are pools of slots, sequence b's at state_indices[b]."""
        c = self.config
        x = hidden_states
        B, T = x.shape[0], x.shape[1]
        H, HV = c.linear_num_key_heads, c.linear_num_value_heads
        K, V = c.linear_key_head_dim, c.linear_value_head_dim
        W = c.linear_conv_kernel_dim

        if decode and state_indices is not None:
            return self._fused_decode(x, conv_state, recurrent_state, state_indices)
        mixed_qkv = F.linear(x, self.in_proj_qkv.weight)                       # [B, T, conv_dim]
        z = F.linear(x, self.in_proj_z.weight).reshape(B, T, HV, V)
        b = F.linear(x, self.in_proj_b.weight)                                 # [B, T, HV]
        a = F.linear(x, self.in_proj_a.weight)

        conv_w = self.conv1d.weight.reshape(c.conv_dim, W)
        if decode:
            y = kernels.causal_conv1d_update(mixed_qkv.reshape(B, c.conv_dim), conv_state, conv_w, None,
                                             activation="silu").reshape(B, 1, c.conv_dim)
        else:
            y, final = kernels.causal_conv1d(mixed_qkv, conv_w, None, conv_state, activation="silu")
            if conv_state is not None and final is not None:
                conv_state[...] = final
        y = pypto.cast(y, x.dtype)                                             # [B, T, q | k | v]

        g = -pypto.exp(kernels.fp32(self.A_log)) * pypto.softplus(kernels.fp32(a) + kernels.fp32(self.dt_bias))
        beta = pypto.sigmoid(kernels.fp32(b))

        state = recurrent_state if recurrent_state is not None else pypto.zeros(B * HV * K, V)
        o = pypto.zeros(B, T, HV * V, dtype=x.dtype)
        if decode:                           # the fused kernel needs state_indices (__call__ passes them)
            why = self._decode_unsupported(x.dtype.torch_dtype) or "decode traced without state_indices"
        else:
            why = self._pro_unsupported(x.dtype)
        self._core_by_mode["decode" if decode else "prefill"] = ("pro", None) if why is None else ("tensor", why)
        if why is not None:                  # and every run's report says so (Report.notes)
            note(f"{type(self).__name__} {'decode' if decode else 'prefill'} core: Tensor-level kernels ({why})")
        if why is None:
            self._pro_core(y, g, beta, state, o, B, T)
        else:
            Heads = kernels.Heads
            q, k, v = Heads(y, H, K, 0), Heads(y, H, K, c.key_dim), Heads(y, HV, V, 2 * c.key_dim)
            per_head = self.per_head
            if per_head is None:
                per_head = default_per_head("recurrent" if decode else "chunk", self._compile_options.get("backend"))
            args = (q, k, v, Heads(g, HV, 1), Heads(beta, HV, 1), state, Heads(o, HV, V), [(None, 0, 0, T)])
            options = dict(scale=K ** -0.5, use_qk_l2norm=True, per_head=per_head)
            if decode:
                kernels.recurrent_gated_delta_rule(*args, **options)
            else:
                kernels.chunk_gated_delta_rule(*args, chunk_size=self.chunk_size, **options)

        o = gated_rms_norm(o.reshape(B, T, HV, V), z, self.norm.weight, c.rms_norm_eps)
        return F.linear(o.reshape(B, T, c.value_dim), self.out_proj.weight)


    # ------------------------------------------------------------------ the Professional-mode core
    def _backend(self) -> str:
        return self._compile_options.get("backend") or pypto.get_backend()

    def _machine(self):
        return machine_spec(self._compile_options.get("machine"))     # the one lookup of a machine= argument

    def _pro_unsupported(self, dtype) -> Optional[str]:
        """Why the chunked rule of this layer does not run on the pl kernel (pro_kernels) as a graph node
        (None: it does). ``impl`` "tensor" forces the Tensor-level kernels, "pro" the pl kernel."""
        if self.impl == "tensor":
            return "impl='tensor' asked for"
        backend = self._backend()
        why = None
        if backend not in _PRO_BACKENDS:
            why = (f"backend {backend!r}: the Tensor-level kernels are its oracle (the pl kernel runs on "
                   f"{', '.join(_PRO_BACKENDS)})")
        else:
            c = self.config
            t = dtype.torch_dtype
            why = pro_kernels.supports(torch.empty(1, c.linear_key_head_dim, dtype=t, device="meta"),
                                       torch.empty(1, c.linear_key_head_dim, dtype=t, device="meta"),
                                       torch.empty(1, c.linear_value_head_dim, dtype=t, device="meta"),
                                       self.chunk_size)
        if why is not None and self.impl == "pro":
            raise pypto.ShapeError(f"impl='pro' does not support this layer: {why}")
        return why

    def _fused_decode(self, x, conv_state, recurrent_state, state_indices):
        """A decode step on the fused kernel: the projections of the B tokens as [B, hidden] matmuls (one
        weight read each), then conv, gates, l2norm and the rule in decode_kernel, the norm and out_proj."""
        c = self.config
        B, T = x.shape[0], x.shape[1]
        H, HV, V = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_value_head_dim
        self._core_by_mode["decode"] = ("pro", None)
        x2 = x.reshape(B * T, c.hidden_size)                                   # T == 1
        mixed_qkv = F.linear(x2, self.in_proj_qkv.weight)
        z = F.linear(x2, self.in_proj_z.weight).reshape(B, T, HV, V)
        b, a = F.linear(x2, self.in_proj_b.weight), F.linear(x2, self.in_proj_a.weight)
        conv_w = self.conv1d.weight.reshape(c.conv_dim, c.linear_conv_kernel_dim)
        o = pypto.zeros(B * T, HV * V, dtype=x.dtype)
        decode_kernel.decode_step(decode_kernel.kernel(None), mixed_qkv, a, b, conv_w, self.A_log, self.dt_bias,
                                  conv_state, recurrent_state, state_indices, o, H=H, HV=HV,
                                  K=c.linear_key_head_dim, V=V,
                                  block_dim=decode_kernel.block_dim_for(H, self._machine()))
        o = gated_rms_norm(o.reshape(B, T, HV, V), z, self.norm.weight, c.rms_norm_eps)
        return F.linear(o.reshape(B * T, c.value_dim), self.out_proj.weight).reshape(B, T, c.hidden_size)

    def _decode_unsupported(self, dtype: torch.dtype) -> Optional[str]:
        """Why a decode step of this layer does not run on the fused decode kernel (None: it does)."""
        if self.impl == "tensor":
            return "impl='tensor' asked for"
        backend = self._backend()
        c = self.config
        if backend not in _PRO_BACKENDS:
            why = (f"backend {backend!r}: the Tensor-level kernels are its oracle (the fused decode kernel runs "
                   f"on {', '.join(_PRO_BACKENDS)})")
        else:
            why = decode_kernel.supports(c.linear_key_head_dim, c.linear_value_head_dim,
                                         c.linear_conv_kernel_dim, dtype)
            why = None if why is None else f"decode: {why}"
        if why is not None and self.impl == "pro":
            raise pypto.ShapeError(f"impl='pro' does not support this layer's decode: {why}")
        return why

    def _pro_core(self, y, g, beta, state, o, B, T):
        """o and state (in place, as graph values) by one launch of the pl kernel over every (sequence,
        value head): q, k, v are column boxes of the conv output y (copied contiguous by the node)."""
        c = self.config
        H, HV, K, V = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        C = self.chunk_size
        io = y.dtype
        operand = torch.float32 if io == pypto.float32 else torch.float16
        q3, k3, v3 = y[:, :, :c.key_dim], y[:, :, c.key_dim:2 * c.key_dim], y[:, :, 2 * c.key_dim:]
        gT = pypto.permute(g, (0, 2, 1))                              # [B, HV, T]: a gate row per head
        kern = pro_kernels.kernel(None)
        bd = pro_kernels.block_dim_for(B * HV, self._machine())
        consts = dict(H=H, HV=HV, K=K, V=V, C=C, NL=int(math.log2(C)), scale=float(K ** -0.5), l2norm=True,
                      cast_io=io != pypto.float32)
        kern[None, bd](q3, k3, v3, gT, beta, pro_kernels.merge_masks(C), torch.eye(C, dtype=operand), state, o,
                       0, T, 0, **consts)


_PRO_BACKENDS = ("sim", "cpu")


def gated_rms_norm(x, gate, weight, eps: float):
    """RMSNorm(x) * weight * SiLU(gate) over the last dim in fp32, result in x's dtype."""
    xf = kernels.fp32(x)
    xn = xf * pypto.rsqrt(pypto.mean(xf * xf, -1, keepdim=True) + eps)
    return pypto.cast(xn * kernels.fp32(weight) * pypto.silu(kernels.fp32(gate)), x.dtype)

"""Torch-in, torch-out entry points with flash-linear-attention's signatures, running the pypto
kernels of ``kernels.py`` through ``pypto.jit``.

Each entry point validates its arguments (a ``GDNArgumentError``, which is both a
``pypto.ShapeError`` naming the caller's line and a ``ValueError`` as fla raises), prepares the
state buffers on the host and calls one compiled function per static configuration; the
sequence length is a dynamic size, so one compilation serves every T.

Variable-length batches (``cu_seqlens``): by default the sequence lengths are run-time sizes that
travel as the shape of an empty "length carrier" tensor ``[L_0, ..., L_{N-1}, 0]``: one compilation
serves every batch with the same number of (non-empty) sequences; empty sequences never reach the
kernel (their final state is their initial state). With ``device_cu_seqlens=True`` cu_seqlens itself
is an int32 argument of the kernel: a ``pypto.loop`` over the sequences reads each start and length
with ``pypto.item`` on the AICPU (frontend/scalars.py), so one compilation serves every batch with
the same N (empty sequences are zero-trip loops). The chunked rule then uses its per-head form (the
all-heads form sizes buffers by the sequence length, which is read only while the program runs).
"""
from __future__ import annotations

import os
from typing import Optional

import torch

import pypto
from pypto.frontend.tensor import TensorSpec

from . import kernels, pro_kernels
from .reference import _check_gdn_inputs

_HERE = os.path.dirname(os.path.abspath(__file__))


class GDNArgumentError(pypto.ShapeError, ValueError):
    """Bad arguments to a Gated DeltaNet entry point (shape, layout, option)."""


def _caller_loc():
    """The innermost frame outside this package and pypto: the line that called the entry point."""
    import sys
    from pypto.errors import SourceLoc, _is_internal
    f = sys._getframe(1)
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if not name.startswith(_HERE + os.sep) and not _is_internal(name):
            return SourceLoc(name, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def _fail(message: str):
    raise GDNArgumentError(message, loc=_caller_loc())


class KernelFunction(pypto.JitFunction):
    """``pypto.jit`` with the dynamic dims chosen per argument name (``dynamic={"q": (1,)}``, or
    "leading" for all dims but the last): those dims become size symbols, every other dim of a
    tensor argument is static."""

    def __init__(self, fn, dynamic: dict, **options):
        super().__init__(fn, **options)
        self.dynamic = dynamic

    def arg_spec(self, pname, value):
        dims = self.dynamic.get(pname)
        if dims is None:
            return None
        dims = range(value.dim() - 1) if dims == "leading" else dims
        shape = tuple(pypto.DYNAMIC if i in dims else n for i, n in enumerate(value.shape))
        return TensorSpec(shape, None)


_functions: dict = {}


def kernel_function(name: str, backend: Optional[str] = None, **options) -> KernelFunction:
    """The compiled function behind entry point ``name`` ("chunk", "recurrent", "conv", "conv_update")
    for a backend (None: pypto's current default) and jit options (e.g. timing_only=True)."""
    key = (name, backend, tuple(sorted(options.items())))
    fn = _functions.get(key)
    if fn is None:
        body, dynamic = _ENTRIES[name]
        fn = _functions[key] = KernelFunction(body, dynamic, backend=backend, name=f"gdn_{name}", **options)
    return fn


# ----------------------------------------------------------------------------------------------
# Traced bodies (one per entry point)
# ----------------------------------------------------------------------------------------------

def _sequences(q, lengths, state_rows):
    """[(batch row, state row, start, length)] for the kernels; all batch rows at once without
    cu_seqlens."""
    if lengths is None:
        return [(None, 0, 0, q.shape[1])]
    out, start = [], 0
    for n, row in enumerate(state_rows):
        out.append((0, row, start, lengths.shape[n]))
        start = start + lengths.shape[n]
    return out


def _operands(q, k, v, g, beta, o, heads):
    H, K, HV, V = heads
    return (kernels.Heads(q, H, K), kernels.Heads(k, H, K), kernels.Heads(v, HV, V), kernels.Heads(g, HV, 1),
            kernels.Heads(beta, HV, 1), kernels.Heads(o, HV, V))


def _chunk_body(q, k, v, g, beta, state, o, lengths, state_rows, heads, scale, chunk_size, cube_dtype,
                use_qk_l2norm, per_head):
    q, k, v, g, beta, o = _operands(q, k, v, g, beta, o, heads)
    kernels.chunk_gated_delta_rule(q, k, v, g, beta, state, o, _sequences(q.tensor, lengths, state_rows),
                                   scale=scale, chunk_size=chunk_size, use_qk_l2norm=use_qk_l2norm,
                                   per_head=per_head, cube_dtype=cube_dtype)


def _recurrent_body(q, k, v, g, beta, state, o, lengths, state_rows, heads, scale, use_qk_l2norm, per_head):
    q, k, v, g, beta, o = _operands(q, k, v, g, beta, o, heads)
    kernels.recurrent_gated_delta_rule(q, k, v, g, beta, state, o, _sequences(q.tensor, lengths, state_rows),
                                       scale=scale, use_qk_l2norm=use_qk_l2norm, per_head=per_head)


def _device_sequences(q, cu):
    """The sequences of a packed batch whose cu_seqlens is the int32 argument ``cu``: a pypto.loop over
    them, each (batch row 0, state row n, start, length) read by the control program (pypto.item)."""
    for n in pypto.loop(cu.shape[0] - 1, name="seq"):
        start = pypto.item(cu, n)
        yield [(0, n, start, pypto.item(cu, n + 1) - start)]


def _chunk_cu_body(q, k, v, g, beta, state, o, cu, heads, scale, chunk_size, cube_dtype, use_qk_l2norm):
    q, k, v, g, beta, o = _operands(q, k, v, g, beta, o, heads)
    for seq in _device_sequences(q.tensor, cu):
        kernels.chunk_gated_delta_rule(q, k, v, g, beta, state, o, seq, scale=scale, chunk_size=chunk_size,
                                       use_qk_l2norm=use_qk_l2norm, per_head=True, cube_dtype=cube_dtype)


def _recurrent_cu_body(q, k, v, g, beta, state, o, cu, heads, scale, use_qk_l2norm, per_head):
    q, k, v, g, beta, o = _operands(q, k, v, g, beta, o, heads)
    for seq in _device_sequences(q.tensor, cu):
        kernels.recurrent_gated_delta_rule(q, k, v, g, beta, state, o, seq, scale=scale,
                                           use_qk_l2norm=use_qk_l2norm, per_head=per_head)


def _conv_body(x, weight, bias, history, activation, output_final_state):
    y, final = kernels.causal_conv1d(x, weight, bias, history, activation=activation)
    y = pypto.cast(y, x.dtype)
    if output_final_state:
        return y, pypto.cast(final, x.dtype)
    return y


def _conv_update_body(x, conv_state, weight, bias, activation):
    return pypto.cast(kernels.causal_conv1d_update(x, conv_state, weight, bias, activation=activation), x.dtype)


_TIME = (1,)
_ENTRIES = {
    "chunk": (_chunk_body, {n: _TIME for n in ("q", "k", "v", "g", "beta", "o")} | {"lengths": "leading"}),
    "recurrent": (_recurrent_body, {n: _TIME for n in ("q", "k", "v", "g", "beta", "o")} | {"lengths": "leading"}),
    "chunk_cu": (_chunk_cu_body, {n: _TIME for n in ("q", "k", "v", "g", "beta", "o")} | {"cu": "leading"}),
    "recurrent_cu": (_recurrent_cu_body, {n: _TIME for n in ("q", "k", "v", "g", "beta", "o")} | {"cu": "leading"}),
    "conv": (_conv_body, {"x": _TIME}),
    "conv_update": (_conv_update_body, {}),
}


# ----------------------------------------------------------------------------------------------
# Gated delta rule
# ----------------------------------------------------------------------------------------------

def default_per_head(rule: str, backend: Optional[str]) -> bool:
    """Which layout of the heads a kernel uses by default (see ``kernels``): all heads at once (few
    large ops; for the chunked rule every chunk's maps in one pass) everywhere, except the recurrent
    rule on the compiled backends, which loops over heads: the cpu backend cannot yet place the
    per-token boxes of the batched form (their view offsets depend on the loop index)."""
    return rule == "recurrent" and (backend or pypto.get_backend()) != "reference"


def _prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens):
    """Checked sizes, the scale, the fp32 state to update in place and the zeroed output."""
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            _fail(f"{name} is on {t.device}; pypto's backends take CPU tensors")
    try:
        d = _check_gdn_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    except ValueError as e:
        _fail(str(e))
    if initial_state is None:
        state = torch.zeros(d.N, d.HV, d.K, d.V, dtype=torch.float32)
    else:
        state = initial_state.detach().to(torch.float32, copy=True).contiguous()
    return d, d.K ** -0.5 if scale is None else scale, state, torch.zeros(v.shape, dtype=v.dtype)


def _run_rule(name, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
              use_qk_l2norm_in_kernel, backend, per_head, extra, jit_options, device_cu_seqlens=False):
    d, scale, state, o = _prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens)
    if device_cu_seqlens and cu_seqlens is not None:
        return _run_rule_device_cu(name, d, q, k, v, g, beta, scale, state, o, output_final_state, cu_seqlens,
                                   use_qk_l2norm_in_kernel, backend, per_head, extra, jit_options)
    lengths, state_rows = None, None
    if cu_seqlens is not None:
        cu = [int(c) for c in torch.as_tensor(cu_seqlens).tolist()]
        state_rows = tuple(n for n in range(d.N) if cu[n + 1] > cu[n])
        lengths = torch.empty([cu[n + 1] - cu[n] for n in state_rows] + [0])
    if d.T > 0 and (state_rows is None or state_rows):
        fn = kernel_function(name, backend, **(jit_options or {}))
        B, T = d.B, d.T
        # 3-D operands and a 2-D state: views of the same storage (the kernel writes o and state in place)
        q3, k3 = (x.contiguous().reshape(B, T, d.H * d.K) for x in (q, k))
        v3, o3 = v.contiguous().reshape(B, T, d.HV * d.V), o.reshape(B, T, d.HV * d.V)
        fn(q3, k3, v3, g.contiguous(), beta.contiguous(), state.reshape(-1, d.V), o3, lengths, state_rows,
           (d.H, d.K, d.HV, d.V), float(scale), *extra, bool(use_qk_l2norm_in_kernel),
           default_per_head(name, backend) if per_head is None else bool(per_head))
    return o, (state if output_final_state else None)


def _run_rule_device_cu(name, d, q, k, v, g, beta, scale, state, o, output_final_state, cu_seqlens,
                        use_qk_l2norm_in_kernel, backend, per_head, extra, jit_options):
    """``_run_rule`` with cu_seqlens an int32 argument the kernel reads on the device."""
    if d.T > 0:
        fn = kernel_function(f"{name}_cu", backend, **(jit_options or {}))
        B, T = d.B, d.T
        q3, k3 = (x.contiguous().reshape(B, T, d.H * d.K) for x in (q, k))
        v3, o3 = v.contiguous().reshape(B, T, d.HV * d.V), o.reshape(B, T, d.HV * d.V)
        cu = torch.as_tensor(cu_seqlens).to(torch.int32).contiguous()
        if name == "chunk":
            rest = extra + (bool(use_qk_l2norm_in_kernel),)
        else:
            rest = (bool(use_qk_l2norm_in_kernel), default_per_head(name, backend) if per_head is None else bool(per_head))
        fn(q3, k3, v3, g.contiguous(), beta.contiguous(), state.reshape(-1, d.V), o3, cu,
           (d.H, d.K, d.HV, d.V), float(scale), *rest)
    return o, (state if output_final_state else None)


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, scale: Optional[float] = None,
                           initial_state: Optional[torch.Tensor] = None, output_final_state: bool = False,
                           cu_seqlens: Optional[torch.Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
                           chunk_size: int = 64, *, backend: Optional[str] = None,
                           per_head: Optional[bool] = None, cube_dtype=None, jit_options: Optional[dict] = None,
                           impl: Optional[str] = None, device_cu_seqlens: bool = False):
    """Chunked gated delta rule (prefill), fla's signature.

    q, k [B, T, H, K]; v [B, T, HV, V] (HV a multiple of H); g (log decay, <= 0) and beta
    [B, T, HV]; initial_state [N, HV, K, V]; cu_seqlens [N + 1] with B = 1 packs N sequences.
    Returns (o [B, T, HV, V] in v's dtype, final state [N, HV, K, V] fp32 or None).
    pypto options: ``backend`` (None: the current default), ``per_head`` (the kernel's layout of
    the heads, see ``kernels``; None: ``default_per_head``) and
    ``cube_dtype`` (e.g. pypto.bfloat16: round matmul operands to it; default None = fp32 matmuls,
    see ``kernels.gated_delta_chunk`` for the accuracy trade); ``jit_options`` for pypto.jit (e.g.
    {"timing_only": True, "machine": "a2a3"}; the report is then ``kernel_function(...).last_report``).
    ``impl``: "pro" (the Professional-mode kernel of ``pro_kernels``; runs on sim and cpu), "tensor"
    (the Tensor-level kernels) or None: "pro" where it supports the call (backend, dims, chunk size,
    dtypes: ``pro_kernels.supports``), else "tensor". With "pro", ``cube_dtype`` is the matmul operand
    dtype for 16-bit inputs (default fp16) and the report is ``pro_kernels.kernel(...).last_report``;
    ``per_head`` does not apply. ``device_cu_seqlens``: cu_seqlens is read on the device (module doc;
    the Tensor-level per-head kernel, whatever ``impl`` and ``per_head`` say).
    """
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        _fail(f"chunk_size must be a positive int, got {chunk_size!r}")
    if impl not in (None, "pro", "tensor"):
        _fail(f"impl must be 'pro', 'tensor' or None, got {impl!r}")
    if impl != "tensor" and not (device_cu_seqlens and cu_seqlens is not None):
        why = _pro_unsupported(q, k, v, chunk_size, backend, cube_dtype)
        if why is None:
            return _run_pro(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                            use_qk_l2norm_in_kernel, chunk_size, backend, cube_dtype, jit_options)
        if impl == "pro":
            _fail(f"impl='pro' does not support this call: {why}")
    return _run_rule("chunk", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                     use_qk_l2norm_in_kernel, backend, per_head,
                     (chunk_size, None if cube_dtype is None else pypto.dtypes.to_dtype(cube_dtype)), jit_options,
                     device_cu_seqlens)


_PRO_BACKENDS = ("sim", "cpu")


def _pro_unsupported(q, k, v, chunk_size, backend, cube_dtype) -> Optional[str]:
    """Why the Professional-mode kernel cannot run this call (None: it can)."""
    name = backend or pypto.get_backend()
    if name not in _PRO_BACKENDS:
        return f"backend {name!r} (pro runs on {', '.join(_PRO_BACKENDS)})"
    if q.dim() != 4 or v.dim() != 4:
        return "q, k, v must be [B, T, heads, dim]"
    if cube_dtype is not None and q.dtype == torch.float32:
        return "cube_dtype with fp32 inputs (the pro kernel multiplies fp32 inputs in fp32)"
    return pro_kernels.supports(q, k, v, chunk_size)


def _run_pro(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel,
             chunk_size, backend, cube_dtype, jit_options):
    d, scale, state, o = _prepare(q, k, v, g, beta, scale, initial_state, cu_seqlens)
    sequences = None
    if cu_seqlens is not None:
        cu = [int(c) for c in torch.as_tensor(cu_seqlens).tolist()]
        sequences = [(n, cu[n], cu[n + 1] - cu[n]) for n in range(d.N)]
    if d.T > 0:
        operand = None if cube_dtype is None else pypto.dtypes.to_dtype(cube_dtype).torch_dtype
        pro_kernels.chunk_gated_delta_rule_pro(q, k, v, g, beta, scale=float(scale), state=state, o=o,
                                               sequences=sequences, use_qk_l2norm=bool(use_qk_l2norm_in_kernel),
                                               chunk_size=chunk_size, operand_dtype=operand,
                                               backend=backend or pypto.get_backend(), jit_options=jit_options)
    return o, (state if output_final_state else None)


def fused_recurrent_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                                     beta: torch.Tensor, scale: Optional[float] = None,
                                     initial_state: Optional[torch.Tensor] = None, output_final_state: bool = False,
                                     cu_seqlens: Optional[torch.Tensor] = None,
                                     use_qk_l2norm_in_kernel: bool = False, *, backend: Optional[str] = None,
                                     per_head: Optional[bool] = None, jit_options: Optional[dict] = None,
                                     device_cu_seqlens: bool = False):
    """Token-by-token gated delta rule (decode); same arguments and results as
    ``chunk_gated_delta_rule`` (without chunk_size)."""
    return _run_rule("recurrent", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                     use_qk_l2norm_in_kernel, backend, per_head, (), jit_options, device_cu_seqlens)


# ----------------------------------------------------------------------------------------------
# Short causal convolution
# ----------------------------------------------------------------------------------------------

_ACTIVATIONS = ("silu", "swish", None)


def _conv_weight(weight, D):
    if weight.dim() == 3 and weight.shape[1] == 1:          # HF / torch Conv1d layout [D, 1, W]
        weight = weight[:, 0]
    if weight.dim() != 2 or weight.shape[0] != D:
        _fail(f"weight must be [D={D}, W], got shape {tuple(weight.shape)}")
    return weight.contiguous()


def _check_bias_activation(bias, D, activation):
    if activation not in _ACTIVATIONS:
        _fail(f"activation must be 'silu', 'swish' or None, got {activation!r}")
    if bias is not None and tuple(bias.shape) != (D,):
        _fail(f"bias must be [D={D}], got shape {tuple(bias.shape)}")


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  activation: Optional[str] = "silu", initial_state: Optional[torch.Tensor] = None,
                  output_final_state: bool = False, *, backend: Optional[str] = None):
    """Depthwise causal conv over time, channels last: x [B, T, D], weight [D, W] (or [D, 1, W]),
    initial_state [B, D, W-1] (the inputs before x, oldest first). Returns (y [B, T, D] in x's
    dtype, final state [B, D, W-1] in x's dtype or None)."""
    if x.dim() != 3:
        _fail(f"x must be [B, T, D] (channels last), got shape {tuple(x.shape)}")
    B, T, D = x.shape
    weight = _conv_weight(weight, D)
    W = weight.shape[1]
    _check_bias_activation(bias, D, activation)
    if initial_state is not None and tuple(initial_state.shape) != (B, D, W - 1):
        _fail(f"initial_state must be [B, D, W-1] = {(B, D, W - 1)}, got {tuple(initial_state.shape)}")
    want_final = bool(output_final_state) and W > 1
    fn = kernel_function("conv", backend)
    out = fn(x.contiguous(), weight, bias, None if initial_state is None else initial_state.contiguous(),
             activation, want_final)
    y, final = out if want_final else (out, None)
    if output_final_state and W == 1:
        final = x.new_zeros(B, D, 0)
    return y, final


def causal_conv1d_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                         bias: Optional[torch.Tensor] = None, activation: Optional[str] = "silu",
                         *, backend: Optional[str] = None) -> torch.Tensor:
    """One decode step: x [B, D]; conv_state [B, D, S >= W-1] (oldest first) is shifted left with x
    appended, in place. Returns y [B, D] in x's dtype."""
    if x.dim() != 2:
        _fail(f"x must be [B, D] (one token), got shape {tuple(x.shape)}")
    B, D = x.shape
    weight = _conv_weight(weight, D)
    W = weight.shape[1]
    _check_bias_activation(bias, D, activation)
    if conv_state.dim() != 3 or tuple(conv_state.shape[:2]) != (B, D) or conv_state.shape[2] < W - 1:
        _fail(f"conv_state must be [B={B}, D={D}, S >= W-1={W - 1}], got {tuple(conv_state.shape)}")
    if not conv_state.is_contiguous():
        _fail("conv_state must be contiguous (it is updated in place)")
    return kernel_function("conv_update", backend)(x.contiguous(), conv_state, weight, bias, activation)

"""One decode step of a GDN layer's core as one Professional-mode kernel, with per-sequence state slots.

A launch (one task of the traced program, a ``pypto.loop`` over groups of up to 8 sequences) takes the slots of
its sequences as scalars, which the control program reads on the device from ``state_indices`` (``pypto.item``,
as vLLM's kernels read ``ssm_state_indices``). Each unit of work, a (sequence, key head) on one vector core,
computes in fp32:

    conv      y_c = SiLU(sum_w conv_w[c, w] [conv_state[slot, c, :], x_c][w])     c: the head's q, k, v channels
              conv_state[slot, c] <- [conv_state[slot, c, 1:], x_c]               (y rounded to x's dtype)
    l2norm    q <- scale q / |q|,  k <- k / |k|
    per value head hv of the key head (HV / H of them):
      gates   g = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b)
      state   S = exp(g) S_old;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
              as S^T k = e^g (S_old^T k), o = e^g (S_old^T q) + (q . k) delta: S is streamed once
              (read, update, write) in column blocks of VC, the next block's load under this one's work

The state pool is [slots * HV * K, V] fp32 (the [slots, HV, K, V] layout of FLA / vLLM, 2-D), the conv pool
[slots, conv_dim, W - 1] in the activation dtype, both updated in place (the kernel node writes them in
their own buffers: passes/kernel_nodes.py). The key head's q / k conv channels are computed and their
history shifted by the one core that owns the key head, so no two cores touch a channel. Columns of
q / k / v are [n, 1] views of [n, 8]-wide fp32 tiles; v's column is transposed into a row for the
state update; o is written as rows of [B, HV * V].

Launches follow each other (a kernel node's accesses are whole buffers), each filling the 48 vector cores twice.
Simulated on a2a3 (benchmarks/bench_gdn.py part e, default dims, bf16, timing only): 108 us at B = 32 against the
94.5 us bound of reading and writing the state once (0.87; the pool fits the L2, which absorbs the writes), 1064
us at B = 256 (0.71), 15.8 us at B = 1 (the launch's ~6.6 us start and drain, one sequence on 16 cores).

Supported (``supports``): K and V multiples of 16 up to 128, fp32 / bf16 / fp16 activations, W in 2..9.
"""
from __future__ import annotations

import torch

import pypto
import pypto_pro.language as pl

from .functional import KernelFunction, _fail

L2NORM_EPS = 1e-6
SEQS_PER_LAUNCH = 8       # the most sequences per launch (the kernel's slot scalars s0 .. s7)
ROUNDS = 2                # units of work (sequence, key head) per vector core and launch
MAX_DIM = 128
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _decode_body(x: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                 a: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                 b: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                 conv_w: pl.Tensor[[pl.STATIC, pl.STATIC], None],
                 A_log: pl.Tensor[[pl.STATIC], pl.DT_FP32],
                 dt_bias: pl.Tensor[[pl.STATIC], pl.DT_FP32],
                 conv_pool: pl.Tensor[[pl.DYNAMIC, pl.STATIC, pl.STATIC], None],
                 state: pl.Tensor[[pl.DYNAMIC, pl.STATIC], pl.DT_FP32],
                 o: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                 seq0: pl.Scalar[pl.DT_INT32], nseq: pl.Scalar[pl.DT_INT32],
                 s0: pl.Scalar[pl.DT_INT32], s1: pl.Scalar[pl.DT_INT32], s2: pl.Scalar[pl.DT_INT32],
                 s3: pl.Scalar[pl.DT_INT32], s4: pl.Scalar[pl.DT_INT32], s5: pl.Scalar[pl.DT_INT32],
                 s6: pl.Scalar[pl.DT_INT32], s7: pl.Scalar[pl.DT_INT32],
                 H, HV, K, V, W, VC, scale, cast_io):
    io = x.dtype
    f32 = pl.DT_FP32
    Vec = pl.MemorySpace.Vec
    R = HV // H
    NP = V // VC                  # column blocks of a head's state
    KD = H * K                    # key_dim: q channels [0, KD), k [KD, 2 KD), v [2 KD, 2 KD + HV V)
    WH = W - 1                    # history length
    CW = 32 // (2 if cast_io else 4)      # an io column tile's width (32-byte rows)

    # ---- UB, planned for K = V = 128, VC = 32
    s_g = pl.make_tile_group(pl.TileType([K, VC], f32, Vec), addrs=[0x00000, 0x04000], depth=2)
    tmp = pl.make_tile(pl.TileType([K, VC], f32, Vec), addr=0x08000)
    kb = pl.make_tile(pl.TileType([K, VC], f32, Vec), addr=0x0C000)          # k broadcast over columns
    colf = pl.TileType([MAX_DIM, 8], f32, Vec)
    qc = pl.make_tile(colf, addr=0x10000)       # q, k as columns [K, 1] (the state's row scales)
    kc = pl.make_tile(colf, addr=0x11000)
    egc = pl.make_tile(colf, addr=0x12000)
    rowsf = pl.TileType([8, MAX_DIM], f32, Vec)  # the conv in row orientation: taps x channels
    hf = pl.make_tile(rowsf, addr=0x13000)
    wf = pl.make_tile(rowsf, addr=0x14000)
    qr = pl.make_tile(rowsf, addr=0x15000)      # row 0: q, k, v of the head (conv output)
    kr = pl.make_tile(rowsf, addr=0x16000)
    tr = pl.make_tile(rowsf, addr=0x17000)
    xr = pl.make_tile(rowsf, addr=0x18000)
    w1r = pl.make_tile(rowsf, addr=0x19000)
    rowsio = pl.TileType([8, MAX_DIM], io, Vec)
    hin = pl.make_tile(rowsio, addr=0x1A000)
    win = pl.make_tile(rowsio, addr=0x1B000)
    w1in = pl.make_tile(rowsio, addr=0x1C000)
    xin = pl.make_tile(rowsio, addr=0x1D000)
    yio = pl.make_tile(rowsio, addr=0x1E000)
    colio = pl.TileType([MAX_DIM, CW], io, Vec)
    xcol = pl.make_tile(colio, addr=0x1F000)    # x as a column, for the history store
    shin = pl.make_tile(colio, addr=0x23000)    # the history's newer WH - 1 taps, shifted on store
    vt = pl.make_tile(pl.TileType([8, MAX_DIM], f32, Vec), addr=0x21000)     # v of the head as a row (row 0)
    vtio = pl.make_tile(pl.TileType([1, MAX_DIM], io, Vec), addr=0x22000)
    rowf = pl.TileType([1, VC], f32, Vec)
    vr = pl.make_tile(rowf, addr=0x24000)
    ks = pl.make_tile(rowf, addr=0x24100)
    qs = pl.make_tile(rowf, addr=0x24200)
    dl = pl.make_tile(rowf, addr=0x24300)
    orow = pl.make_tile(rowf, addr=0x24400)
    oio = pl.make_tile(pl.TileType([1, VC], io, Vec), addr=0x24500)
    one = pl.TileType([1, 8], f32, Vec)
    r1 = pl.make_tile(one, addr=0x20000)
    qk = pl.make_tile(one, addr=0x20020)
    gx = pl.make_tile(one, addr=0x20040)
    gt = pl.make_tile(one, addr=0x20060)
    eg = pl.make_tile(one, addr=0x20080)
    bt = pl.make_tile(one, addr=0x200A0)
    al = pl.make_tile(one, addr=0x200C0)
    oneio = pl.make_tile(pl.TileType([1, CW], io, Vec), addr=0x20100)

    E = (1, 1)

    def conv_row(dst, c0, n, seq, slot):
        """dst[0, :n] = SiLU(conv) of channels [c0, c0 + n) (rounded to io), their history shifted. In row
        orientation (taps as rows, channels as columns: transposing loads) every vector op is a few
        repeats; the history store is a plain copy of columns."""
        TAPS, ROW = (WH, n), (1, n)
        pl.load(hin.with_valid(*TAPS), conv_pool, [slot, c0, 0], trans=True)
        pl.load(win.with_valid(*TAPS), conv_w, [c0, 0], trans=True)
        pl.load(w1in.with_valid(*ROW), conv_w, [c0, WH], trans=True)
        pl.load(xin.with_valid(*ROW), x, [seq, c0])
        if cast_io:
            pl.cast(hf.with_valid(*TAPS), hin.with_valid(*TAPS))
            pl.cast(wf.with_valid(*TAPS), win.with_valid(*TAPS))
            pl.cast(w1r.with_valid(*ROW), w1in.with_valid(*ROW))
            pl.cast(xr.with_valid(*ROW), xin.with_valid(*ROW))
            pl.mul(hf.with_valid(*TAPS), hf.with_valid(*TAPS), wf.with_valid(*TAPS))
            pl.mul(tr.with_valid(*ROW), xr.with_valid(*ROW), w1r.with_valid(*ROW))
        else:
            pl.mul(hf.with_valid(*TAPS), hin.with_valid(*TAPS), win.with_valid(*TAPS))
            pl.mul(tr.with_valid(*ROW), xin.with_valid(*ROW), w1in.with_valid(*ROW))
        D = dst.with_valid(*ROW)
        pl.sum(D, hf.with_valid(*TAPS), dim=0)
        pl.add(D, D, tr.with_valid(*ROW))
        pl.sigmoid(tr.with_valid(*ROW), D)
        pl.mul(D, D, tr.with_valid(*ROW))
        if cast_io:                               # the layer rounds the conv's output to the io dtype
            pl.cast(yio.with_valid(*ROW), D)
            pl.cast(D, yio.with_valid(*ROW))
        # the history moves one step: [h1 .. h_{W-2}, x]
        if WH > 1:
            pl.load(shin.with_valid(n, WH - 1), conv_pool, [slot, c0, 1])
            pl.store(conv_pool, shin.with_valid(n, WH - 1), [slot, c0, 0])
        pl.load(xcol.with_valid(n, 1), x, [seq, c0], trans=True)
        pl.store(conv_pool, xcol.with_valid(n, 1), [slot, c0, WH - 1])

    def l2normalize(row, n, mult):
        R_ = row.with_valid(1, n)
        pl.mul(tr.with_valid(1, n), R_, R_)
        pl.sum(r1.with_valid(*E), tr.with_valid(1, n), dim=1)
        pl.add(r1.with_valid(*E), r1.with_valid(*E), L2NORM_EPS)
        pl.rsqrt(r1.with_valid(*E), r1.with_valid(*E))
        if mult != 1.0:
            pl.mul(r1.with_valid(*E), r1.with_valid(*E), mult)
        pl.row_expand_mul(R_, R_, r1.with_valid(*E))

    def scalar_in(dst, src, seq, col):
        """dst[0, 0] = fp32 of src[seq, col]."""
        if cast_io:
            pl.load(oneio.with_valid(*E), src, [seq, col])
            pl.cast(dst.with_valid(*E), oneio.with_valid(*E))
        else:
            pl.load(dst.with_valid(*E), src, [seq, col])

    with pl.section_vector():
        for u in pl.range(pl.get_block_idx(), nseq * H, pl.get_block_num()):
            j = u // H
            kh = u % H
            seq = seq0 + j
            slot = s0
            if j == 1:
                slot = s1
            elif j == 2:
                slot = s2
            elif j == 3:
                slot = s3
            elif j == 4:
                slot = s4
            elif j == 5:
                slot = s5
            elif j == 6:
                slot = s6
            elif j == 7:
                slot = s7
            conv_row(qr, kh * K, K, seq, slot)
            conv_row(kr, KD + kh * K, K, seq, slot)
            l2normalize(qr, K, scale)
            l2normalize(kr, K, 1.0)
            pl.mul(tr.with_valid(1, K), qr.with_valid(1, K), kr.with_valid(1, K))
            pl.sum(qk.with_valid(*E), tr.with_valid(1, K), dim=1)
            pl.transpose(qc.with_valid(K, 1), qr.with_valid(1, K))
            pl.transpose(kc.with_valid(K, 1), kr.with_valid(1, K))
            pl.row_expand(kb, kc.with_valid(K, 1))
            for r in range(R):
                hv = kh * R + r
                # gates: g = -exp(A_log) softplus(a + dt_bias) (softplus(x) = relu(x) + log1p(exp(-|x|)))
                scalar_in(gx, a, seq, hv)
                pl.load(al.with_valid(*E), dt_bias, [hv])
                pl.add(gx.with_valid(*E), gx.with_valid(*E), al.with_valid(*E))
                pl.abs(gt.with_valid(*E), gx.with_valid(*E))
                pl.mul(gt.with_valid(*E), gt.with_valid(*E), -1.0)
                pl.exp(gt.with_valid(*E), gt.with_valid(*E))
                pl.log1p(gt.with_valid(*E), gt.with_valid(*E))
                pl.relu(gx.with_valid(*E), gx.with_valid(*E))
                pl.add(gx.with_valid(*E), gx.with_valid(*E), gt.with_valid(*E))
                pl.load(al.with_valid(*E), A_log, [hv])
                pl.exp(al.with_valid(*E), al.with_valid(*E))
                pl.mul(gx.with_valid(*E), gx.with_valid(*E), al.with_valid(*E))
                pl.mul(gx.with_valid(*E), gx.with_valid(*E), -1.0)
                pl.exp(eg.with_valid(*E), gx.with_valid(*E))
                pl.col_expand(egc.with_valid(K, 1), eg.with_valid(*E))
                scalar_in(bt, b, seq, hv)
                pl.sigmoid(bt.with_valid(*E), bt.with_valid(*E))
                srow = (slot * HV + hv) * K
                # v of the head: its conv (a row), rounded to io and parked in
                # o's row (o's blocks are written over it below): each block is loaded back as a row
                vc0 = 2 * KD + hv * V
                conv_row(vt, vc0, V, seq, slot)
                if cast_io:
                    pl.cast(vtio.with_valid(1, V), vt.with_valid(1, V))
                    pl.store(o, vtio.with_valid(1, V), [seq, hv * V])
                else:
                    pl.store(o, vt.with_valid(1, V), [seq, hv * V])
                for p in range(NP):
                    s = s_g.next()
                    pl.load(s, state, [srow, p * VC])
                    if cast_io:
                        pl.load(oio, o, [seq, hv * V + p * VC])
                        pl.cast(vr, oio)
                    else:
                        pl.load(vr, o, [seq, hv * V + p * VC])
                    # S_old^T k and S_old^T q
                    pl.row_expand_mul(tmp, s, kc.with_valid(K, 1))
                    pl.sum(ks, tmp, dim=0)
                    pl.row_expand_mul(tmp, s, qc.with_valid(K, 1))
                    pl.sum(qs, tmp, dim=0)
                    # delta = beta (v - e^g S_old^T k);  o = e^g S_old^T q + (q . k) delta
                    pl.row_expand_mul(ks, ks, eg.with_valid(*E))
                    pl.sub(dl, vr, ks)
                    pl.row_expand_mul(dl, dl, bt.with_valid(*E))
                    pl.row_expand_mul(orow, qs, eg.with_valid(*E))
                    pl.row_expand_mul(qs, dl, qk.with_valid(*E))
                    pl.add(orow, orow, qs)
                    if cast_io:
                        pl.cast(oio, orow)
                        pl.store(o, oio, [seq, hv * V + p * VC])
                    else:
                        pl.store(o, orow, [seq, hv * V + p * VC])
                    # S = e^g S_old + k delta^T
                    pl.row_expand_mul(s, s, egc.with_valid(K, 1))
                    pl.col_expand_mul(tmp, kb, dl)
                    pl.add(s, s, tmp)
                    pl.store(state, s, [srow, p * VC])


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------

def supports(K: int, V: int, W: int, dtype) -> str | None:
    """None when the fused kernel handles these dims, else why not (the caller falls back)."""
    if K % 16 or V % 16 or not 16 <= K <= MAX_DIM or not 16 <= V <= MAX_DIM:
        return f"K = {K}, V = {V}: multiples of 16 up to {MAX_DIM} expected"
    if not 2 <= W <= 9:
        return f"conv kernel size {W} is not in 2..9 (the taps are the rows of an 8-row tile)"
    if dtype not in _DTYPES:
        return f"dtype {dtype}: one of fp32 / bf16 / fp16 expected"
    return None


def column_block(V: int) -> int:
    return 32 if V % 32 == 0 else 16


_kernels: dict = {}


def kernel(backend: str | None = None, **options):
    """The compiled pl kernel for a backend (None: pypto's default) and pl.jit options."""
    key = (backend, tuple(sorted(options.items())))
    kern = _kernels.get(key)
    if kern is None:
        if backend is not None:
            options["backend"] = backend
        kern = _kernels[key] = pl.jit(_decode_body, name="gdn_decode_pro", **options)
    return kern


def seqs_per_launch(H: int, cores: int) -> int:
    """Sequences per launch: as many as fill the cores ROUNDS times (at most SEQS_PER_LAUNCH)."""
    return max(1, min(SEQS_PER_LAUNCH, ROUNDS * cores // H))


def block_dim_for(H: int, machine) -> int:
    return max(1, min(H * seqs_per_launch(H, machine.cores["aiv"]), machine.cores["aiv"]))


def decode_step(kern, mixed_qkv, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, state_indices, o, *,
                H: int, HV: int, K: int, V: int, block_dim: int):
    """Inside a traced function: one decode step of every sequence, in place on the pools; o [B, HV * V]
    written. mixed_qkv [B, conv_dim] (the projection before the conv), a / b [B, HV], conv_w [conv_dim, W],
    A_log / dt_bias [HV] fp32, conv_pool [slots, conv_dim, W - 1], state_pool [slots * HV * K, V] fp32,
    state_indices [B] int32: the slot of each sequence, read by the control program."""
    B = mixed_qkv.shape[0]
    W = conv_w.shape[1]
    consts = dict(H=H, HV=HV, K=K, V=V, W=W, VC=column_block(V), scale=float(K ** -0.5),
                  cast_io=mixed_qkv.dtype != pypto.float32)
    G = seqs_per_launch(H, block_dim)
    for i in pypto.loop(pypto.ceildiv(B, G)):
        first = i * G
        slots = [state_indices[pypto.min(first + j, B - 1)].item() for j in range(G)]
        slots += slots[-1:] * (SEQS_PER_LAUNCH - G)                        # unused scalars
        kern[None, block_dim](mixed_qkv, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, o, first,
                              pypto.min(G, B - first), *slots, **consts)
    return o


def _fused_decode_body(kern):
    def gdn_decode(mixed_qkv, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, state_indices, o,
                   H, HV, K, V, block_dim):
        decode_step(kern, mixed_qkv, a, b, conv_w, A_log, dt_bias, conv_pool, state_pool, state_indices, o,
                    H=H, HV=HV, K=K, V=V, block_dim=block_dim)
    return gdn_decode


_functions: dict = {}


def fused_recurrent_decode(mixed_qkv, a, b, conv_w, A_log, dt_bias, conv_state, recurrent_state, state_indices,
                           *, num_key_heads: int, backend=None, jit_options=None):
    """Torch in, torch out: one GDN decode step of B sequences with per-sequence state slots.

    mixed_qkv [B, conv_dim] (q | k | v channels before the conv), a, b [B, HV]; conv_w [conv_dim, W];
    A_log, dt_bias [HV]; conv_state [slots, conv_dim, W - 1] (mixed_qkv's dtype) and recurrent_state
    [slots, HV, K, V] fp32, both updated in place at the slots state_indices [B] (int, distinct).
    Returns o [B, HV, V] in mixed_qkv's dtype (the core's output before the gated norm)."""
    B, D = mixed_qkv.shape
    slots, HV, K, V = recurrent_state.shape
    H = num_key_heads
    W = conv_w.shape[1]
    if D != 2 * H * K + HV * V or tuple(conv_w.shape) != (D, W):
        _fail(f"mixed_qkv [B, {2 * H * K + HV * V}] and conv_w [conv_dim, W] expected for H={H}, HV={HV}, K={K}, "
              f"V={V}; got {tuple(mixed_qkv.shape)} and {tuple(conv_w.shape)}")
    if tuple(conv_state.shape) != (slots, D, W - 1):
        _fail(f"conv_state must be [slots={slots}, conv_dim={D}, W-1={W - 1}], got {tuple(conv_state.shape)}")
    check_indices(state_indices, B, slots)
    why = supports(K, V, W, mixed_qkv.dtype)
    if why is not None:
        _fail(f"the fused decode kernel does not support this layer: {why}")
    opts = tuple(sorted((jit_options or {}).items()))
    kern = kernel(backend, **dict(opts))
    fn = _functions.get((backend, opts))
    if fn is None:
        dynamic = {name: (0,) for name in ("mixed_qkv", "a", "b", "conv_pool", "state_pool", "state_indices", "o")}
        fn = _functions[(backend, opts)] = KernelFunction(_fused_decode_body(kern), dynamic, backend=backend,
                                                          name="gdn_decode", **dict(opts))
    o = torch.empty(B, HV * V, dtype=mixed_qkv.dtype)
    fn(mixed_qkv.contiguous(), a.contiguous(), b.contiguous(), conv_w.contiguous(), A_log.float().contiguous(),
       dt_bias.float().contiguous(), conv_state, recurrent_state.view(slots * HV * K, V),
       state_indices.to(torch.int32).contiguous(), o, H=H, HV=HV, K=K, V=V, block_dim=block_dim_for(H, kern.machine))
    return o.view(B, HV, V)


def check_indices(state_indices, B: int, slots: int) -> None:
    """state_indices [B] int, distinct, each in [0, slots): else a clear error at the caller's line."""
    idx = torch.as_tensor(state_indices)
    if idx.dim() != 1 or idx.shape[0] != B or idx.dtype.is_floating_point or idx.dtype == torch.bool:
        _fail(f"state_indices must be an integer tensor [B={B}], got {idx.dtype} {tuple(idx.shape)}")
    bad = (idx < 0) | (idx >= slots)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        _fail(f"state_indices[{k}] = {int(idx[k])} is outside the state pool's {slots} slots [0, {slots})")
    if idx.unique().numel() != B:
        _fail(f"state_indices {idx.tolist()} name a slot twice: each sequence needs a state of its own")

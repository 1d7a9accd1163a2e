"""The Gated DeltaNet kernels written in pypto (Tensor level), as functions traced inside a jit.

They take and return traced ``pypto.Tensor`` values; ``functional.py`` wraps them into the
torch-in/torch-out, flash-linear-attention compatible entry points.

Layout inside a chunk (all fp32): every per-head tensor carries the batch dims ``[B, H, r]``
with H key heads and r = HV / H value heads per key head, so that value head ``h * r + j``
reads key head ``h`` by broadcasting: q and k are ``[B, H, 1, c, K]``, v ``[B, H, r, c, V]``,
g and beta ``[B, H, r, c]``, the state ``[B, H, r, K, V]``.

The chunked algorithm (per value head, chunk of c <= C tokens, state S at the chunk's start,
G the in-chunk cumulative sum of g):

    decay[i, j] = exp(G_i - G_j) for j <= i, else 0   (masked to -inf BEFORE exp: G_i - G_j > 0
                                                        above the diagonal and would overflow)
    A           = strictly-lower part of diag(beta) (K K^T) * decay
    T           = (I + A)^-1                            (see ``unit_lower_inverse``)
    U = T diag(beta) V,   W = T diag(beta e^G) K,   D = U - W S
    O           = diag(e^G) (scale Q) S + ((scale Q) K^T * decay) D
    S_next      = e^{G_last} S + (K * e^{G_last - G})^T D
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import pypto
from pypto import symbolic as sym

L2NORM_EPS = 1e-6
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------

def l2norm(x, eps: float = L2NORM_EPS):
    """x * rsqrt(sum(x^2) + eps) over the last dim (fla's l2norm)."""
    return x * pypto.rsqrt(pypto.sum(x * x, -1, keepdim=True) + eps)


def fp32(x):
    return pypto.cast(x, pypto.float32)


def split_heads(x, H: int):
    """[B, c, HV, X] -> [B, H, r, c, X] (value head h * r + j becomes [h, j])."""
    B, c, HV, X = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, H, HV // H, c, X)


def split_heads_scalar(x, H: int):
    """[B, c, HV] -> [B, H, r, c]."""
    B, c, HV = x.shape
    return x.permute(0, 2, 1).reshape(B, H, HV // H, c)


def merge_heads(x):
    """[B, H, r, c, X] -> [B, c, HV, X]."""
    B, H, r, c, X = x.shape
    return x.reshape(B, H * r, c, X).permute(0, 2, 1, 3)


def time_box(x, start, length, max_length: int):
    """The box of ``length`` (<= max_length) time steps of x [B, T, ...] starting at ``start``."""
    rest = list(x.shape[2:])
    zeros = [0] * len(rest)
    return pypto.view(x, [x.shape[0], max_length] + rest, [0, start] + zeros,
                      valid_shape=[x.shape[0], length] + rest)


# ----------------------------------------------------------------------------------------------
# (I + A)^-1 for a strictly lower-triangular A
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChunkMasks:
    """Constant [C, C] masks of one chunk size; a tail chunk of c tokens uses their [:c, :c] box."""

    causal: torch.Tensor              # j <= i
    strict: torch.Tensor              # j < i
    merge: tuple                      # one per level of ``unit_lower_inverse``

    @classmethod
    def of(cls, C: int) -> "ChunkMasks":
        i = torch.arange(C)
        row, col = i[:, None], i[None, :]
        merge, b = [], 1
        while b < C:
            # the lower-left b x b block inside every 2b x 2b diagonal block
            m = (row // (2 * b) == col // (2 * b)) & (row // b == col // b + 1)
            merge.append(m.float())
            b *= 2
        return cls(col <= row, col < row, tuple(merge))


def _box(mask: torch.Tensor, c):
    return pypto.view(pypto.constant(mask), list(mask.shape), [0, 0], valid_shape=[c, c])


def unit_lower_inverse(A, masks: ChunkMasks, c):
    """(I + A)^-1 for A [..., c, c] strictly lower triangular (c <= C), by recursive block merging.

    Level l treats the matrix as 2^l x 2^l blocks and holds X = the inverse of I + (A restricted
    to its diagonal blocks of size b = 2^l). Two neighbouring diagonal blocks merge by
        inv([[I + A11, 0], [A21, I + A22]]) = [[X11, 0], [-X22 A21 X11, X22]],
    which for all blocks at once is X <- X - X (A * M_l) X with M_l the mask of the A21 blocks.
    log2(C) levels of two matmuls each; unlike a power series (I - A)(I + A^2)(I + A^4)... it
    never forms powers of A, whose entries grow like binomial coefficients and cancel
    catastrophically in fp32 when keys repeat (beta near 1, no decay). The error is that of
    forward substitution. A tail chunk uses the [:c, :c] box of every mask: the block structure
    of a leading sub-matrix is the same.
    """
    X = None
    for m in masks.merge:
        E = A * _box(m, c)
        # level 0 starts from X = I: X - I E I = I - E
        X = (_box(torch.eye(m.shape[0]), c) - E) if X is None else X - pypto.matmul(pypto.matmul(X, E), X)
    if X is None:                                          # C == 1: A is empty
        X = _box(torch.eye(1), c) + 0 * A
    return X


# ----------------------------------------------------------------------------------------------
# One chunk of the gated delta rule
# ----------------------------------------------------------------------------------------------

def gated_delta_chunk(q, k, v, g, beta, S, *, scale: float, masks: ChunkMasks, c):
    """One chunk, all heads at once (fp32 in, fp32 out). Shapes as in the module docstring.
    Returns (o [B, H, r, c, V], S_next [B, H, r, K, V])."""
    G = pypto.cumsum(g, -1)                                        # [B, H, r, c]
    diff = G.unsqueeze(-1) - G.unsqueeze(-2)                       # G_i - G_j
    decay = pypto.exp(pypto.where(_box(masks.causal, c), diff, NEG_INF))
    kk = pypto.matmul(k, k, b_trans=True)                        # [B, H, 1, c, c]
    A = pypto.where(_box(masks.strict, c), beta.unsqueeze(-1) * kk * decay, 0.0)
    Tinv = unit_lower_inverse(A, masks, c)                         # [B, H, r, c, c]
    eG = pypto.exp(G)
    U = pypto.matmul(Tinv, beta.unsqueeze(-1) * v)                 # [B, H, r, c, V]
    W = pypto.matmul(Tinv, (beta * eG).unsqueeze(-1) * k)          # [B, H, r, c, K]
    D = U - pypto.matmul(W, S)                                     # [B, H, r, c, V]
    qs = q * scale
    attn = pypto.matmul(qs, k, b_trans=True) * decay             # [B, H, r, c, c]
    o = pypto.matmul(qs * eG.unsqueeze(-1), S) + pypto.matmul(attn, D)
    G_last = pypto.view(G, list(G.shape[:-1]) + [1], [0, 0, 0, c - 1])   # the last valid token
    k_to_end = k * pypto.exp(G_last - G).unsqueeze(-1)            # [B, H, r, c, K]
    S_next = pypto.exp(G_last).unsqueeze(-1) * S + pypto.matmul(k_to_end, D, a_trans=True)
    return o, S_next


def chunk_gated_delta_rule(q, k, v, g, beta, state, o, sequences, *, scale: float, chunk_size: int,
                           use_qk_l2norm: bool):
    """Chunked gated delta rule over ``sequences`` [(batch row or None for all rows, state row,
    start, length)]: q, k [B, T, H, K]; v, o [B, T, HV, V]; g, beta [B, T, HV]; state [N, HV, K, V]
    fp32, read as the initial state and overwritten with the final one; o is written."""
    H, K = q.shape[2], q.shape[3]
    HV, V = v.shape[2], v.shape[3]
    r = HV // H
    C = chunk_size
    masks = ChunkMasks.of(C)
    for row, state_row, start, length in sequences:
        qq, kk, vv, gg, bb = (x if row is None else x[row:row + 1] for x in (q, k, v, g, beta))
        B = qq.shape[0]
        for i in pypto.loop(pypto.ceildiv(length, C), name="chunk"):
            c = sym.smin(C, length - i * C)
            t0 = start + i * C

            def chunk_of(x):
                return fp32(time_box(x, t0, c, C))
            qc, kc = chunk_of(qq), chunk_of(kk)
            if use_qk_l2norm:
                qc, kc = l2norm(qc), l2norm(kc)
            qc, kc = split_heads(qc, H), split_heads(kc, H)         # [B, H, 1, c, K]
            vc = split_heads(chunk_of(vv), H)
            gc = split_heads_scalar(chunk_of(gg), H)
            bc = split_heads_scalar(chunk_of(bb), H)
            # read inside the body: the state tensor is carried from one chunk to the next
            S = pypto.view(state, [B, HV, K, V], [state_row, 0, 0, 0]).reshape(B, H, r, K, V)
            oc, S_next = gated_delta_chunk(qc, kc, vc, gc, bc, S, scale=scale, masks=masks, c=c)
            pypto.assemble(pypto.cast(merge_heads(oc), o.dtype), [0 if row is None else row, t0, 0, 0], o)
            pypto.assemble(S_next.reshape(B, HV, K, V), [state_row, 0, 0, 0], state)



# ----------------------------------------------------------------------------------------------
# Token-by-token gated delta rule (decode)
# ----------------------------------------------------------------------------------------------

def recurrent_gated_delta_rule(q, k, v, g, beta, state, o, sequences, *, scale: float, use_qk_l2norm: bool):
    """S <- e^g S;  S <- S + k (beta (v - S^T k))^T;  o = S^T (scale q), one token per iteration,
    all heads at once, on the vector unit (products with k and q are broadcast-multiply + sum over
    K: a one-row matmul would waste the cube). Arguments as ``chunk_gated_delta_rule``."""
    H, K = q.shape[2], q.shape[3]
    HV, V = v.shape[2], v.shape[3]
    r = HV // H
    for row, state_row, start, length in sequences:
        qq, kk, vv, gg, bb = (x if row is None else x[row:row + 1] for x in (q, k, v, g, beta))
        B = qq.shape[0]
        for t in pypto.loop(length, name="token"):
            tt = start + t

            def token_of(x):
                return fp32(time_box(x, tt, 1, 1))
            qt, kt = token_of(qq), token_of(kk)
            if use_qk_l2norm:
                qt, kt = l2norm(qt), l2norm(kt)
            q_col = (qt * scale).reshape(B, H, 1, K, 1)
            k_col = kt.reshape(B, H, 1, K, 1)
            vt = token_of(vv).reshape(B, H, r, 1, V)
            gt = token_of(gg).reshape(B, H, r, 1, 1)
            bt = token_of(bb).reshape(B, H, r, 1, 1)
            S = pypto.view(state, [B, HV, K, V], [state_row, 0, 0, 0]).reshape(B, H, r, K, V)
            S = S * pypto.exp(gt)
            predicted = pypto.sum(k_col * S, -2, keepdim=True)             # S^T k   [B, H, r, 1, V]
            S = S + k_col * (bt * (vt - predicted))
            ot = pypto.sum(q_col * S, -2, keepdim=True)                    # S^T q   [B, H, r, 1, V]
            pypto.assemble(pypto.cast(ot.reshape(B, 1, HV, V), o.dtype), [0 if row is None else row, tt, 0, 0], o)
            pypto.assemble(S.reshape(B, HV, K, V), [state_row, 0, 0, 0], state)


# ----------------------------------------------------------------------------------------------
# Short causal convolution (depthwise, channels last)
# ----------------------------------------------------------------------------------------------

def _activate(y, activation):
    return pypto.silu(y) if activation in ("silu", "swish") else y


def causal_conv1d(x, weight, bias, history, *, activation):
    """y[b, t] = act(bias + sum_w weight[:, w] * xx[b, t + w]) with xx = [history, x] along time.
    x [B, T, D]; weight [D, W]; bias [D] or None; history [B, D, W-1] or None (zeros).
    Returns (y [B, T, D] fp32, final history [B, D, W-1] fp32 or None when W == 1)."""
    B, T, D = x.shape
    W = weight.shape[1]
    xx = fp32(x)
    if W > 1:
        past = pypto.zeros(B, W - 1, D) if history is None else fp32(history).permute(0, 2, 1)
        xx = pypto.concat([past, xx], dim=1)                                   # [B, W-1+T, D]
    wf = fp32(weight)
    y = None
    for w in range(W):                     # one shifted multiply-add per tap (W = 4 in Qwen3-Next)
        tap = xx[:, w:w + T, :] * wf[:, w]
        y = tap if y is None else y + tap
    if bias is not None:
        y = y + fp32(bias)
    final = xx[:, T:T + W - 1, :].permute(0, 2, 1) if W > 1 else None
    return _activate(y, activation), final


def causal_conv1d_update(x, conv_state, weight, bias, *, activation):
    """One token: x [B, D]; conv_state [B, D, S >= W-1] (oldest first) is shifted left by one with x
    appended, in place; returns act(bias + sum_w weight[:, w] * window[:, :, w]) [B, D] fp32 with
    window = [conv_state[..., S-W+1:], x]."""
    S = conv_state.shape[2]
    W = weight.shape[1]
    x_col = pypto.cast(x, conv_state.dtype).unsqueeze(-1)                  # [B, D, 1]
    window = pypto.concat([conv_state[:, :, S - (W - 1):], x_col], dim=-1) if W > 1 else x_col
    y = pypto.sum(fp32(window) * fp32(weight), -1)
    if bias is not None:
        y = y + fp32(bias)
    if S > 0:
        shifted = pypto.concat([conv_state[:, :, 1:], x_col], dim=-1) if S > 1 else x_col
        pypto.assemble(shifted, [0, 0, 0], conv_state)
    return _activate(y, activation)

"""The Gated DeltaNet kernels written in pypto (Tensor level), as functions traced inside a jit.

They take and return traced ``pypto.Tensor`` values; ``functional.py`` wraps them into the
torch-in/torch-out, flash-linear-attention compatible entry points and ``layer.py`` calls them from
the layer's forward.

Operands. A per-head operand is a ``Heads``: a tensor [B, T, X] in which head h occupies the
columns ``col0 + h*dim ... col0 + (h+1)*dim`` — q and k [B, T, H*K], v and o [B, T, HV*V], g and
beta [B, T, HV] (dim 1); the layer hands the conv output [B, T, q|k|v] over as it is, with three
column offsets. The state is 2-D, [N*HV*K, V] fp32: row block (n*HV + h)*K holds S of sequence n,
value head h.

Chunked algorithm (per value head; a chunk of C tokens, state S at the chunk's start, G the
in-chunk cumulative sum of g):

    decay[i, j] = exp(G_i - G_j) for j <= i, else 0  (masked to -inf BEFORE exp: above the
                                                       diagonal G_i - G_j > 0 and would overflow)
    A           = strictly-lower part of diag(beta) (K K^T) * decay
    T           = (I + A)^-1                           (``unit_lower_inverse``)
    U = T diag(beta) V,   W = T diag(beta e^G) K,   D = U - W S
    O           = diag(e^G) (scale Q) S + ((scale Q) K^T * decay) D
    S_next      = e^{G_last} S + (K * e^{G_last - G})^T D

Rewritten as affine maps of the chunk's starting state (``chunk_maps``): S_next = M S + P and
O = R S + O_loc, with M, P, R, O_loc depending on the chunk alone.

Tails. Every chunk computes with the static chunk size C: the tail's c = min(C, L - i*C) tokens
are read through a view with a valid shape and ``fillpad``-ed with zeros. Zero padding is exact
here: a padded token has g = 0, beta = 0 and k = v = q = 0, so it leaves the state unchanged and
G_last of the padded chunk is that of its last valid token; only the valid output rows are
stored (a view with a valid shape). Static shapes inside a chunk keep every tile static.

Two layouts of the heads, same math:
  * all heads at once (``per_head=False``, the default): per-head tensors carry the batch dims
    [B, H, r, NC] (r = HV / H, NC chunks) so that value head h*r + j reads key head h by
    broadcasting: q, k [B, H, 1, NC, C, K], v [B, H, r, NC, C, V], g, beta [B, H, r, NC, C, 1].
    The maps of every chunk of every head are computed in one pass of large ops, then a loop over
    chunks runs the recurrence (one matmul and one add per chunk, all heads at once), then every
    output in one pass. Few, large ops: the form that suits both the interpreter and a compiler
    that runs one op at a time.
  * per head (``per_head=True``): ``pypto.loop`` over batch rows and value heads around a loop
    over chunks; every tensor is 2-D ([C, K], [C, C], [K, V]) and read from / written to GM boxes
    directly. Many small ops.
The recurrent (decode) rule has the same two layouts, one token per loop iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import pypto
from pypto import symbolic as sym

L2NORM_EPS = 1e-6
NEG_INF = float("-inf")
DIAG_BLOCK = 16                       # rows of the diagonal blocks of (I + A) inverted first


# ----------------------------------------------------------------------------------------------
# Operands and small helpers
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Heads:
    """Head h of this operand is ``tensor[:, :, col0 + h*dim : col0 + (h+1)*dim]`` (tensor [B, T, X])."""

    tensor: object
    heads: int
    dim: int
    col0: int = 0


def l2norm(x, eps: float = L2NORM_EPS):
    """x * rsqrt(sum(x^2) + eps) over the last dim (fla's l2norm)."""
    return x * pypto.rsqrt(pypto.sum(x * x, -1, keepdim=True) + eps)


def fp32(x):
    return pypto.cast(x, pypto.float32)


def _padded_box(x, rows: int, row0, t0, c, C: int, col, width: int):
    """x[row0 : row0+rows, t0 : t0+c, col : col+width] zero-padded to C time steps, fp32."""
    box = pypto.view(x, [rows, C, width], [row0, t0, col], valid_shape=[rows, c, width])
    return fp32(pypto.fillpad(box) if not (isinstance(c, int) and c == C) else box)


def load_all_heads(op: Heads, rows: int, row0, t0, c, C: int, H: int):
    """[rows, H, heads/H, C, dim] fp32 of every head of ``op`` (dim 1: a column per head)."""
    box = _padded_box(op.tensor, rows, row0, t0, c, C, op.col0, op.heads * op.dim)
    x = box.reshape(rows, C, op.heads, op.dim).permute(0, 2, 1, 3)
    return x.reshape(rows, H, op.heads // H, C, op.dim)


def load_head(op: Heads, row, t0, c, C: int, head):
    """[C, dim] fp32 of one head of ``op``. A scalar-per-head operand (dim 1: g, beta) is read for
    every head as [C, heads] rows and its column picked by a one-hot row of the identity: a
    width-1 column box would be a strided GM access, which the tile compiler does not do."""
    if op.dim == 1:
        rows = _padded_box(op.tensor, 1, row, t0, c, C, op.col0, op.heads).reshape(C, op.heads)
        one_hot = pypto.view(pypto.constant(torch.eye(op.heads)), [1, op.heads], [head, 0])
        return pypto.sum(rows * one_hot, -1, keepdim=True)                  # [C, 1]
    return _padded_box(op.tensor, 1, row, t0, c, C, op.col0 + head * op.dim, op.dim).reshape(C, op.dim)


def store_rows(value, op: Heads, row0, t0, c, col):
    """Write the first c time steps of value [rows, C, width] into op.tensor at [row0, t0, col]."""
    rows, C, width = value.shape
    if not (isinstance(c, int) and c == C):
        value = pypto.view(value, [rows, C, width], [0, 0, 0], valid_shape=[rows, c, width])
    pypto.assemble(pypto.cast(value, op.tensor.dtype), [row0, t0, col], op.tensor)


# ----------------------------------------------------------------------------------------------
# (I + A)^-1 for a strictly lower-triangular A
# ----------------------------------------------------------------------------------------------

def _merge_masks(n: int, first: int):
    """For b = first, 2*first, ... < n: the [n, n] mask of the lower-left b x b block inside every
    2b x 2b diagonal block."""
    i = torch.arange(n)
    row, col = i[:, None], i[None, :]
    out, b = [], first
    while b < n:
        out.append(((row // (2 * b) == col // (2 * b)) & (row // b == col // b + 1)).float())
        b *= 2
    return tuple(out)


@dataclass(frozen=True)
class ChunkMasks:
    """Constant masks of one chunk size C (diagonal blocks of ``block`` rows, ``nb`` of them)."""

    C: int
    block: int
    causal: torch.Tensor              # [C, C]  j <= i
    strict: torch.Tensor              # [C, C]  j < i
    block_strict: torch.Tensor        # [block, block]  j < i
    block_merge: tuple                # merge masks of the levels inside a diagonal block
    outer_merge: tuple                # merge masks of the levels across diagonal blocks ([C, C])
    block_eye: torch.Tensor           # [nb, 1, nb, 1]: places nb blocks on the diagonal

    @property
    def nb(self) -> int:
        return self.C // self.block

    @classmethod
    def of(cls, C: int, block: int | None = None) -> "ChunkMasks":
        """``block``: rows of the diagonal blocks inverted first (default ``DIAG_BLOCK``; C: every level of
        the inverse on the whole chunk)."""
        block = block or (DIAG_BLOCK if C % DIAG_BLOCK == 0 else C)
        i = torch.arange(C)
        j = torch.arange(block)
        nb = C // block
        return cls(C, block, i[None, :] <= i[:, None], i[None, :] < i[:, None], j[None, :] < j[:, None],
                   _merge_masks(block, 1), _merge_masks(C, block), torch.eye(nb).reshape(nb, 1, nb, 1))


def _merge_levels(X, A, masks):
    """Merge diagonal blocks level by level: X <- X - X (A * M) X (see ``unit_lower_inverse``)."""
    for m in masks:
        E = A * pypto.constant(m)
        X = pypto.constant(torch.eye(m.shape[0])) - E if X is None else X - pypto.matmul(pypto.matmul(X, E), X)
    return X


def unit_lower_inverse(A, A_diag, masks: ChunkMasks):
    """(I + A)^-1 for A [..., C, C] strictly lower triangular, given its diagonal blocks
    A_diag [..., nb, block, block] (computed separately: they come cheaply from the keys).

    Recursive block merging: with X the inverse of I + (A restricted to diagonal blocks of size b),
    two neighbouring blocks merge by inv([[I + A11, 0], [A21, I + A22]]) = [[X11, 0], [-X22 A21 X11, X22]],
    for all pairs at once X <- X - X (A * M_b) X, M_b the mask of the A21 blocks. The levels
    b = 1 .. block/2 run on the small diagonal blocks (batched), the levels b = block .. C/2 on the
    whole chunk. Unlike a power series (I - A)(I + A^2)(I + A^4)..., no power of A is ever formed
    (their entries grow like binomial coefficients and cancel catastrophically in fp32 when keys
    repeat with beta near 1 and no decay); the error is that of forward substitution.
    """
    X_diag = _merge_levels(None, A_diag, masks.block_merge)
    if X_diag is None:                                   # block == 1: the inverse of [1] is [1]
        X_diag = A_diag * 0.0 + 1.0
    if masks.nb == 1:
        return X_diag.reshape(*A.shape)
    lead = list(X_diag.shape[:-3])
    b, nb = masks.block, masks.nb
    X = (X_diag.reshape(*lead, nb, b, 1, b) * pypto.constant(masks.block_eye)).reshape(*A.shape)
    return _merge_levels(X, A, masks.outer_merge)


# ----------------------------------------------------------------------------------------------
# One chunk of the gated delta rule
# ----------------------------------------------------------------------------------------------

def _last_row(x):
    """x[..., -1:, :] of a static row dim."""
    n = x.shape[-2]
    return pypto.view(x, list(x.shape[:-2]) + [1, x.shape[-1]], [0] * (x.ndim - 2) + [n - 1, 0])


def _decay(G, mask: torch.Tensor):
    """exp(G_i - G_j) where mask[i, j], else 0, for a column G [..., n, 1]: the difference is masked to
    -inf before the exp."""
    n = G.shape[-2]
    G_row = G.reshape(*G.shape[:-2], 1, n)
    return pypto.exp(pypto.where(pypto.constant(mask), G - G_row, NEG_INF))


@dataclass(frozen=True)
class ChunkMaps:
    """What a chunk does to the state, as affine maps of the state S at its start:
    S_next = M S + P and o = R S + O (see ``chunk_maps``)."""

    M: object     # [..., K, K]
    P: object     # [..., K, V]
    R: object     # [..., C, K]
    O: object     # [..., C, V]


def chunk_maps(q, k, v, G, beta, *, scale: float, masks: ChunkMasks, cube_dtype=None) -> ChunkMaps:
    """The chunk-local part of the gated delta rule, in fp32, for any leading (batch) dims that
    broadcast: q, k [..., C, K]; v [..., C, V]; G (the in-chunk cumulative sum of g) and beta
    columns [..., C, 1].

    With D = U - W S (the module docstring's terms) the chunk's outputs and next state are affine
    in S:  S_next = e^{G_last} S + K~^T D = (e^{G_last} I - K~^T W) S + K~^T U,  K~ = K * e^{G_last - G};
           O      = Qg S + A_qk D        = (Qg - A_qk W) S + A_qk U,          Qg = scale Q * e^G.
    All four maps depend on the chunk alone, so every chunk's are computed at once, in parallel;
    the sequential recurrence over chunks is then one matmul and one add per chunk.

    ``cube_dtype`` (e.g. pypto.bfloat16): round the operands of these matmuls to it (fp32
    accumulation), as flash-linear-attention does for bf16 models: 4x the fp32 cube rate, at a
    relative error of a few 1e-3 (rounding the normalised keys alone costs that much). The
    inverse (I + A)^-1 always runs in fp32. Default None: every matmul in fp32."""
    def mm(a, b, **kw):
        if cube_dtype is None:
            return pypto.matmul(a, b, **kw)
        return pypto.matmul(pypto.cast(a, cube_dtype), pypto.cast(b, cube_dtype), out_dtype=pypto.float32, **kw)

    K = k.shape[-1]
    decay = _decay(G, masks.causal)                                 # [..., C, C]
    A = pypto.where(pypto.constant(masks.strict), beta * mm(k, k, b_trans=True) * decay, 0.0)
    # the diagonal blocks again, from the keys of each block (cheaper than cutting them out of A)
    nb, b = masks.nb, masks.block
    lead_k, lead_g = list(k.shape[:-2]), list(G.shape[:-2])
    if nb == 1:                                                     # one block: A itself
        A_diag = A.reshape(*A.shape[:-2], 1, b, b)
    else:
        k_blocks = k.reshape(*lead_k, nb, b, K)
        G_blocks = G.reshape(*lead_g, nb, b, 1)
        A_diag = beta.reshape(*lead_g, nb, b, 1) * mm(k_blocks, k_blocks, b_trans=True) \
            * _decay(G_blocks, masks.block_strict)
    T = unit_lower_inverse(A, A_diag, masks)                        # [..., C, C]
    eG = pypto.exp(G)
    U = mm(T, beta * v)                                             # [..., C, V]
    W = mm(T, (beta * eG) * k)                                      # [..., C, K]
    qs = q * scale
    attn = mm(qs, k, b_trans=True) * decay                          # [..., C, C]
    G_last = _last_row(G)                                           # the last valid token's (padding has g = 0)
    k_to_end = k * pypto.exp(G_last - G)                            # [..., C, K]
    M = pypto.exp(G_last) * pypto.constant(torch.eye(K)) - mm(k_to_end, W, a_trans=True)
    return ChunkMaps(M, mm(k_to_end, U, a_trans=True), qs * eG - mm(attn, W), mm(attn, U))


def gated_delta_chunk(q, k, v, g, beta, S, *, scale: float, masks: ChunkMasks, cube_dtype=None):
    """One chunk given the state at its start (g, beta columns [..., C, 1]): returns
    (o [..., C, V], S_next [..., K, V])."""
    m = chunk_maps(q, k, v, pypto.cumsum(g, -2), beta, scale=scale, masks=masks, cube_dtype=cube_dtype)
    return pypto.matmul(m.R, S) + m.O, pypto.matmul(m.M, S) + m.P


# ----------------------------------------------------------------------------------------------
# Drivers: loops over sequences, heads and chunks
# ----------------------------------------------------------------------------------------------

def _rows(sequences, batch):
    """Expand (None = every batch row) sequences to one entry per batch row, for per-head loops:
    yields (sequence number, row, state row, start, length) with row possibly a loop index. Loops of
    different sequences get different index names (n in the name)."""
    for n, (row, state_row, start, length) in enumerate(sequences):
        if row is None:
            for b in pypto.loop(batch, name=f"row{n}"):
                yield n, b, b, start, length
        else:
            yield n, row, state_row, start, length


def load_chunks(op: Heads, rows: int, row0, start, length, NC, C: int, H: int, cumsum: bool = False):
    """Every chunk of every head of ``op`` for a sequence: [rows, H, heads/H, NC, C, dim] fp32,
    the time axis zero-padded from ``length`` to NC * C; ``cumsum``: the in-chunk cumulative sum
    over time instead.

    Heads move in front of time without a permute (the compiled backends copy a permuted tensor
    row by row): the strided [time, dim] boxes of the heads concatenated, or, for one value per
    head (g, beta), a transpose on the cube (I @ x^T, exact)."""
    Lp = NC * C
    if op.dim == 1:
        box = pypto.view(op.tensor, [rows, Lp, op.heads], [row0, start, op.col0], valid_shape=[rows, length, op.heads])
        x = fp32(pypto.fillpad(box))
        if cumsum:
            x = pypto.cumsum(x.reshape(rows, NC, C, op.heads), -2).reshape(rows, Lp, op.heads)
        x = pypto.matmul(_eye(op.heads), x, b_trans=True)                    # [rows, heads, Lp]
        return x.reshape(rows, H, op.heads // H, NC, C, 1)
    width = op.heads * op.dim
    box = pypto.view(op.tensor, [rows, Lp, width], [row0, start, op.col0], valid_shape=[rows, length, width])
    padded = fp32(pypto.fillpad(box))                                         # [rows, Lp, heads*dim]
    heads = [pypto.view(padded, [rows, Lp, op.dim], [0, 0, j * op.dim]).reshape(rows, 1, Lp, op.dim)
             for j in range(op.heads)]
    x = pypto.concat(heads, dim=1).reshape(rows, op.heads, NC, C, op.dim)
    if cumsum:
        x = pypto.cumsum(x, -2)
    return x.reshape(rows, H, op.heads // H, NC, C, op.dim)


def _chunk_all_heads(q, k, v, g, beta, state, o, n, row, state_row, start, length, *, scale, masks,
                     use_qk_l2norm, cube_dtype):
    """One sequence (or all batch rows), every head at once: the chunk maps of all chunks in one
    pass, then the state recurrence (one loop iteration per chunk), then all outputs in one pass."""
    H, K, HV, V = q.heads, q.dim, v.heads, v.dim
    r, C = HV // H, masks.C
    rows, row0 = (q.tensor.shape[0], 0) if row is None else (1, row)
    NC = pypto.ceildiv(length, C)
    qc, kc = (load_chunks(x, rows, row0, start, length, NC, C, H) for x in (q, k))     # [R, H, 1, NC, C, K]
    if use_qk_l2norm:
        qc, kc = l2norm(qc), l2norm(kc)
    vc, bc = (load_chunks(x, rows, row0, start, length, NC, C, H) for x in (v, beta))
    Gc = load_chunks(g, rows, row0, start, length, NC, C, H, cumsum=True)
    maps = chunk_maps(qc, kc, vc, Gc, bc, scale=scale, masks=masks, cube_dtype=cube_dtype)
    starts = pypto.zeros(rows, H, r, NC, K, V)                      # the state at the start of each chunk
    state_box = [rows * HV * K, V], [state_row * HV * K, 0]
    for i in pypto.loop(NC, name=f"chunk{n}"):
        S = pypto.view(state, *state_box).reshape(rows, H, r, 1, K, V)   # read in the body: carried
        pypto.assemble(S, [0, 0, 0, i, 0, 0], starts)

        def at_chunk(x):
            return pypto.view(x, [rows, H, r, 1] + list(x.shape[-2:]), [0, 0, 0, i, 0, 0])
        S_next = pypto.matmul(at_chunk(maps.M), S) + at_chunk(maps.P)
        pypto.assemble(S_next.reshape(*state_box[0]), state_box[1], state)
    out = pypto.matmul(maps.R, starts) + maps.O                     # [R, H, r, NC, C, V]
    # (a permute: on the compiled backends per-head box writes into o cost more than this copy; in o's
    # dtype, so that it moves half the bytes of fp32 for a bf16 o)
    out = pypto.cast(out, o.tensor.dtype).reshape(rows, HV, NC * C, V).permute(0, 2, 1, 3)
    out = out.reshape(rows, NC * C, HV * V)
    store_rows(out, o, row0, start, length, o.col0)


def chunk_gated_delta_rule(q: Heads, k: Heads, v: Heads, g: Heads, beta: Heads, state, o: Heads, sequences, *,
                           scale: float, chunk_size: int, use_qk_l2norm: bool, per_head: bool = False,
                           cube_dtype=None):
    """Chunked gated delta rule over ``sequences`` [(batch row or None for all rows, state row, start,
    length)]. state [N*HV*K, V] fp32 holds the initial states and is overwritten with the final ones;
    o is written. See the module docstring for operands and layouts; ``cube_dtype`` as in
    ``chunk_maps``."""
    H, K, HV, V = q.heads, q.dim, v.heads, v.dim
    r, C = HV // H, chunk_size
    # all heads at once: every level of (I + A)^-1 on whole chunks (the 16-row diagonal blocks' small
    # matmuls and their placement cost more than the levels they save: issue 14)
    masks = ChunkMasks.of(C, block=None if per_head else C)
    if not per_head:
        for n, (row, state_row, start, length) in enumerate(sequences):
            _chunk_all_heads(q, k, v, g, beta, state, o, n, row, state_row, start, length, scale=scale, masks=masks,
                             use_qk_l2norm=use_qk_l2norm, cube_dtype=cube_dtype)
        return
    for n, row, state_row, start, length in _rows(sequences, q.tensor.shape[0]):
        for h in pypto.loop(HV, name=f"head{n}"):
            kh = sym.floordiv(h, r)                                  # the key head of value head h
            s_row = (state_row * HV + h) * K
            for i in pypto.loop(pypto.ceildiv(length, C), name=f"chunk{n}"):
                c, t0 = sym.smin(C, length - i * C), start + i * C
                qc, kc = load_head(q, row, t0, c, C, kh), load_head(k, row, t0, c, C, kh)
                if use_qk_l2norm:
                    qc, kc = l2norm(qc), l2norm(kc)
                S = pypto.view(state, [K, V], [s_row, 0])           # read in the body: carried over chunks
                oc, S_next = gated_delta_chunk(qc, kc, load_head(v, row, t0, c, C, h),
                                               load_head(g, row, t0, c, C, h), load_head(beta, row, t0, c, C, h),
                                               S, scale=scale, masks=masks, cube_dtype=cube_dtype)
                store_rows(oc.reshape(1, C, V), o, row, t0, c, o.col0 + h * V)
                pypto.assemble(S_next, [s_row, 0], state)


def recurrent_step(q_col, k_col, v_row, g, beta, S):
    """One token: S <- e^g S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q. q_col, k_col [..., K, 1];
    v_row [..., 1, V]; g, beta [..., 1, 1]; S [..., K, V]. Products with k and q are broadcast
    multiplies + sums over K on the vector unit (a one-row matmul would waste the cube).
    Returns (o [..., 1, V], S)."""
    S = S * pypto.exp(g)
    predicted = pypto.sum(k_col * S, -2, keepdim=True)              # S^T k
    S = S + k_col * (beta * (v_row - predicted))
    return pypto.sum(q_col * S, -2, keepdim=True), S


def recurrent_gated_delta_rule(q: Heads, k: Heads, v: Heads, g: Heads, beta: Heads, state, o: Heads, sequences, *,
                               scale: float, use_qk_l2norm: bool, per_head: bool = False):
    """Token-by-token gated delta rule (decode); arguments as ``chunk_gated_delta_rule``."""
    H, K, HV, V = q.heads, q.dim, v.heads, v.dim
    r = HV // H
    batch = q.tensor.shape[0]
    if per_head:
        for n, row, state_row, start, length in _rows(sequences, batch):
            for h in pypto.loop(HV, name=f"head{n}"):
                kh = sym.floordiv(h, r)
                s_row = (state_row * HV + h) * K
                for t in pypto.loop(length, name=f"token{n}"):
                    tt = start + t
                    qt, kt = load_head(q, row, tt, 1, 1, kh), load_head(k, row, tt, 1, 1, kh)    # [1, K]
                    if use_qk_l2norm:
                        qt, kt = l2norm(qt), l2norm(kt)
                    S = pypto.view(state, [K, V], [s_row, 0])
                    ot, S = recurrent_step((qt * scale).reshape(K, 1), kt.reshape(K, 1), load_head(v, row, tt, 1, 1, h),
                                           load_head(g, row, tt, 1, 1, h), load_head(beta, row, tt, 1, 1, h), S)
                    store_rows(ot.reshape(1, 1, V), o, row, tt, 1, o.col0 + h * V)
                    pypto.assemble(S, [s_row, 0], state)
        return
    for n, (row, state_row, start, length) in enumerate(sequences):
        rows, row0 = (batch, 0) if row is None else (1, row)
        for t in pypto.loop(length, name=f"token{n}"):
            tt = start + t
            qt, kt = (load_all_heads(x, rows, row0, tt, 1, 1, H) for x in (q, k))        # [B, H, 1, 1, K]
            if use_qk_l2norm:
                qt, kt = l2norm(qt), l2norm(kt)
            vt = load_all_heads(v, rows, row0, tt, 1, 1, H)                               # [B, H, r, 1, V]
            gt, bt = (load_all_heads(x, rows, row0, tt, 1, 1, H) for x in (g, beta))     # [B, H, r, 1, 1]
            S = pypto.view(state, [rows * HV * K, V], [state_row * HV * K, 0]).reshape(rows, H, r, K, V)
            ot, S = recurrent_step((qt * scale).reshape(rows, H, 1, K, 1), kt.reshape(rows, H, 1, K, 1),
                                   vt, gt, bt, S)
            store_rows(ot.reshape(rows, 1, HV * V), o, row0, tt, 1, o.col0)
            pypto.assemble(S.reshape(rows * HV * K, V), [state_row * HV * K, 0], state)


# ----------------------------------------------------------------------------------------------
# Short causal convolution (depthwise, channels last)
# ----------------------------------------------------------------------------------------------

def _activate(y, activation):
    return pypto.silu(y) if activation in ("silu", "swish") else y


def _eye(rows: int, cols: int | None = None):
    return pypto.constant(torch.eye(rows, cols if cols is not None else rows))


def transpose_last2(x):
    """x^T over the last two dims, computed by the cube as x^T @ I (exact): the vector tiles of the
    compiled backends cannot read a transposed GM box yet, the cube's operand loads can."""
    return pypto.matmul(x, _eye(x.shape[-2]), a_trans=True)


def _rows_join(a, b):
    """concat([a, b]) along dim 1 (time) of [B, t, D] tensors, as two row-box writes into a new tensor."""
    out = pypto.zeros(a.shape[0], a.shape[1] + b.shape[1], a.shape[2], dtype=a.dtype)
    pypto.assemble(a, [0, 0, 0], out)
    pypto.assemble(b, [0, a.shape[1], 0], out)
    return out


def causal_conv1d(x, weight, bias, history, *, activation):
    """y[b, t] = act(bias + sum_w weight[:, w] * xx[b, t + w]) with xx = [history, x] along time.
    x [B, T, D]; weight [D, W]; bias [D] or None; history [B, D, W-1] or None (zeros).
    Returns (y [B, T, D] fp32, final history [B, D, W-1] fp32 or None when W == 1).

    Time runs along rows, channels along the contiguous last dim: each tap is a row-shifted box of
    xx times a row of weight^T; the channel-major history and weight are transposed on the cube."""
    B, T, D = x.shape
    W = weight.shape[1]
    xx = fp32(x)
    if W > 1:
        past = pypto.zeros(B, W - 1, D) if history is None else transpose_last2(fp32(history))
        xx = _rows_join(past, xx)                                            # [B, W-1+T, D]
    taps = transpose_last2(fp32(weight))                                     # [W, D]
    y = None
    for w in range(W):                     # one shifted multiply-add per tap (W = 4 in Qwen3-Next)
        tap = xx[:, w:w + T, :] * taps[w]
        y = tap if y is None else y + tap
    if bias is not None:
        y = y + fp32(bias)
    final = transpose_last2(xx[:, T:T + W - 1, :]) if W > 1 else None      # [B, D, W-1]
    return _activate(y, activation), final


def causal_conv1d_update(x, conv_state, weight, bias, *, activation):
    """One token: x [B, D]; conv_state [B, D, S >= W-1] (oldest first) is shifted left by one with x
    appended, in place; returns act(bias + sum_w weight[:, w] * window[:, :, w]) [B, D] fp32 with
    window = [conv_state[..., S-W+1:], x].

    Column moves are written as products with 0/1 matrices and one-hot rows (exact), since the
    compiled backends do not move single columns: window = state[..., S-W+1:] @ [I | 0] + x e_W^T,
    new state = state @ shift + x e_S^T."""
    S = conv_state.shape[2]
    W = weight.shape[1]
    x_col = fp32(x).unsqueeze(-1)                                            # [B, D, 1]

    def one_hot(n, i):
        return pypto.view(_eye(n), [1, n], [i, 0])                           # [1, n]
    window = x_col * one_hot(W, W - 1)                                       # [B, D, W]
    if W > 1:
        window = window + pypto.matmul(fp32(conv_state[:, :, S - (W - 1):]), _eye(W - 1, W))
    y = pypto.sum(window * fp32(weight), -1)
    if bias is not None:
        y = y + fp32(bias)
    if S > 0:
        shift = pypto.constant(torch.diag(torch.ones(S - 1), -1)) if S > 1 else None    # column j+1 -> j
        shifted = x_col * one_hot(S, S - 1)
        if shift is not None:
            shifted = shifted + pypto.matmul(fp32(conv_state), shift)
        pypto.assemble(pypto.cast(shifted, conv_state.dtype), [0, 0, 0], conv_state)
    return _activate(y, activation)

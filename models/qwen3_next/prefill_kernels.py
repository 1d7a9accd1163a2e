"""The chunked gated delta rule in phases: chunk-parallel preparation, then the state recurrence split over
V column blocks (issue 15 item 2). Two Professional-mode (``pypto_pro.language``) kernels that meet in GM.

Phase 1, ``prep`` (one task per (sequence, value head, chunk): every chunk at once, on every cluster):
  vector: gates (in-chunk cumsum G, decay), q / k l2-normalised, q scaled; Qg = e^G qn and K~ = e^{G_last - G} kn
          -> GM (for phase 2), kn, qn, Rv = beta v, Rk = -beta e^G kn -> the cluster's workspace;
          from the cube's Gram matrices: attn = QK^T * decay -> GM, A = beta KK^T * decay and the pieces of
          the blocked inverse (as in pro_kernels) -> workspace
  cube:   KK^T, QK^T; T = (I + A)^-1 by block merging; U = T Rv and -W = T Rk -> GM.
Phase 2, ``state`` (one task per (sequence, value head, V column block of VB)): the recurrence with the
state's columns on chip (fp32 on the vector cores, VB/2 each), per chunk
  cube:   D = U - W S (U through an identity matmul), O = Qg S + attn D -> o, K~^T D -> workspace
  vector: S <- e^{G_last} S + K~^T D, cast -> workspace for the next chunk.
The V columns of the state are independent, so HV * V / VB chains fill the clusters; the output is made in
phase 2 where S is on chip (not a third phase: q S_{chunk start} would need every chunk's state in GM).

Matmul operands and accumulation as in pro_kernels (fp32 for fp32 inputs; fp16 operands, fp32 accumulation
and state for 16-bit ones). Supported: K == V a multiple of 16 up to 128, chunk a power of two in 8..64
(``pro_kernels.supports``), V a multiple of the column block.

Lock step instead of a pipeline: the preparation takes 2 chunks per cluster at a time (the vectors stage one
while the cube multiplies the other), the state phase up to 3 chains (L0C, and L0A / L0B for 2-byte
operands, in two sets alternating between chains). Measured (bench_gdn (a), a2a3 timing-only, H=16, HV=32,
K=V=128, bf16): T=8192 1183.5 us (prep 767.5, state 416.0) = 0.122 of the 144.7 us bound; 16 x 4096 varlen
9131.5 us = 0.128. Both phases are still latency bound (AIC / AIV pipes 20-45% busy): the preparation's
four cube <-> vector GM hand-overs per chunk with only 2 chunks in flight, and its vector work (V 47%);
the state phase's two hand-overs per chunk and its 80 KB of operand loads per chain and chunk.
Varlen sequences are launched one after another by the host (two launches each).
"""

import math

import torch

import pypto_pro.language as pl

from .functional import _fail
from .pro_kernels import (L2NORM_EPS, NEG, chunk_gates, fetch_rows, gram_products, merge_levels, merge_masks,
                          normalize, store_cc, store_rows, supports)

__all__ = ["chunk_gated_delta_rule_phases", "supports", "v_block_for"]


def _prep_body(q: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
               k: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
               v: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
               gT: pl.Tensor[[pl.DYNAMIC, pl.STATIC, pl.DYNAMIC], pl.DT_FP32],
               beta: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], pl.DT_FP32],
               masks: pl.Tensor[[pl.STATIC, pl.STATIC], pl.DT_UINT8],
               eye: pl.Tensor[[pl.STATIC, pl.STATIC], None],
               u_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
               w_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
               qg_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
               kt_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
               attn_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
               start: pl.Scalar[pl.DT_INT32], length: pl.Scalar[pl.DT_INT32],
               H, HV, K, V, C, NL, scale, l2norm, cast_io, IL):
    io = q.dtype
    dt = eye.dtype
    inv = dt
    f32, u8 = pl.DT_FP32, pl.DT_UINT8
    R = HV // H
    HALF = C // 2
    B = q.shape[0]
    Vec, Mat, Left, Right, Acc, GM = (pl.MemorySpace.Vec, pl.MemorySpace.Mat, pl.MemorySpace.Left,
                                      pl.MemorySpace.Right, pl.MemorySpace.Acc, pl.MemorySpace.GM)
    NC = pl.ceil_div(length, C)

    ws_prep = pl.make_tile_group(pl.TileType([4 * C, K], dt, GM), depth=IL)     # kn qn Rv Rk
    ws_gram = pl.make_tile_group(pl.TileType([2 * C, C], f32, GM), depth=IL)    # KK^T, QK^T
    ws_e = pl.make_tile_group(pl.TileType([NL * C, C], inv, GM), depth=IL)      # X1, E_2 .. E_C/2

    # cube buffers (planned for C = 64, K = V = 128, 4-byte operands)
    l_eye = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x00000)
    l_t = pl.make_tile(pl.TileType([C, C], dt, Mat), addr=0x04000)
    l_x = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x08000)
    l_p = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x10000)
    l_kn = pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x14000)
    l_qn = pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x14000)
    l_knT = pl.make_tile(pl.TileType([K, C], dt, Mat), addr=0x1C000)
    l_rv = [pl.make_tile(pl.TileType([C, V], dt, Mat), addr=0x2C000 + 0x20000 * j) for j in range(IL)]
    l_rk = [pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x3C000 + 0x20000 * j) for j in range(IL)]
    l_es = pl.make_tile_group(pl.TileType([C, C], inv, Mat), addrs=0x6C000, depth=NL - 1)
    a_eye = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0xC000)
    a_kn = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_qn = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_x = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0x0000)
    a_p = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0x4000)
    a_t = pl.make_tile(pl.TileType([C, C], dt, Left), addr=0x8000)
    b_knT = pl.make_tile(pl.TileType([K, C], dt, Right), addr=0x0000)
    b_e = pl.make_tile(pl.TileType([C, C], inv, Right), addr=0x0000)
    b_x = pl.make_tile(pl.TileType([C, C], inv, Right), addr=0x4000)
    b_rv = pl.make_tile(pl.TileType([C, V], dt, Right), addr=0x0000)
    b_rk = pl.make_tile(pl.TileType([C, K], dt, Right), addr=0x8000)
    c_g1 = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x10000)
    c_g2 = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x14000)
    c_p = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x10000)
    c_x = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x14000)
    c_u = pl.make_tile(pl.TileType([C, V], f32, Acc), addr=0x00000)
    c_w = pl.make_tile(pl.TileType([C, K], f32, Acc), addr=0x08000)

    # vector buffers (per vector core)
    fq = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x00000)
    fk = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x04000)
    ft = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x08000)
    xd_g = pl.make_tile_group(pl.TileType([HALF, K], dt, Vec), addrs=[0x0C000, 0x0E000], depth=2)
    xin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x10000)
    kin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x12000)
    vin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x14000)
    cc = pl.TileType([HALF, C], f32, Vec)
    gx = pl.make_tile(cc, addr=0x1C000)
    decs = [pl.make_tile(cc, addr=a) for a in (0x1A000, 0x16000)[:IL]]      # per lock-step slot
    aa = pl.make_tile(cc, addr=0x1C000)
    na = pl.make_tile(cc, addr=0x1E000)
    t1 = pl.make_tile(cc, addr=0x20000)
    gq = pl.make_tile(cc, addr=0x22000)
    zero = pl.make_tile(cc, addr=0x24000)
    cinv = pl.make_tile_group(pl.TileType([HALF, C], inv, Vec), addrs=[0x26000, 0x27000], depth=2)
    mk = pl.TileType([HALF, C], u8, Vec)
    m_causal = pl.make_tile(mk, addr=0x28000)
    m_strict = pl.make_tile(mk, addr=0x28800)
    m_eye = pl.make_tile(mk, addr=0x29000)
    m_merge = pl.make_tile_group(mk, addrs=0x29800, depth=NL)
    col = pl.TileType([HALF, 8], f32, Vec)
    rq = pl.make_tile(col, addr=0x2D000)
    bcs = [pl.make_tile(col, addr=a) for a in (0x2D400, 0x2E800)[:IL]]
    gc = pl.make_tile(col, addr=0x2D800)
    eg = pl.make_tile(col, addr=0x2DC00)
    eglg = pl.make_tile(col, addr=0x2E000)
    nbeg = pl.make_tile(col, addr=0x2E400)
    rowt = pl.TileType([1, C], f32, Vec)
    g_row = pl.make_tile(rowt, addr=0x2C800)
    G_row = pl.make_tile(rowt, addr=0x2C900)
    gl = pl.make_tile(pl.TileType([1, 8], f32, Vec), addr=0x2CA00)
    glc = pl.make_tile(col, addr=0x2CC00)

    FQ, FK, FT = fq.with_valid(HALF, K), fk.with_valid(HALF, K), ft.with_valid(HALF, K)
    XIN, KIN, VIN = xin.with_valid(HALF, K), kin.with_valid(HALF, K), vin.with_valid(HALF, K)

    def gram(s):
        """KK^T and QK^T of the normalised keys / queries in workspace slot p -> vectors; Rv, Rk -> L1."""
        p = ws_prep.next()
        gram_products(p, ws_gram.next(), C, l_kn, l_knT, l_qn, a_kn, b_knT, a_qn, c_g1, c_g2)
        pl.load(l_rv[s], p, [2 * C, 0])
        pl.load(l_rk[s], p, [3 * C, 0])

    def solve(task, s):
        """T = (I + A)^-1 (X <- X I + (X E_b) X level by level), U = T Rv and -W = T Rk -> GM."""
        row = task * C
        e = ws_e.next()
        pl.load(l_x, e, [0, 0])
        for lvl in range(1, NL):
            pl.load(l_es[lvl - 1], e, [lvl * C, 0])
        merge_levels(NL, l_x, l_es, l_p, l_t, a_x, b_e, a_p, b_x, a_eye, c_p, c_x)
        pl.move(a_t, l_t)
        pl.move(b_rv, l_rv[s])
        pl.matmul(c_u, a_t, b_rv)
        pl.store(u_ws, c_u, [row, 0])
        pl.move(b_rk, l_rk[s])
        pl.matmul(c_w, a_t, b_rk)
        pl.store(w_ws, c_w, [row, 0])

    def prepare(task, s, r0):
        """Gates and the operands of chunk ``task`` (own rows): kn, qn, Rv, Rk -> workspace, Qg, K~ -> GM;
        its decay and beta stay in slot s's tiles for pieces()."""
        dec, bc = decs[s], bcs[s]
        b = task // (HV * NC)
        hv = (task // NC) % HV
        i = task % NC
        kh = hv // R
        row = task * C
        t0 = start + i * C
        c = pl.min(C, length - i * C)
        cv = pl.max(1, pl.min(HALF, c - r0))
        present = c > r0
        # G = cumsum g (zero padded), G_last, the own rows' G_i, decay = exp(G_i - G_j) for j <= i
        pl.full(bc, 0.0)
        pl.full(g_row, 0.0)
        if cast_io:
            pl.full(XIN, 0.0)
            pl.full(KIN, 0.0)
            pl.full(VIN, 0.0)
        pl.load(g_row, gT, [b, hv, t0], valid_shape=[1, c])
        if present:
            pl.load(bc, beta, [b, t0 + r0, hv], valid_shape=[cv, 1])
            if cast_io:
                pl.load(XIN, q, [b, t0 + r0, kh * K], valid_shape=[cv, K])
                pl.load(KIN, k, [b, t0 + r0, kh * K], valid_shape=[cv, K])
                pl.load(VIN, v, [b, t0 + r0, hv * V], valid_shape=[cv, V])
        chunk_gates(g_row.with_valid(1, C), G_row, gl, gx, gc, t1, dec, m_eye, m_causal, zero)
        pl.exp(eg, gc)
        pl.col_expand(glc.with_valid(HALF, 1), gl)
        pl.sub(eglg, glc.with_valid(HALF, 1), gc)
        pl.exp(eglg, eglg)
        pl.mul(nbeg, bc.with_valid(HALF, 1), eg)
        pl.mul(nbeg, nbeg, -1.0)
        p = ws_prep.next()
        # queries: qn = scale q / |q| -> workspace, Qg = e^G qn -> GM
        if cast_io:
            pl.cast(FQ, XIN)
        else:
            fetch_rows(FQ, q, b, t0 + r0, kh * K, present, cv, K)
        if l2norm:
            normalize(FQ, FT, rq)
        pl.mul(FQ, FQ, scale)
        store_rows(p, C + r0, FQ, xd_g, cast_io)
        pl.row_expand_mul(FQ, FQ, eg)
        store_rows(qg_ws, row + r0, FQ, xd_g, cast_io)
        # keys: kn, Rk = -beta e^G kn -> workspace, K~ = e^{G_last - G} kn -> GM
        if cast_io:
            pl.cast(FK, KIN)
        else:
            fetch_rows(FK, k, b, t0 + r0, kh * K, present, cv, K)
        if l2norm:
            normalize(FK, FT, rq)
        store_rows(p, r0, FK, xd_g, cast_io)
        pl.row_expand_mul(FT, FK, eglg)
        store_rows(kt_ws, row + r0, FT, xd_g, cast_io)
        pl.row_expand_mul(FT, FK, nbeg)
        store_rows(p, 3 * C + r0, FT, xd_g, cast_io)
        # values: Rv = beta v
        if cast_io:
            pl.cast(FQ, VIN)
        else:
            fetch_rows(FQ, v, b, t0 + r0, hv * V, present, cv, V)
        pl.row_expand_mul(FQ, FQ, bc.with_valid(HALF, 1))
        store_rows(p, 2 * C + r0, FQ, xd_g, cast_io)

    def pieces(task, s, r0):
        """attn = QK^T * decay -> GM; A = beta KK^T * decay (strictly lower); X1 = I - A*M_1, E_b = -A*M_b
        (own rows) -> workspace."""
        dec, bc = decs[s], bcs[s]
        row = task * C
        gw = ws_gram.next()
        pl.load(aa, gw, [r0, 0])
        pl.load(gq, gw, [C + r0, 0])
        pl.mul(gq, gq, dec)
        store_cc(attn_ws, row, r0, gq, cinv, cast_io)
        pl.mul(aa, aa, dec)
        pl.row_expand_mul(aa, aa, bc.with_valid(HALF, 1))
        pl.where(aa, m_strict, aa, zero)
        pl.mul(na, aa, -1.0)
        e = ws_e.next()
        pl.where(t1, m_merge[0], na, zero)
        pl.full(aa, 1.0)
        pl.where(t1, m_eye, aa, t1)
        store_cc(e, 0, r0, t1, cinv, cast_io)
        for lvl in range(1, NL):
            pl.where(t1, m_merge[lvl], na, zero)
            store_cc(e, lvl * C, r0, t1, cinv, cast_io)

    # IL chunks per cluster in lock step: the vectors stage chunk b's operands while the cube multiplies
    # chunk a's Gram matrices, the cube inverts a while the vectors cut b's pieces. A last incomplete
    # group repeats the last chunk (same values written twice).
    TOTAL = B * HV * NC
    with pl.section_cube():
        pl.load(l_eye, eye, [0, 0])
        pl.move(a_eye, l_eye)
        for grp in pl.range(pl.get_block_idx(), pl.ceil_div(TOTAL, IL), pl.get_block_num()):
            for s in range(IL):
                gram(s)
            for s in range(IL):
                solve(pl.min(grp * IL + s, TOTAL - 1), s)

    with pl.section_vector():
        sub = pl.get_subblock_idx()
        r0 = sub * HALF
        pl.load(m_causal, masks, [r0, 0])
        pl.load(m_strict, masks, [C + r0, 0])
        pl.load(m_eye, masks, [2 * C + r0, 0])
        for lvl in range(NL):
            pl.load(m_merge[lvl], masks, [(3 + lvl) * C + r0, 0])
        pl.full(zero, 0.0)
        for grp in pl.range(pl.get_block_idx(), pl.ceil_div(TOTAL, IL), pl.get_block_num()):
            for s in range(IL):
                prepare(pl.min(grp * IL + s, TOTAL - 1), s, r0)
            for s in range(IL):
                pieces(pl.min(grp * IL + s, TOTAL - 1), s, r0)


def _state_body(gT: pl.Tensor[[pl.DYNAMIC, pl.STATIC, pl.DYNAMIC], pl.DT_FP32],
                eye: pl.Tensor[[pl.STATIC, pl.STATIC], None],
                u_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                w_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                qg_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                kt_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                attn_ws: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None],
                state: pl.Tensor[[pl.DYNAMIC, pl.STATIC], pl.DT_FP32],
                o: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
                start: pl.Scalar[pl.DT_INT32], length: pl.Scalar[pl.DT_INT32], n0: pl.Scalar[pl.DT_INT32],
                HV, K, V, C, VB, cast_io, IL):
    dt = eye.dtype
    f32 = pl.DT_FP32
    NB = V // VB
    VH = VB // 2
    B = o.shape[0]
    Vec, Mat, Left, Right, Acc, GM = (pl.MemorySpace.Vec, pl.MemorySpace.Mat, pl.MemorySpace.Left,
                                      pl.MemorySpace.Right, pl.MemorySpace.Acc, pl.MemorySpace.GM)
    NC = pl.ceil_div(length, C)

    ws_s = pl.make_tile_group(pl.TileType([K, VB], dt, GM), depth=IL)          # S's columns, operand dtype
    ws_kd = pl.make_tile_group(pl.TileType([K, VB], f32, GM), depth=IL)        # K~^T D

    # cube buffers (planned for C = 64, K = 128, VB = 64, 4-byte operands, IL <= 3)
    l_eye = pl.make_tile(pl.TileType([C, C], dt, Mat), addr=0x00000)
    l_s = pl.make_tile(pl.TileType([K, VB], dt, Mat), addr=0x04000)
    l_d = pl.make_tile(pl.TileType([C, VB], dt, Mat), addr=0x0C000)
    SLOT = 0x20000                                                              # per chain: u w qg attn kt
    l_u = [pl.make_tile(pl.TileType([C, VB], dt, Mat), addr=0x20000 + SLOT * j) for j in range(IL)]
    l_w = [pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x24000 + SLOT * j) for j in range(IL)]
    l_qg = [pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x2C000 + SLOT * j) for j in range(IL)]
    l_attn = [pl.make_tile(pl.TileType([C, C], dt, Mat), addr=0x34000 + SLOT * j) for j in range(IL)]
    l_kt = [pl.make_tile(pl.TileType([K, C], dt, Mat), addr=0x38000 + SLOT * j) for j in range(IL)]
    a_eye = pl.make_tile(pl.TileType([C, C], dt, Left), addr=0xC000)           # resident
    # L0 operands in two sets (chains alternate) where they fit: L0C always, L0A / L0B for 2-byte operands
    two = 1 if dt == f32 else 2
    a_w = [pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x4000 * j) for j in range(two)]
    a_qg = [pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x4000 * j) for j in range(two)]
    a_attn = [pl.make_tile(pl.TileType([C, C], dt, Left), addr=0x4000 * j) for j in range(two)]
    a_kt = [pl.make_tile(pl.TileType([K, C], dt, Left), addr=0x4000 * j) for j in range(two)]
    b_u = [pl.make_tile(pl.TileType([C, VB], dt, Right), addr=0x0000 + 0x8000 * j) for j in range(two)]
    b_s = [pl.make_tile(pl.TileType([K, VB], dt, Right), addr=(0x4000 if two == 1 else 0x2000) + 0x8000 * j)
           for j in range(two)]
    b_d = [pl.make_tile(pl.TileType([C, VB], dt, Right), addr=(0xC000 if two == 1 else 0x6000) + 0x8000 * j)
           for j in range(two)]
    c_d = [pl.make_tile(pl.TileType([C, VB], f32, Acc), addr=0x00000 + 0x10000 * j) for j in range(2)]
    c_o = [pl.make_tile(pl.TileType([C, VB], f32, Acc), addr=0x04000 + 0x10000 * j) for j in range(2)]
    c_kd = [pl.make_tile(pl.TileType([K, VB], f32, Acc), addr=0x08000 + 0x10000 * j) for j in range(2)]

    # vector buffers (per vector core: VB / 2 of the block's columns)
    ss = [pl.make_tile(pl.TileType([K, VH], f32, Vec), addr=0x4000 * j) for j in range(IL)]   # IL <= 4
    kd = pl.make_tile(pl.TileType([K, VH], f32, Vec), addr=0x10000)
    sd = pl.make_tile(pl.TileType([K, VH], dt, Vec), addr=0x14000)
    g_row = pl.make_tile(pl.TileType([1, C], f32, Vec), addr=0x18000)
    gl = pl.make_tile(pl.TileType([1, 8], f32, Vec), addr=0x18100)
    egl = pl.make_tile(pl.TileType([K, 8], f32, Vec), addr=0x19000)
    EGL = egl.with_valid(K, 1)

    # IL state chains (column blocks) per cluster in lock step: the cube multiplies chain b while the
    # vectors update chain a's state. A last incomplete group repeats the last chain (same values twice).
    NBL = B * HV * NB

    def chain(task, j):
        bl = pl.min(task * IL + j, NBL - 1)
        return bl // (HV * NB), (bl // NB) % HV, (bl % NB) * VB

    with pl.section_cube():
        pl.load(l_eye, eye, [0, 0])
        pl.move(a_eye, l_eye)
        for task in pl.range(pl.get_block_idx(), pl.ceil_div(NBL, IL), pl.get_block_num()):
            for i in pl.range(0, NC):
                t0 = start + i * C
                c = pl.min(C, length - i * C)
                for j in range(IL):
                    b, hv, c0 = chain(task, j)
                    row = ((b * HV + hv) * NC + i) * C
                    pl.load(l_u[j], u_ws, [row, c0])
                    pl.load(l_w[j], w_ws, [row, 0])
                    pl.load(l_qg[j], qg_ws, [row, 0])
                    pl.load(l_attn[j], attn_ws, [row, 0])
                    pl.load(l_kt[j], kt_ws, [row, 0], trans=True)
                for j in range(IL):
                    b, hv, c0 = chain(task, j)
                    # D = U - W S (U as I U into the accumulator)
                    x, y = j % two, j % 2
                    pl.move(b_u[x], l_u[j])
                    pl.matmul(c_d[y], a_eye, b_u[x])
                    pl.move(a_w[x], l_w[j])
                    pl.load(l_s, ws_s.next(), [0, 0])
                    pl.move(b_s[x], l_s)
                    pl.matmul_acc(c_d[y], a_w[x], b_s[x])
                    # O = Qg S + attn D, K~^T D
                    pl.move(a_qg[x], l_qg[j])
                    pl.matmul(c_o[y], a_qg[x], b_s[x])
                    pl.move(l_d, c_d[y])
                    pl.move(b_d[x], l_d)
                    pl.move(a_attn[x], l_attn[j])
                    pl.matmul_acc(c_o[y], a_attn[x], b_d[x])
                    pl.move(a_kt[x], l_kt[j])
                    pl.matmul(c_kd[y], a_kt[x], b_d[x])
                    pl.store(o, c_o[y], [b, t0, hv * V + c0], valid_shape=[c, VB])
                    pl.store(ws_kd.next(), c_kd[y], [0, 0])
            for j in range(IL):
                pl.load(l_s, ws_s.next(), [0, 0])       # the state after the last chunk (handed over, unused)

    with pl.section_vector():
        sub = pl.get_subblock_idx()
        for task in pl.range(pl.get_block_idx(), pl.ceil_div(NBL, IL), pl.get_block_num()):
            for j in range(IL):
                b, hv, c0 = chain(task, j)
                pl.load(ss[j], state, [((n0 + b) * HV + hv) * K, c0 + sub * VH])
                store_state(ws_s.next(), ss[j], sd, sub * VH, cast_io)
            for i in pl.range(0, NC):
                t0 = start + i * C
                c = pl.min(C, length - i * C)
                for j in range(IL):
                    b, hv, c0 = chain(task, j)
                    # S <- e^{G_last} S + K~^T D
                    pl.full(g_row, 0.0)
                    pl.load(g_row, gT, [b, hv, t0], valid_shape=[1, c])
                    pl.sum(gl, g_row.with_valid(1, C), dim=1)
                    pl.col_expand(EGL, gl)
                    pl.exp(EGL, EGL)
                    pl.load(kd, ws_kd.next(), [0, sub * VH])
                    pl.row_expand_mul(ss[j], ss[j], EGL)
                    pl.add(ss[j], ss[j], kd)
                    store_state(ws_s.next(), ss[j], sd, sub * VH, cast_io)
            for j in range(IL):
                b, hv, c0 = chain(task, j)
                pl.store(state, ss[j], [((n0 + b) * HV + hv) * K, c0 + sub * VH])


def store_state(ws, s, stage, c0, cast_io):
    if cast_io:
        pl.cast(stage, s)
        pl.store(ws, stage, [0, c0])
    else:
        pl.store(ws, s, [0, c0])


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------

_kernels: dict = {}
STATE_IL = 3           # most state chains per cluster in lock step (L1 room for 3)
PREP_IL = 2            # chunks per cluster in lock step in the preparation (L1 / UB room for 2)


def kernels(backend: str | None = None, **options):
    """The two compiled pl kernels (prep, state) for a backend and pl.jit options."""
    key = (backend, tuple(sorted(options.items())))
    pair = _kernels.get(key)
    if pair is None:
        if backend is not None:
            options["backend"] = backend
        pair = _kernels[key] = (pl.jit(_prep_body, name="gdn_prefill_prep", **options),
                                pl.jit(_state_body, name="gdn_prefill_state", **options))
    return pair


def v_block_for(V: int) -> int:
    """The state's column block: 64 columns (32 per vector core), V itself when smaller."""
    return min(V, 64)


def block_dim_for(tasks: int, machine) -> int:
    return max(1, min(tasks, machine.cores["aic"]))


def launch(prep, rec, q3, k3, v3, gT, beta, state2, o3, start, length, n0, rows, *, H, HV, K, V, C, VB, scale,
           l2norm, cast_io, state_il, workspace, eye, machine=None):
    """One sequence (or ``rows`` batch rows from ``start`` for ``length`` tokens): the preparation, then the
    state phase, meeting in the GM hand-overs ``workspace(rows, cols)`` makes (torch tensors on the host,
    pypto tensors inside a traced function, where the two launches are two nodes of one program):
    U, -W, Qg, K~, attn, [rows * HV * chunks * C, .] in the operand dtype (eye's)."""
    machine = machine or prep.machine
    NC = -(-length // C)
    n = rows * HV * NC * C
    ws = (workspace(n, V), workspace(n, K), workspace(n, K), workspace(n, K), workspace(n, C))
    groups = -(-rows * HV * NC // PREP_IL) if isinstance(NC, int) else machine.cores["aic"]   # traced: T dynamic
    prep[None, block_dim_for(groups, machine)](
        q3, k3, v3, gT, beta, merge_masks(C), eye, *ws, start, length, H=H, HV=HV, K=K, V=V, C=C,
        NL=int(math.log2(C)), scale=float(scale), l2norm=bool(l2norm), cast_io=cast_io, IL=PREP_IL)
    chains = rows * HV * (V // VB)
    il = state_il or max(1, min(STATE_IL, -(-chains // machine.cores["aic"])))
    rec[None, block_dim_for(-(-chains // il), machine)](
        gT, eye, *ws, state2, o3, start, length, n0, HV=HV, K=K, V=V, C=C, VB=VB, cast_io=cast_io, IL=il)


def chunk_gated_delta_rule_phases(q, k, v, g, beta, *, scale: float, state: torch.Tensor, o: torch.Tensor,
                                  sequences, use_qk_l2norm: bool, chunk_size: int, operand_dtype=None,
                                  backend=None, jit_options=None, v_block=None,
                                  state_il=None):
    """The phased kernels, with the arguments of pro_kernels.chunk_gated_delta_rule_pro. Returns every
    launch's (prep, state) reports (sim; one pair per sequence of ``sequences``)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    C = chunk_size
    VB = v_block or v_block_for(V)
    why = supports(q, k, v, C)
    if why is None and (V % VB or VB % 16 or (state_il and state_il > STATE_IL)):
        why = f"V ({V}) is not a multiple of the column block v_block={VB} (a multiple of 16)"
    if why is not None:
        _fail(f"the phased GDN prefill does not support this call: {why}")
    inv = operand_dtype or (torch.float32 if q.dtype == torch.float32 else torch.float16)
    prep, rec = kernels(backend, **(jit_options or {}))
    q3, k3 = q.contiguous().reshape(B, T, H * K), k.contiguous().reshape(B, T, H * K)
    v3, o3 = v.contiguous().reshape(B, T, HV * V), o.view(B, T, HV * V)
    gT = g.float().permute(0, 2, 1).contiguous()
    bf = beta.float().contiguous()
    eye = torch.eye(C, dtype=inv)
    s2 = state.view(-1, V)
    runs = [(0, 0, T, B)] if sequences is None else [(row, st, ln, 1) for row, st, ln in sequences if ln > 0]
    reports = []
    for n0, st, ln, rows in runs:
        launch(prep, rec, q3, k3, v3, gT, bf, s2, o3, st, ln, n0, rows, H=H, HV=HV, K=K, V=V, C=C, VB=VB,
               scale=scale, l2norm=use_qk_l2norm, cast_io=q.dtype != torch.float32, state_il=state_il,
               workspace=lambda r, n: torch.empty(r, n, dtype=inv), eye=eye)
        reports.append((prep.last_report, rec.last_report))
    return reports

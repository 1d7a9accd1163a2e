"""The chunked gated delta rule as one Professional-mode (``pypto_pro.language``) kernel.

One cluster (a cube core and its two vector cores) runs one (sequence, value head) at a time and walks
its chunks of C tokens in order; the state S [K, V] stays on the vector cores in fp32 the whole time
(each vector core holds V/2 of its columns: the recurrence is column-separable). Per chunk:

  vector (each core C/2 of the chunk's rows; tails zero-padded, which leaves the state unchanged):
      G = in-chunk cumsum of g; decay[i, j] = exp(G_i - G_j) for j <= i (masked to -1e30 BEFORE exp);
      q, k l2-normalised (optional), q scaled; the operands the cube needs, in the matmul dtype:
      kn, qn, Qg = e^G qn, K~ = e^{G_last - G} kn, Rv = beta v, Rk = -beta e^G kn  -> GM workspace
  cube:   KK^T and QK^T of the normalised keys/queries (fp32 accumulation) -> workspace
  vector: A = beta KK^T * decay (strictly lower), attn = QK^T * decay; the pieces of the blocked
          inverse: X1 = I - A*M_1 and E_b = -A*M_b for b = 2, 4, ..., C/2 (M_b: the lower-left b x b
          blocks of each 2b x 2b diagonal block) -> workspace
  cube:   (I + A)^-1 by recursive block merging, X <- X I + (X E_b) X (see kernels.unit_lower_inverse
          for why not a power series), the merge products carried L0C -> L1 (FIX) between levels;
          U = T Rv and -W = T Rk into L0C, D = U - W S accumulated onto U;
          O = Qg S + attn D (L0C, stored straight to o), K~^T D -> workspace
  vector: S <- e^{G_last} S + K~^T D (fp32), cast, -> workspace for the next chunk's W S and Qg S.

Matmul operands: fp32 for fp32 inputs (every product in fp32: the 1e-5 tolerance); for 16-bit inputs
fp16 by default (``operand_dtype``; 3 more mantissa bits than bf16: about 1.3e-3 relative RMS error at
the bf16 test sizes against 4.4e-3 with bf16 operands; fp16's range, 65504, bounds the normalised
keys / queries trivially and v, D and S in practice), always with fp32 accumulation and an fp32 state.

Cube <-> vector exchanges go through GM workspace slots (a2a3 has no L0C->UB / UB->L1 path); the pl
compiler inserts the pipe and cross-core synchronisation. Chunks are software pipelined by hand (see
the sections): the next chunk's operands, Gram matrices and inverse overlap this chunk's state phase
and update. Each chunk is still a chain of cube <-> vector hand-overs through GM (a few hundred cycles of
latency each in the simulator) with short vector work between them, so the kernel is latency bound:
about 11k cycles per chunk and cluster against about 1.4k of cube work at the roofline (see
benchmarks/bench_gdn.py for the figures).

Supported by this path (``supports``): K == V, a multiple of 16 up to 128, chunk size a power of two in
8..64, q/k/v of one dtype (fp32, bf16 or fp16). ``functional.chunk_gated_delta_rule`` falls back to
the Tensor-level kernels otherwise.
"""

import math

import torch

import pypto_pro.language as pl

L2NORM_EPS = 1e-6
NEG = -1.0e30            # the masked-out exponent: exp(NEG) = 0
MAX_DIM = 128
MAX_CHUNK = 64


def _gdn_body(q: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
              k: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
              v: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
              gT: pl.Tensor[[pl.DYNAMIC, pl.STATIC, pl.DYNAMIC], pl.DT_FP32],
              beta: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], pl.DT_FP32],
              masks: pl.Tensor[[pl.STATIC, pl.STATIC], pl.DT_UINT8],
              eye: pl.Tensor[[pl.STATIC, pl.STATIC], None],
              state: pl.Tensor[[pl.DYNAMIC, pl.STATIC], pl.DT_FP32],
              o: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC, pl.STATIC], None],
              start: pl.Scalar[pl.DT_INT32], length: pl.Scalar[pl.DT_INT32], n0: pl.Scalar[pl.DT_INT32],
              H, HV, K, V, C, NL, scale, l2norm, cast_io):
    io = q.dtype                 # the inputs' dtype
    dt = eye.dtype               # matmul operand dtype (fp32, or fp16 / bf16 for 16-bit inputs)
    inv = dt
    f32, u8 = pl.DT_FP32, pl.DT_UINT8
    R = HV // H
    HALF = C // 2
    VH = V // 2
    B = q.shape[0]
    Vec, Mat, Left, Right, Acc, GM = (pl.MemorySpace.Vec, pl.MemorySpace.Mat, pl.MemorySpace.Left,
                                      pl.MemorySpace.Right, pl.MemorySpace.Acc, pl.MemorySpace.GM)

    # ---- cube <-> vector workspace (per cluster)
    ws_prep = pl.make_tile_group(pl.TileType([6 * C, K], dt, GM), depth=1)     # kn qn Qg K~ Rv Rk
    ws_gram = pl.make_tile_group(pl.TileType([2 * C, C], f32, GM), depth=1)    # KK^T, QK^T
    ws_e = pl.make_tile_group(pl.TileType([NL * C, C], inv, GM), depth=1)      # X1, E_2 .. E_C/2
    ws_attn = pl.make_tile_group(pl.TileType([C, C], dt, GM), depth=1)
    ws_s = pl.make_tile_group(pl.TileType([K, V], dt, GM), depth=1)            # S in the operand dtype
    ws_kd = pl.make_tile_group(pl.TileType([K, V], f32, GM), depth=1)          # K~^T D

    # ---- cube buffers (addresses planned for C = 64, K = V = 128, 4-byte operands)
    # L1: the Gram / merge phase's tiles, then (dead by then) the state phase's over them; the next
    # chunk's operands are loaded during its Gram phase into double-buffered groups
    l_eye = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x00000)
    l_t = pl.make_tile(pl.TileType([C, C], dt, Mat), addr=0x04000)
    l_x = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x08000)
    l_p = pl.make_tile(pl.TileType([C, C], inv, Mat), addr=0x10000)
    l_kn = pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x14000)
    l_qn = pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x14000)
    l_knT = pl.make_tile(pl.TileType([K, C], dt, Mat), addr=0x1C000)
    l_s = pl.make_tile(pl.TileType([K, V], dt, Mat), addr=0x08000)
    l_w = pl.make_tile(pl.TileType([C, K], dt, Mat), addr=0x18000)
    l_d = pl.make_tile(pl.TileType([C, V], dt, Mat), addr=0x20000)
    l_attn = pl.make_tile(pl.TileType([C, C], dt, Mat), addr=0x28000)
    l_es = pl.make_tile_group(pl.TileType([C, C], inv, Mat), addrs=0x6C000, depth=NL - 1)   # E_2 .. E_C/2
    qg_g = pl.make_tile_group(pl.TileType([C, K], dt, Mat), addrs=0x2C000, depth=2)
    kt_g = pl.make_tile_group(pl.TileType([K, C], dt, Mat), addrs=0x3C000, depth=2)
    rv_g = pl.make_tile_group(pl.TileType([C, V], dt, Mat), addrs=0x4C000, depth=2)
    rk_g = pl.make_tile_group(pl.TileType([C, K], dt, Mat), addrs=0x5C000, depth=2)
    a_eye = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0xC000)          # resident
    a_kn = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_qn = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_x = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0x0000)
    a_p = pl.make_tile(pl.TileType([C, C], inv, Left), addr=0x4000)
    a_t = pl.make_tile(pl.TileType([C, C], dt, Left), addr=0x8000)
    a_w = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_qg = pl.make_tile(pl.TileType([C, K], dt, Left), addr=0x0000)
    a_attn = pl.make_tile(pl.TileType([C, C], dt, Left), addr=0x0000)
    a_kt = pl.make_tile(pl.TileType([K, C], dt, Left), addr=0x4000)
    b_knT = pl.make_tile(pl.TileType([K, C], dt, Right), addr=0x0000)
    b_e = pl.make_tile(pl.TileType([C, C], inv, Right), addr=0x0000)
    b_x = pl.make_tile(pl.TileType([C, C], inv, Right), addr=0x4000)
    b_rv = pl.make_tile(pl.TileType([C, V], dt, Right), addr=0x0000)
    b_rk = pl.make_tile(pl.TileType([C, K], dt, Right), addr=0x8000)
    b_s = pl.make_tile(pl.TileType([K, V], dt, Right), addr=0x0000)
    b_d = pl.make_tile(pl.TileType([C, V], dt, Right), addr=0x0000)
    c_g1 = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x10000)
    c_g2 = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x14000)
    c_p = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x10000)
    c_x = pl.make_tile(pl.TileType([C, C], f32, Acc), addr=0x14000)
    c_d = pl.make_tile(pl.TileType([C, V], f32, Acc), addr=0x00000)
    c_w = pl.make_tile(pl.TileType([C, K], f32, Acc), addr=0x08000)
    c_o = pl.make_tile(pl.TileType([C, V], f32, Acc), addr=0x08000)
    c_kd = pl.make_tile(pl.TileType([K, V], f32, Acc), addr=0x10000)

    # ---- vector buffers (per vector core; addresses planned for the largest sizes)
    fq = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x00000)
    fk = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x04000)
    ft = pl.make_tile(pl.TileType([HALF, K], f32, Vec), addr=0x08000)
    # staging of 16-bit stores, two slots so that a cast need not wait for the previous store to drain
    # (16-bit inputs only; the k / v fetch tiles use bytes of tiles dead while they live)
    xd_g = pl.make_tile_group(pl.TileType([HALF, K], dt, Vec), addrs=[0x0C000, 0x0E000], depth=2)
    xin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x18000)      # load staging (16-bit)
    kin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x1E000)      # over na
    vin = pl.make_tile(pl.TileType([HALF, K], io, Vec), addr=0x22000)      # over gq
    kd = pl.make_tile(pl.TileType([K, VH], f32, Vec), addr=0x00000)       # over fq, fk (dead by then)
    sd = pl.make_tile(pl.TileType([K, VH], dt, Vec), addr=0x08000)        # over ft, xd
    s = pl.make_tile(pl.TileType([K, VH], f32, Vec), addr=0x10000)        # the state's columns, fp32
    cc = pl.TileType([HALF, C], f32, Vec)
    gx = pl.make_tile(cc, addr=0x1C000)                                    # shares aa's bytes (gates only)
    dec = pl.make_tile(cc, addr=0x1A000)
    aa = pl.make_tile(cc, addr=0x1C000)
    na = pl.make_tile(cc, addr=0x1E000)
    t1 = pl.make_tile(cc, addr=0x20000)
    gq = pl.make_tile(cc, addr=0x22000)
    zero = pl.make_tile(cc, addr=0x24000)
    cinv = pl.make_tile_group(pl.TileType([HALF, C], inv, Vec), addrs=[0x26000, 0x27000], depth=2)
    cinv2 = pl.make_tile_group(pl.TileType([HALF, C], inv, Vec), addrs=0x22000, depth=1)     # over gq (dead by then)
    mk = pl.TileType([HALF, C], u8, Vec)
    m_causal = pl.make_tile(mk, addr=0x28000)
    m_strict = pl.make_tile(mk, addr=0x28800)
    m_eye = pl.make_tile(mk, addr=0x29000)
    m_merge = pl.make_tile_group(mk, addrs=0x29800, depth=NL)               # M_1 .. M_C/2
    col = pl.TileType([HALF, 8], f32, Vec)
    rq = pl.make_tile(col, addr=0x2D000)
    bc = pl.make_tile(col, addr=0x2D400)
    gc = pl.make_tile(col, addr=0x2D800)
    eg = pl.make_tile(col, addr=0x2DC00)
    eglg = pl.make_tile(col, addr=0x2E000)
    nbeg = pl.make_tile(col, addr=0x2E400)
    rowt = pl.TileType([1, C], f32, Vec)
    g_row = pl.make_tile(rowt, addr=0x2C800)
    G_row = pl.make_tile(rowt, addr=0x2C900)
    gl = pl.make_tile(pl.TileType([1, 8], f32, Vec), addr=0x2CA00)
    glc = pl.make_tile(col, addr=0x2CC00)
    egl = pl.make_tile(pl.TileType([K, 8], f32, Vec), addr=0x2E800)
    gl3 = pl.make_tile(pl.TileType([1, 8], f32, Vec), addr=0x2CB40)
    g_row3 = pl.make_tile(rowt, addr=0x2FC00)           # the state update's own copy of the gates

    FQ, FK, FT = fq.with_valid(HALF, K), fk.with_valid(HALF, K), ft.with_valid(HALF, K)
    XIN, KIN, VIN = xin.with_valid(HALF, K), kin.with_valid(HALF, K), vin.with_valid(HALF, K)
    CC = (HALF, C)
    COL = (HALF, 1)

    NC = pl.ceil_div(length, C)

    def gram(pa):
        """KK^T and QK^T of the normalised keys / queries of the chunk in workspace slot pa (-> vectors);
        the chunk's other operands into L1 for its state phase."""
        gram_products(pa, ws_gram.next(), C, l_kn, l_knT, l_qn, a_kn, b_knT, a_qn, c_g1, c_g2)
        pl.load(qg_g.next(), pa, [2 * C, 0])
        pl.load(kt_g.next(), pa, [3 * C, 0], trans=True)
        pl.load(rv_g.next(), pa, [4 * C, 0])
        pl.load(rk_g.next(), pa, [5 * C, 0])

    def gates(b, hv, t0, c):
        """g of the chunk as a zero-padded row (loaded by the caller), its in-chunk cumsum, G_last, G_i of
        the own rows, decay."""
        chunk_gates(g_row.with_valid(1, C), G_row, gl, gx, gc, t1, dec, m_eye, m_causal, zero)

    def prepare(b, hv, kh, t0, c, cv, r0):
        """Stage the chunk's operands for the cube (own rows): kn, qn, Qg, K~, Rv, Rk. 16-bit inputs are
        all fetched first (their load latencies overlap), fp32 ones straight into the working tiles."""
        # zero padding first, then every load: one vector -> MTE2 hand-over instead of one per load
        pl.full(bc, 0.0)
        pl.full(g_row, 0.0)
        if cast_io:
            pl.full(XIN, 0.0)
            pl.full(KIN, 0.0)
            pl.full(VIN, 0.0)
        pl.load(g_row, gT, [b, hv, t0], valid_shape=[1, c])
        if c > r0:
            pl.load(bc, beta, [b, t0 + r0, hv], valid_shape=[cv, 1])
            if cast_io:
                pl.load(XIN, q, [b, t0 + r0, kh * K], valid_shape=[cv, K])
                pl.load(KIN, k, [b, t0 + r0, kh * K], valid_shape=[cv, K])
                pl.load(VIN, v, [b, t0 + r0, hv * V], valid_shape=[cv, V])
        gates(b, hv, t0, c)
        pl.exp(eg, gc)
        pl.col_expand(glc.with_valid(HALF, 1), gl)
        pl.sub(eglg, glc.with_valid(HALF, 1), gc)
        pl.exp(eglg, eglg)
        pl.mul(nbeg, bc.with_valid(HALF, 1), eg)
        pl.mul(nbeg, nbeg, -1.0)
        p = ws_prep.next()
        # queries: qn = scale * q / |q|, Qg = e^G qn
        if cast_io:
            pl.cast(FQ, XIN)
        else:
            fetch_rows(FQ, q, b, t0 + r0, kh * K, c > r0, cv, K)
        if l2norm:
            normalize(FQ, FT, rq)
        pl.mul(FQ, FQ, scale)
        store_rows(p, C + r0, FQ, xd_g, cast_io)
        pl.row_expand_mul(FQ, FQ, eg)
        store_rows(p, 2 * C + r0, FQ, xd_g, cast_io)
        # keys: kn, K~ = e^{G_last - G} kn, Rk = -beta e^G kn
        if cast_io:
            pl.cast(FK, KIN)
        else:
            fetch_rows(FK, k, b, t0 + r0, kh * K, c > r0, cv, K)
        if l2norm:
            normalize(FK, FT, rq)
        store_rows(p, r0, FK, xd_g, cast_io)
        pl.row_expand_mul(FT, FK, eglg)
        store_rows(p, 3 * C + r0, FT, xd_g, cast_io)
        pl.row_expand_mul(FT, FK, nbeg)
        store_rows(p, 5 * C + r0, FT, xd_g, cast_io)
        # values: Rv = beta v
        if cast_io:
            pl.cast(FQ, VIN)
        else:
            fetch_rows(FQ, v, b, t0 + r0, hv * V, c > r0, cv, V)
        pl.row_expand_mul(FQ, FQ, bc.with_valid(HALF, 1))
        store_rows(p, 4 * C + r0, FQ, xd_g, cast_io)

    # Chunks are software pipelined by hand: the vectors stage chunk i+1's operands (and the cube
    # computes its Gram matrices) while chunk i's inverse and state update run. Before the loop chunk 0
    # is staged; iteration i stages chunk min(i+1, NC-1) (the last iteration repeats the last chunk so
    # that every workspace slot written is read: the cube's and the vectors' slot sequences stay equal).
    def merges(e_slot):
        """T = (I + A)^-1 by block merging, X <- X I + (X E_b) X, from the pieces in workspace slot e_slot
        (all loaded up front) -> l_t; the chunk's attn -> L1 for its state phase."""
        pl.load(l_x, e_slot, [0, 0])
        for lvl in range(1, NL):
            pl.load(l_es[lvl - 1], e_slot, [lvl * C, 0])
        pl.load(l_attn, ws_attn.next(), [0, 0])
        merge_levels(NL, l_x, l_es, l_p, l_t, a_x, b_e, a_p, b_x, a_eye, c_p, c_x)

    def pieces(r0):
        """A = beta KK^T * decay (strictly lower), attn = QK^T * decay, X1 = I - A*M_1, E_b = -A*M_b
        (own rows) -> workspace, from the Gram matrices and the gates prepare() left."""
        gw = ws_gram.next()
        pl.load(aa, gw, [r0, 0])
        pl.load(gq, gw, [C + r0, 0])
        pl.mul(gq, gq, dec)
        store_cc(ws_attn.next(), 0, r0, gq, cinv, cast_io)
        pl.mul(aa, aa, dec)
        pl.row_expand_mul(aa, aa, bc.with_valid(HALF, 1))
        pl.where(aa, m_strict, aa, zero)
        pl.mul(na, aa, -1.0)
        e = ws_e.next()
        pl.where(t1, m_merge[0], na, zero)
        pl.full(aa, 1.0)
        pl.where(t1, m_eye, aa, t1)
        store_cc(e, 0, r0, t1, cinv2, cast_io)
        for lvl in range(1, NL):
            pl.where(t1, m_merge[lvl], na, zero)
            if lvl % 2 == 1:
                store_cc(e, lvl * C, r0, t1, cinv, cast_io)
            else:
                store_cc(e, lvl * C, r0, t1, cinv2, cast_io)

    # Chunks are software pipelined by hand. Iteration i of the cube: the Gram matrices of chunk i+1,
    # chunk i's state phase, chunk i+1's inverse; of the vectors: chunk i+1's operands and inverse
    # pieces, chunk i's state update. Chunk 0's first half runs before the loop; the last iteration
    # repeats the last chunk's (j = min(i+1, NC-1)) so that both sections take every workspace slot
    # the same number of times.
    with pl.section_cube():
        pl.load(l_eye, eye, [0, 0])
        pl.move(a_eye, l_eye)
        for task in pl.range(pl.get_block_idx(), B * HV, pl.get_block_num()):
            b = task // HV
            hv = task % HV
            gram(ws_prep.next())
            merges(ws_e.next())
            for i in pl.range(0, NC):
                t0 = start + i * C
                c = pl.min(C, length - i * C)
                gram(ws_prep.next())
                pl.move(a_t, l_t)
                # U = T Rv (into the D accumulator) and -W = T Rk
                pl.move(b_rv, rv_g.previous())
                pl.matmul(c_d, a_t, b_rv)
                pl.move(b_rk, rk_g.previous())
                pl.matmul(c_w, a_t, b_rk)
                pl.move(l_w, c_w)
                pl.move(a_w, l_w)
                # the state: D = U - W S, O = Qg S + attn D, K~^T D
                pl.load(l_s, ws_s.next(), [0, 0])
                pl.move(b_s, l_s)
                pl.matmul_acc(c_d, a_w, b_s)
                pl.move(a_qg, qg_g.previous())
                pl.matmul(c_o, a_qg, b_s)
                pl.move(l_d, c_d)
                pl.move(b_d, l_d)
                pl.move(a_attn, l_attn)
                pl.matmul_acc(c_o, a_attn, b_d)
                pl.move(a_kt, kt_g.previous())
                pl.matmul(c_kd, a_kt, b_d)
                pl.store(o, c_o, [b, t0, hv * V], valid_shape=[c, V])
                pl.store(ws_kd.next(), c_kd, [0, 0])
                merges(ws_e.next())
            pl.load(l_s, ws_s.next(), [0, 0])       # the state after the last chunk (handed over, unused)
            # (each task advances the double-buffered groups by an even count: no unrolling of the task loop)
            qg_g.next()
            kt_g.next()
            rv_g.next()
            rk_g.next()

    with pl.section_vector():
        sub = pl.get_subblock_idx()
        r0 = sub * HALF
        c0 = sub * VH
        pl.load(m_causal, masks, [r0, 0])
        pl.load(m_strict, masks, [C + r0, 0])
        pl.load(m_eye, masks, [2 * C + r0, 0])
        for lvl in range(NL):
            pl.load(m_merge[lvl], masks, [(3 + lvl) * C + r0, 0])
        pl.full(zero, 0.0)
        for task in pl.range(pl.get_block_idx(), B * HV, pl.get_block_num()):
            b = task // HV
            hv = task % HV
            kh = hv // R
            srow = ((n0 + b) * HV + hv) * K
            pl.load(s, state, [srow, c0])
            c_first = pl.min(C, length)
            prepare(b, hv, kh, start, c_first, pl.max(1, pl.min(HALF, c_first - r0)), r0)
            pieces(r0)
            store_state(ws_s.next(), s, sd, c0, cast_io)
            for i in pl.range(0, NC):
                t0 = start + i * C
                c = pl.min(C, length - i * C)
                # the next chunk's operands and inverse pieces (the last iteration repeats the last chunk)
                j = pl.min(i + 1, NC - 1)
                cj = pl.min(C, length - j * C)
                prepare(b, hv, kh, start + j * C, cj, pl.max(1, pl.min(HALF, cj - r0)), r0)
                pieces(r0)
                # S <- e^{G_last} S + K~^T D  (G_last again from g: the staging above replaced it)
                pl.full(g_row3, 0.0)
                pl.load(g_row3, gT, [b, hv, t0], valid_shape=[1, c])
                pl.sum(gl3, g_row3.with_valid(1, C), dim=1)
                pl.load(kd, ws_kd.next(), [0, c0])
                pl.col_expand(egl.with_valid(K, 1), gl3)
                pl.exp(egl.with_valid(K, 1), egl.with_valid(K, 1))
                pl.row_expand_mul(s, s, egl.with_valid(K, 1))
                pl.add(s, s, kd)
                store_state(ws_s.next(), s, sd, c0, cast_io)
            pl.store(state, s, [srow, c0])


def gram_products(src, dst, C, l_kn, l_knT, l_qn, a_kn, b_knT, a_qn, c_g1, c_g2):
    """K K^T and Q K^T of a chunk's normalised keys (rows 0..C of workspace slot ``src``) and queries (rows
    C..2C) on the cube -> rows 0..C and C..2C of workspace slot ``dst``."""
    pl.load(l_kn, src, [0, 0])
    pl.load(l_knT, src, [0, 0], trans=True)
    pl.move(a_kn, l_kn)
    pl.move(b_knT, l_knT)
    pl.matmul(c_g1, a_kn, b_knT)
    pl.load(l_qn, src, [C, 0])
    pl.move(a_qn, l_qn)
    pl.matmul(c_g2, a_qn, b_knT)
    pl.store(dst, c_g1, [0, 0])
    pl.store(dst, c_g2, [C, 0])


def chunk_gates(GR, G_row, gl, gx, gc, t1, dec, m_eye, m_causal, zero):
    """From the chunk's gates as a row GR: their in-chunk cumsum G_row, G_last gl, G_i of the own rows gc
    (t1, gx scratch) and the causal decay exp(G_i - G_j) in dec (0 above the diagonal)."""
    pl.cumsum(G_row, GR, dim=1)
    pl.sum(gl, GR, dim=1)
    pl.col_expand(gx, G_row)
    pl.where(t1, m_eye, gx, zero)
    pl.sum(gc, t1, dim=1)
    pl.row_expand_sub(t1, gx, gc)
    pl.mul(t1, t1, -1.0)
    pl.full(dec, NEG)
    pl.where(dec, m_causal, t1, dec)
    pl.exp(dec, dec)


def merge_levels(NL, l_x, l_es, l_p, l_t, a_x, b_e, a_p, b_x, a_eye, c_p, c_x):
    """(I + A)^-1 by block merging on the cube, X <- X I + (X E_b) X for b = 1 .. NL-1, from X1 in l_x and
    the E_b in l_es (L1) -> l_t; a_* / b_* are L0A / L0B tiles, c_* L0C."""
    for lvl in range(1, NL):
        pl.move(a_x, l_x)
        pl.move(b_e, l_es[lvl - 1])
        pl.matmul(c_p, a_x, b_e)
        pl.move(l_p, c_p)
        pl.move(a_p, l_p)
        pl.move(b_x, l_x)
        pl.matmul(c_x, a_eye, b_x)
        pl.matmul_acc(c_x, a_p, b_x)
        if lvl < NL - 1:
            pl.move(l_x, c_x)
        else:
            pl.move(l_t, c_x)


def fetch_rows(dst, src, b, t, col, present, rows, width):
    """dst (full view) = rows [t, t + rows) of src's columns [col, col + width), zero past them."""
    pl.full(dst, 0.0)
    if present:
        pl.load(dst, src, [b, t, col], valid_shape=[rows, width])


def normalize(x, tmp, r):
    """x <- x / sqrt(sum(x^2) + eps) per row."""
    pl.mul(tmp, x, x)
    pl.sum(r, tmp, dim=1)
    pl.add(r, r, L2NORM_EPS)
    pl.rsqrt(r, r)
    pl.row_expand_mul(x, x, r)


def store_state(ws, s, stage, c0, cast_io):
    """The state's own columns, in the operand dtype, into workspace slot ws."""
    if cast_io:
        pl.cast(stage, s)
        pl.store(ws, stage, [0, c0])
    else:
        pl.store(ws, s, [0, c0])


def store_rows(ws, row, x, stages, cast_io):
    if cast_io:
        st = stages.next()
        pl.cast(st, x)
        pl.store(ws, st, [row, 0])
    else:
        pl.store(ws, x, [row, 0])


def store_cc(ws, block, r0, x, stage, cast):
    if cast:
        st = stage.next()
        pl.cast(st, x)
        pl.store(ws, st, [block + r0, 0])
    else:
        pl.store(ws, x, [block + r0, 0])


# ----------------------------------------------------------------------------------------------
# Host side: constants, launch, entry point
# ----------------------------------------------------------------------------------------------

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def supports(q, k, v, chunk_size: int) -> str | None:
    """None when this path handles the call, else why not (the caller falls back to the Tensor level)."""
    K, V = q.shape[-1], v.shape[-1]
    if K != V:
        return f"K ({K}) != V ({V})"
    if K > MAX_DIM or K % 16:
        return f"K = V = {K} is not a multiple of 16 up to {MAX_DIM}"
    if not (isinstance(chunk_size, int) and 8 <= chunk_size <= MAX_CHUNK and chunk_size & (chunk_size - 1) == 0):
        return f"chunk size {chunk_size} is not a power of two in 8..{MAX_CHUNK}"
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype}: one of fp32 / bf16 / fp16 expected"
    return None


def merge_masks(C: int) -> torch.Tensor:
    """uint8 [(3 + log2 C) * C, C]: causal (j <= i), strict (j < i), eye, then M_b for b = 1, 2, ..., C/2
    (the lower-left b x b block of each 2b x 2b diagonal block)."""
    i = torch.arange(C)
    r, c = i[:, None], i[None, :]
    out = [c <= r, c < r, c == r]
    b = 1
    while b < C:
        out.append((r // (2 * b) == c // (2 * b)) & (r // b == c // b + 1))
        b *= 2
    return torch.cat(out).to(torch.uint8).contiguous()


_kernels: dict = {}


def kernel(backend: str | None = None, **options):
    """The compiled pl kernel for a backend (None: pypto's default) and pl.jit options
    (timing_only, machine, trace, dump)."""
    key = (backend, tuple(sorted(options.items())))
    kern = _kernels.get(key)
    if kern is None:
        if backend is not None:
            options["backend"] = backend
        kern = _kernels[key] = pl.jit(_gdn_body, name="gdn_chunk_pro", **options)
    return kern


def block_dim_for(tasks: int, machine) -> int:
    return max(1, min(tasks, machine.cores["aic"]))


def chunk_gated_delta_rule_pro(q, k, v, g, beta, *, scale: float, state: torch.Tensor, o: torch.Tensor,
                               sequences, use_qk_l2norm: bool, chunk_size: int, operand_dtype=None, backend=None,
                               jit_options=None):
    """Run the pl kernel. q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; state [N, HV, K, V]
    fp32 (initial states, overwritten with the final ones); o [B, T, HV, V] written.
    ``sequences``: None (every batch row, whole length) or [(state row, start, length)] for B = 1.
    Returns the last launch's report (sim)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    C = chunk_size
    NL = int(math.log2(C))
    inv = operand_dtype or (torch.float32 if q.dtype == torch.float32 else torch.float16)
    kern = kernel(backend, **(jit_options or {}))
    q3, k3 = q.contiguous().reshape(B, T, H * K), k.contiguous().reshape(B, T, H * K)
    v3, o3 = v.contiguous().reshape(B, T, HV * V), o.view(B, T, HV * V)
    gT = g.float().permute(0, 2, 1).contiguous()                     # [B, HV, T]: a gate row per head
    bf = beta.float().contiguous()
    masks = merge_masks(C)
    eye = torch.eye(C, dtype=inv)
    s2 = state.view(-1, V)
    consts = dict(H=H, HV=HV, K=K, V=V, C=C, NL=NL, scale=float(scale), l2norm=bool(use_qk_l2norm),
                  cast_io=q.dtype != torch.float32)
    runs = [(0, 0, T, B)] if sequences is None else [(row, st, ln, 1) for row, st, ln in sequences if ln > 0]
    report = None
    for n0, st, ln, rows in runs:
        bd = block_dim_for(rows * HV, kern.machine)
        report = kern[None, bd](q3, k3, v3, gT, bf, masks, eye, s2, o3, st, ln, n0, **consts)
    return report

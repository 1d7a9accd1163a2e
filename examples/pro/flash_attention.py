"""Professional-mode fused flash attention (forward, non-causal) on a cube + vector cluster.

Per (head, block of 128 query rows) the cube computes S = Q K^T for each block of keys and P V; the
two vector cores of the cluster (64 query rows each) run the online softmax of S and fold P V into
their output rows with the running max / sum. On a2a3 cube and vector exchange S, P and P V through
GM workspace FIFOs (cross-core flags inserted by the compiler). The cube works in 128-key subtiles
(L0A/L0B/L0C ping-pong); a vector step covers ``BLOCK_K`` keys (128 or 256: with 256 the cube adds
the two subtiles' P V in L0C, halving the P V handoff and the per-step vector costs).
With ``pipeline=pl.PipelineConfig(preload=PRELOAD)`` the stages are software pipelined: the cube
computes Q K^T of block j+PRELOAD while the vectors run the softmax of block j+1 and the cube P V of
block j, so neither side waits for the other's GM round trip.

    python examples/pro/flash_attention.py
"""
import math

import torch

import pypto_pro.language as pl

MQ = 128                   # query rows per cluster
CK = 128                   # keys per cube subtile (one L0B operand)
HALF = MQ // 2             # query rows per vector core
PRELOAD = 2                # blocks the cube runs ahead (even: the L0C ping-pong then alternates cleanly)
FIFO = 4                   # slots of each cube <-> vector workspace FIFO (> PRELOAD: the vectors lag)
NEG = -1.0e30
NEG16 = -6.0e4             # below any fp16 score, inside the fp16 range


# HANDOFF: the dtype of S and of P V in the GM workspace. fp16 halves the cube <-> vector traffic
# (the vectors widen to fp32 before the softmax / the accumulation); fp32 keeps every bit.
# MATH: the softmax arithmetic on the vectors; fp16 (with an fp16 handoff) works on the scores as
# they arrive and stores P from the same tile, about half the vector work; the running sums, the
# rescale factors and the output accumulator stay fp32.
# BLOCK_K: keys per vector step (256 needs MATH=fp16: the fp32 working tiles would not fit in UB).
KEY = pl.TilingKey(HANDOFF=("fp32", "fp16"), MATH=("fp32", "fp16"), BLOCK_K=(128, 256))


def attention_body(q, k, v, o):
    bh, seq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    f16, f32 = pl.DT_FP16, pl.DT_FP32
    narrow = pl.get_tiling_key().HANDOFF == "fp16"
    math16 = pl.get_tiling_key().MATH == "fp16"
    bk = pl.get_tiling_key().BLOCK_K
    assert narrow or not math16, "MATH=fp16 needs HANDOFF=fp16"
    assert bk == CK or math16, "BLOCK_K=256 needs MATH=fp16"
    assert d == CK, "head dim 128 (Q and P share the L0A ping-pong, K^T and V the L0B one)"
    hd = f16 if narrow else f32
    mat, left, right, acc, vec, gm = (pl.MemorySpace.Mat, pl.MemorySpace.Left, pl.MemorySpace.Right,
                                       pl.MemorySpace.Acc, pl.MemorySpace.Vec, pl.MemorySpace.GM)
    # cube <-> vector handoff FIFOs in GM workspace (per cluster)
    s_ws = pl.make_tile_group(pl.TileType([MQ, bk], hd, gm), depth=FIFO)
    p_ws = pl.make_tile_group(pl.TileType([MQ, bk], f16, gm), depth=FIFO)
    pv_ws = pl.make_tile_group(pl.TileType([MQ, d], hd, gm), depth=FIFO)
    # cube buffers: L1 (Mat); L0A (Left: Q or a P subtile), L0B (Right: a K^T or V subtile) and L0C
    # (Acc: an S subtile or the P V sum) each a ping-pong pair
    q_l1 = pl.make_tile(pl.TileType([MQ, d], f16, mat), addr=0x00000)
    kt_l1 = pl.make_tile_group(pl.TileType([d, CK], f16, mat), addrs=0x08000, depth=4)
    v_l1 = pl.make_tile_group(pl.TileType([CK, d], f16, mat), addrs=0x28000, depth=4)
    p_l1 = pl.make_tile_group(pl.TileType([MQ, CK], f16, mat), addrs=0x48000, depth=2)
    a_l0 = pl.make_tile_group(pl.TileType([MQ, CK], f16, left), addrs=0x0000, depth=2)
    b_l0 = pl.make_tile_group(pl.TileType([CK, CK], f16, right), addrs=0x0000, depth=2)
    c_l0 = pl.make_tile_group(pl.TileType([MQ, CK], f32, acc), addrs=0x00000, depth=2)
    # vector buffers (UB), per vector core: HALF query rows
    stat = pl.TileType([HALF, 8], f32, vec)
    if math16:      # fp16 scores double buffered and worked on in place; fp16 statistics
        s_in = pl.make_tile_group(pl.TileType([HALF, bk], f16, vec), addrs=0x00000, depth=2)
        stat16 = pl.TileType([HALF, 16], f16, vec)
        m16 = pl.make_tile_group(stat16, addrs=0x10000, depth=2)
        lj16 = pl.make_tile(stat16, addr=0x11000)
        a16 = pl.make_tile(stat16, addr=0x11800)
        alpha_ub = pl.make_tile_group(stat, addrs=0x12000, depth=FIFO)   # exp(m_old - m_new), read PRELOAD later
        l_ub = pl.make_tile(stat, addr=0x14000)                          # running sum
        lj_ub = pl.make_tile(stat, addr=0x14800)                         # this block's row sums
        pv_in = pl.make_tile_group(pl.TileType([HALF, d], f16, vec), addrs=0x15000, depth=2)
        out_ub = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x15000)   # pv_in's bytes, after the loop
        pv_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x1D000)
        acc_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x25000)
    else:
        if narrow:  # fp16 S double buffered for the loads, one fp32 working copy
            s_in = pl.make_tile_group(pl.TileType([HALF, CK], f16, vec), addrs=0x00000, depth=2)
            s_ub = pl.make_tile_group(pl.TileType([HALF, CK], f32, vec), addrs=0x08000, depth=1)
            pv_in = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x28000)   # shares out_ub's bytes
        else:
            s_in = s_ub = pl.make_tile_group(pl.TileType([HALF, CK], f32, vec), addrs=0x00000, depth=2)
        p_ub = pl.make_tile_group(pl.TileType([HALF, CK], f16, vec), addrs=0x10000, depth=2)
        pv_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x18000)
        acc_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x20000)
        out_ub = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x28000)
        m_ub = pl.make_tile_group(stat, addrs=0x2C000, depth=2)          # running max: old / new
        alpha_ub = pl.make_tile_group(stat, addrs=0x2D000, depth=FIFO)
        l_ub = pl.make_tile(stat, addr=0x2F000)
        lj_ub = pl.make_tile(stat, addr=0x2F800)

    q_blocks = seq // MQ
    kv_blocks = seq // bk
    with pl.section_cube():
        for task in pl.range(pl.get_block_idx(), bh * q_blocks, pl.get_block_num()):
            h = task // q_blocks
            q0 = (task % q_blocks) * MQ
            pl.load(q_l1, q, [h, q0, 0])
            for j in pl.range(0, kv_blocks):
                with pl.stage(0):                       # S_j = Q K_j^T, subtile by subtile
                    s_slot = s_ws.next()
                    qk_subtile(q_l1, kt_l1.next(), a_l0.next(), b_l0.next(), c_l0.next(), k, s_slot, h, j * bk, 0)
                    if bk > CK:
                        qk_subtile(q_l1, kt_l1.next(), a_l0.next(), b_l0.next(), c_l0.next(), k, s_slot, h,
                                   j * bk + CK, CK)
                with pl.stage(1):                       # PV_j = P_j V_j, summed over the subtiles in L0C
                    p_slot = p_ws.next()
                    pv = c_l0.next()
                    pv_subtile(p_l1.next(), v_l1.next(), a_l0.next(), b_l0.next(), pv, v, p_slot, h, j * bk, 0)
                    if bk > CK:
                        pv_subtile(p_l1.next(), v_l1.next(), a_l0.next(), b_l0.next(), pv, v, p_slot, h,
                                   j * bk + CK, CK)
                    pl.store(pv_ws.next(), pv)
    with pl.section_vector():
        row0 = pl.get_subblock_idx() * HALF
        for task in pl.range(pl.get_block_idx(), bh * q_blocks, pl.get_block_num()):
            h = task // q_blocks
            q0 = (task % q_blocks) * MQ
            if math16:                          # the "previous" max of block 0 (stage 0 takes slot 0)
                pl.full(m16[1], NEG16)
            else:
                pl.full(m_ub[1], NEG)
            pl.full(l_ub, 0.0)
            pl.full(acc_ub, 0.0)
            for j in pl.range(0, kv_blocks):
                with pl.stage(0):                       # online softmax of S_j -> P_j
                    if math16:
                        softmax_fp16(s_in.next(), s_ws.next(), p_ws.next(), m16.next(), m16.previous(),
                                     alpha_ub.next(), lj16, a16, lj_ub, l_ub, row0, scale)
                    elif narrow:
                        softmax_fp32(s_ub.next(), s_in.next(), s_ws.next(), p_ub.next(), p_ws.next(),
                                     m_ub.next(), m_ub.previous(), alpha_ub.next(), lj_ub, l_ub, row0, scale)
                    else:
                        softmax_fp32(s_ub.next(), None, s_ws.next(), p_ub.next(), p_ws.next(),
                                     m_ub.next(), m_ub.previous(), alpha_ub.next(), lj_ub, l_ub, row0, scale)
                with pl.stage(1):                       # acc = acc * alpha_j + P_j V_j
                    if math16:
                        fold_pv(acc_ub, pv_ub, pv_in.next(), pv_ws.next(), alpha_ub.current(), row0)
                    elif narrow:
                        fold_pv(acc_ub, pv_ub, pv_in, pv_ws.next(), alpha_ub.current(), row0)
                    else:
                        fold_pv(acc_ub, pv_ub, None, pv_ws.next(), alpha_ub.current(), row0)
            pl.row_expand_div(acc_ub, acc_ub, l_ub)
            pl.cast(out_ub, acc_ub)
            pl.store(o, out_ub, [h, q0 + row0, 0])


def qk_subtile(q_l1, kt, a, b, c, k, s_slot, h, key0, col):
    """S[:, col:col+CK] = Q K[key0:key0+CK]^T into the workspace slot (a helper: the parser inlines it)."""
    pl.load(kt, k, [h, key0, 0], trans=True)
    pl.move(a, q_l1)
    pl.move(b, kt)
    pl.matmul(c, a, b)
    pl.store(s_slot, c, [0, col])


def pv_subtile(pt, vt, a, b, pv, v, p_slot, h, key0, col):
    """pv (+)= P[:, col:col+CK] V[key0:key0+CK]; the first subtile (col 0) starts the sum."""
    pl.load(pt, p_slot, [0, col])
    pl.load(vt, v, [h, key0, 0])
    pl.move(a, pt)
    pl.move(b, vt)
    if col == 0:
        pl.matmul(pv, a, b)
    else:
        pl.matmul_acc(pv, a, b)


def fold_pv(acc, pv, pv16, pv_slot, alpha, row0):
    """acc = acc * alpha + P V (pv16: the fp16 staging tile of an fp16 handoff)."""
    if pv16 is not None:
        pl.load(pv16, pv_slot, [row0, 0])
        pl.cast(pv, pv16)
    else:
        pl.load(pv, pv_slot, [row0, 0])
    pl.row_expand_mul(acc, acc, alpha)
    pl.add(acc, acc, pv)


def softmax_fp32(s, s16, s_slot, p, p_slot, m_new, m_old, alpha, lj, l, row0, scale):
    """Online softmax step in fp32 (a helper: the parser inlines it); s16 receives fp16 scores."""
    if s16 is not None:
        pl.load(s16, s_slot, [row0, 0])
        pl.cast(s, s16)
    else:
        pl.load(s, s_slot, [row0, 0])
    pl.mul(s, s, scale)
    pl.amax(lj, s, dim=1)
    pl.maximum(m_new, m_old, lj)
    pl.sub(alpha, m_old, m_new)
    pl.exp(alpha, alpha)
    pl.row_expand_sub(s, s, m_new)
    pl.exp(s, s)
    pl.sum(lj, s, dim=1)
    pl.mul(l, l, alpha)
    pl.add(l, l, lj)
    pl.cast(p, s)
    pl.store(p_slot, p, [row0, 0])


def softmax_fp16(s, s_slot, p_slot, m_new, m_old, alpha, lj16, a16, lj, l, row0, scale):
    """Online softmax step on fp16 scores; P is stored from the same tile."""
    pl.load(s, s_slot, [row0, 0])
    pl.mul(s, s, scale)
    pl.amax(lj16, s, dim=1)
    pl.maximum(m_new, m_old, lj16)
    pl.sub(a16, m_old, m_new)
    pl.exp(a16, a16)
    pl.cast(alpha, a16)
    pl.row_expand_sub(s, s, m_new)
    pl.exp(s, s)
    pl.sum(lj16, s, dim=1)
    pl.cast(lj.with_valid(HALF, 8), lj16)        # whole rows: one contiguous span
    pl.mul(l, l, alpha)
    pl.add(l, l, lj)
    pl.store(p_slot, s, [row0, 0])


flash_attention = pl.jit(attention_body, name="flash_attention", tiling_key=KEY)
flash_attention_pipelined = pl.jit(attention_body, name="flash_attention_pipelined", tiling_key=KEY,
                                   pipeline=pl.PipelineConfig(preload=PRELOAD))


def reference(q, k, v):
    s = (q.float() @ k.float().transpose(1, 2)) / math.sqrt(q.shape[-1])
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


def main(bh=2, seq=512, d=128, pipelined=True, backend=None, block_dim=4, timing_only=False, handoff="fp32",
         math="fp32", block_k=128):
    torch.manual_seed(0)
    q, k, v = (torch.randn(bh, seq, d, dtype=torch.float16) for _ in range(3))
    o = torch.zeros_like(q)
    kernel = flash_attention_pipelined if pipelined else flash_attention
    if backend is not None or timing_only:
        kernel = pl.jit(attention_body, name=kernel.name, pipeline=kernel.pipeline, backend=backend,
                        timing_only=timing_only, tiling_key=KEY)
    report = kernel[None, block_dim, {"HANDOFF": handoff, "MATH": math, "BLOCK_K": block_k}](q, k, v, o)
    if not timing_only:
        torch.testing.assert_close(o, reference(q, k, v), rtol=2e-2, atol=2e-3)
    return report


if __name__ == "__main__":
    print(main())

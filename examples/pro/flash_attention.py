"""Professional-mode fused flash attention (forward, non-causal) on a cube + vector cluster.

Per (head, block of 128 query rows) the cube computes S = Q K_j^T for each block j of 128 keys and
P_j V_j; the two vector cores of the cluster (64 query rows each) run the online softmax of S_j and
fold P_j V_j into their output rows with the running max / sum. On a2a3 cube and vector exchange
S, P and P V through GM workspace slots (double buffered, cross-core flags inserted by the
compiler). With ``pipeline=pl.PipelineConfig(preload=1)`` the stages are software pipelined: the
cube computes Q K_{j+1}^T while the vectors run the softmax of block j, and the vectors run the
softmax of j+1 before folding P_j V_j.

    python examples/pro/flash_attention.py
"""
import math

import torch

import pypto_pro.language as pl

MQ, NK = 128, 128          # query rows per cluster, keys per block
HALF = MQ // 2             # query rows per vector core
NEG = -1.0e30
NEG16 = -6.0e4             # below any fp16 score, inside the fp16 range


# HANDOFF: the dtype of S and of P V in the GM workspace. fp16 halves the cube <-> vector traffic
# (the vectors widen to fp32 before the softmax / the accumulation); fp32 keeps every bit.
# MATH: the softmax arithmetic on the vectors; fp16 (with an fp16 handoff) works on the scores as
# they arrive and stores P from the same tile, about half the vector work; the running sums, the
# rescale factors and the output accumulator stay fp32.
KEY = pl.TilingKey(HANDOFF=("fp32", "fp16"), MATH=("fp32", "fp16"))


def attention_body(q, k, v, o):
    bh, seq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    f16, f32 = pl.DT_FP16, pl.DT_FP32
    narrow = pl.get_tiling_key().HANDOFF == "fp16"
    math16 = pl.get_tiling_key().MATH == "fp16"
    assert narrow or not math16, "MATH=fp16 needs HANDOFF=fp16"
    hd = f16 if narrow else f32
    mat, left, right, acc, vec, gm = (pl.MemorySpace.Mat, pl.MemorySpace.Left, pl.MemorySpace.Right,
                                       pl.MemorySpace.Acc, pl.MemorySpace.Vec, pl.MemorySpace.GM)
    # cube <-> vector handoff through GM workspace slots (per cluster)
    s_ws = pl.make_tile_group(pl.TileType([MQ, NK], hd, gm), depth=2)
    p_ws = pl.make_tile_group(pl.TileType([MQ, NK], f16, gm), depth=2)
    pv_ws = pl.make_tile_group(pl.TileType([MQ, d], hd, gm), depth=2)
    # cube buffers: L1 (Mat), L0A (Left), L0B (Right), L0C (Acc)
    q_l1 = pl.make_tile(pl.TileType([MQ, d], f16, mat), addr=0x00000)
    kt_l1 = pl.make_tile_group(pl.TileType([d, NK], f16, mat), addrs=0x08000, depth=2)
    v_l1 = pl.make_tile_group(pl.TileType([NK, d], f16, mat), addrs=0x18000, depth=2)
    p_l1 = pl.make_tile_group(pl.TileType([MQ, NK], f16, mat), addrs=0x28000, depth=2)
    q_l0 = pl.make_tile(pl.TileType([MQ, d], f16, left), addr=0x0000)
    p_l0 = pl.make_tile(pl.TileType([MQ, NK], f16, left), addr=0x8000)
    kt_l0 = pl.make_tile(pl.TileType([d, NK], f16, right), addr=0x0000)
    v_l0 = pl.make_tile(pl.TileType([NK, d], f16, right), addr=0x8000)
    s_acc = pl.make_tile(pl.TileType([MQ, NK], f32, acc), addr=0x00000)
    o_acc = pl.make_tile(pl.TileType([MQ, d], f32, acc), addr=0x10000)
    # vector buffers (UB), per vector core: HALF query rows
    if math16:      # fp16 scores double buffered and worked on in place; fp16 statistics
        s_in = pl.make_tile_group(pl.TileType([HALF, NK], f16, vec), addrs=0x00000, depth=2)
        stat16 = pl.TileType([HALF, 16], f16, vec)
        m16 = pl.make_tile_group(stat16, addrs=0x08000, depth=2)
        lj16 = pl.make_tile(stat16, addr=0x09000)
        a16 = pl.make_tile(stat16, addr=0x09800)
        pv_in = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x28000)   # shares out_ub's bytes
    elif narrow:    # fp16 S double buffered for the loads, one fp32 working copy
        s_in = pl.make_tile_group(pl.TileType([HALF, NK], f16, vec), addrs=0x00000, depth=2)
        s_ub = pl.make_tile_group(pl.TileType([HALF, NK], f32, vec), addrs=0x08000, depth=1)
        pv_in = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x28000)   # shares out_ub's bytes
    else:
        s_in = s_ub = pl.make_tile_group(pl.TileType([HALF, NK], f32, vec), addrs=0x00000, depth=2)
    p_ub = pl.make_tile_group(pl.TileType([HALF, NK], f16, vec), addrs=0x10000, depth=2)
    pv_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x18000)
    acc_ub = pl.make_tile(pl.TileType([HALF, d], f32, vec), addr=0x20000)
    out_ub = pl.make_tile(pl.TileType([HALF, d], f16, vec), addr=0x28000)
    stat = pl.TileType([HALF, 8], f32, vec)
    m_ub = pl.make_tile_group(stat, addrs=0x2C000, depth=2)       # running max: old / new
    alpha_ub = pl.make_tile_group(stat, addrs=0x2D000, depth=2)   # exp(m_old - m_new), read one stage later
    l_ub = pl.make_tile(stat, addr=0x2E000)                       # running sum
    lj_ub = pl.make_tile(stat, addr=0x2E800)                      # this block's row sums / max

    q_blocks = seq // MQ
    kv_blocks = seq // NK
    with pl.section_cube():
        for task in pl.range(pl.get_block_idx(), bh * q_blocks, pl.get_block_num()):
            h = task // q_blocks
            q0 = (task % q_blocks) * MQ
            pl.load(q_l1, q, [h, q0, 0])
            pl.move(q_l0, q_l1)
            for j in pl.range(0, kv_blocks):
                with pl.stage(0):                       # S_j = Q K_j^T
                    kt = kt_l1.next()
                    pl.load(kt, k, [h, j * NK, 0], trans=True)
                    pl.move(kt_l0, kt)
                    pl.matmul(s_acc, q_l0, kt_l0)
                    pl.store(s_ws.next(), s_acc)
                with pl.stage(1):                       # PV_j = P_j V_j
                    pt = p_l1.next()
                    pl.load(pt, p_ws.next())
                    pl.move(p_l0, pt)
                    vt = v_l1.next()
                    pl.load(vt, v, [h, j * NK, 0])
                    pl.move(v_l0, vt)
                    pl.matmul(o_acc, p_l0, v_l0)
                    pl.store(pv_ws.next(), o_acc)
    with pl.section_vector():
        row0 = pl.get_subblock_idx() * HALF
        for task in pl.range(pl.get_block_idx(), bh * q_blocks, pl.get_block_num()):
            h = task // q_blocks
            q0 = (task % q_blocks) * MQ
            if math16:                          # the "previous" max of block 0 (stage 0 takes slot 0)
                pl.fill(m16[1], NEG16)
            else:
                pl.fill(m_ub[1], NEG)
            pl.fill(l_ub, 0.0)
            pl.fill(acc_ub, 0.0)
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
                    if narrow:
                        pl.load(pv_in, pv_ws.next(), [row0, 0])
                        pl.cast(pv_ub, pv_in)
                    else:
                        pl.load(pv_ub, pv_ws.next(), [row0, 0])
                    pl.row_expand_mul(acc_ub, acc_ub, alpha_ub.current())
                    pl.add(acc_ub, acc_ub, pv_ub)
            pl.row_expand_div(acc_ub, acc_ub, l_ub)
            pl.cast(out_ub, acc_ub)
            pl.store(o, out_ub, [h, q0 + row0, 0])


def softmax_fp32(s, s16, s_slot, p, p_slot, m_new, m_old, alpha, lj, l, row0, scale):
    """Online softmax step in fp32 (a helper: the parser inlines it); s16 receives fp16 scores."""
    if s16 is not None:
        pl.load(s16, s_slot, [row0, 0])
        pl.cast(s, s16)
    else:
        pl.load(s, s_slot, [row0, 0])
    pl.muls(s, s, scale)
    pl.row_max(lj, s)
    pl.maximum(m_new, m_old, lj)
    pl.sub(alpha, m_old, m_new)
    pl.exp(alpha, alpha)
    pl.row_expand_sub(s, s, m_new)
    pl.exp(s, s)
    pl.row_sum(lj, s)
    pl.mul(l, l, alpha)
    pl.add(l, l, lj)
    pl.cast(p, s)
    pl.store(p_slot, p, [row0, 0])


def softmax_fp16(s, s_slot, p_slot, m_new, m_old, alpha, lj16, a16, lj, l, row0, scale):
    """Online softmax step on fp16 scores; P is stored from the same tile."""
    pl.load(s, s_slot, [row0, 0])
    pl.muls(s, s, scale)
    pl.row_max(lj16, s)
    pl.maximum(m_new, m_old, lj16)
    pl.sub(a16, m_old, m_new)
    pl.exp(a16, a16)
    pl.cast(alpha, a16)
    pl.row_expand_sub(s, s, m_new)
    pl.exp(s, s)
    pl.row_sum(lj16, s)
    pl.cast(lj, lj16)
    pl.mul(l, l, alpha)
    pl.add(l, l, lj)
    pl.store(p_slot, s, [row0, 0])


flash_attention = pl.jit(attention_body, name="flash_attention", tiling_key=KEY)
flash_attention_pipelined = pl.jit(attention_body, name="flash_attention_pipelined", tiling_key=KEY,
                                   pipeline=pl.PipelineConfig(preload=1))


def reference(q, k, v):
    s = (q.float() @ k.float().transpose(1, 2)) / math.sqrt(q.shape[-1])
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


def main(bh=2, seq=512, d=128, pipelined=True, backend=None, block_dim=4, timing_only=False, handoff="fp32",
         math="fp32"):
    torch.manual_seed(0)
    q, k, v = (torch.randn(bh, seq, d, dtype=torch.float16) for _ in range(3))
    o = torch.zeros_like(q)
    kernel = flash_attention_pipelined if pipelined else flash_attention
    if backend is not None or timing_only:
        kernel = pl.jit(attention_body, name=kernel.name, pipeline=kernel.pipeline, backend=backend,
                        timing_only=timing_only, tiling_key=KEY)
    report = kernel[None, block_dim, {"HANDOFF": handoff, "MATH": math}](q, k, v, o)
    if not timing_only:
        torch.testing.assert_close(o, reference(q, k, v), rtol=2e-2, atol=2e-3)
    return report


if __name__ == "__main__":
    print(main())

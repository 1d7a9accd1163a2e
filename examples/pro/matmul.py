"""Professional-mode matmul C = A @ B (fp16 in, fp32 accumulation, C in fp16 or fp32) on the cube core,
with the classic double buffering: A/B chunks in L1 (Mat) and in L0A/L0B (Left/Right), and two
accumulators in L0C (Acc) so the store of one output tile overlaps the next tile's matmuls.

    python examples/pro/matmul.py          # 512 x 384 x 640 on the simulator, checked against torch
"""
import torch

import pypto_pro.language as pl

TM, TN, TK = 128, 128, 128


@pl.jit
def matmul_kernel(a: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16],
                  b: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16],
                  c: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], None]):
    a_l1 = pl.make_tile_group(pl.TileType([TM, TK], pl.DT_FP16, pl.MemorySpace.Mat), addrs=0x00000, depth=2)
    b_l1 = pl.make_tile_group(pl.TileType([TK, TN], pl.DT_FP16, pl.MemorySpace.Mat), addrs=0x10000, depth=2)
    a_l0 = pl.make_tile_group(pl.TileType([TM, TK], pl.DT_FP16, pl.MemorySpace.Left), addrs=0x0, depth=2)
    b_l0 = pl.make_tile_group(pl.TileType([TK, TN], pl.DT_FP16, pl.MemorySpace.Right), addrs=0x0, depth=2)
    acc = pl.make_tile_group(pl.TileType([TM, TN], pl.DT_FP32, pl.MemorySpace.Acc), addrs=0x0, depth=2)
    with pl.section_cube():
        m_tiles = pl.ceil_div(a.shape[0], TM)
        n_tiles = pl.ceil_div(b.shape[1], TN)
        k_tiles = pl.ceil_div(a.shape[1], TK)
        for t in pl.range(pl.get_block_idx(), m_tiles * n_tiles, pl.get_block_num()):
            m = t // n_tiles
            n = t % n_tiles
            c_acc = acc.next()
            for k in pl.range(0, k_tiles):
                a1 = a_l1.next()
                b1 = b_l1.next()
                pl.load_tile(a1, a, [m, k])
                pl.load_tile(b1, b, [k, n])
                a0 = a_l0.next()
                b0 = b_l0.next()
                pl.move(a0, a1)
                pl.move(b0, b1)
                pl.matmul(c_acc, a0, b0, acc=k > 0)
            pl.store_tile(c, c_acc, [m, n])


def main(m=512, k=384, n=640, out_dtype=torch.float16, backend=None, block_dim=4):
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(k, n, dtype=torch.float16)
    c = torch.empty(m, n, dtype=out_dtype)
    kernel = matmul_kernel if backend is None else pl.jit(matmul_kernel.fn, backend=backend)
    report = kernel[None, block_dim](a, b, c)
    ref = (a.float() @ b.float()).to(out_dtype)
    torch.testing.assert_close(c, ref, rtol=2e-3, atol=2e-2)
    return report


if __name__ == "__main__":
    print(main())

"""Professional-mode row softmax: y = softmax(x, dim=-1) for fp16 / bf16 / fp32 rows of a static width.

Each vector core takes blocks of ROWS rows (round-robin over the cores); the input and output tiles
are double buffered, the arithmetic runs in fp32 and the result is rounded back to x's dtype. The
last block may be partial (a run-time number of rows): its tiles carry a valid shape.

    python examples/pro/softmax.py
"""
import torch

import pypto_pro.language as pl

ROWS = 8


@pl.jit
def softmax_kernel(x: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None], y: pl.Tensor[[pl.DYNAMIC, pl.STATIC], None]):
    n = x.shape[1]
    io = pl.TileType([ROWS, n], x.dtype, pl.MemorySpace.Vec)
    x_in = pl.make_tile_group(io, addrs=0x00000, depth=2)
    y_out = pl.make_tile_group(io, addrs=0x00000 + 2 * io.nbytes, depth=2)
    xf = pl.make_tile(pl.TileType([ROWS, n], pl.DT_FP32, pl.MemorySpace.Vec), addr=4 * io.nbytes)
    stat = pl.TileType([ROWS, 8], pl.DT_FP32, pl.MemorySpace.Vec)
    row_max = pl.make_tile(stat, addr=4 * io.nbytes + ROWS * n * 4)
    row_sum = pl.make_tile(stat, addr=4 * io.nbytes + ROWS * n * 4 + stat.nbytes)
    with pl.section_vector():
        blocks = pl.ceil_div(x.shape[0], ROWS)
        for b in pl.range(pl.get_block_idx(), blocks, pl.get_block_num()):
            xt = x_in.next()
            yt = y_out.next()
            pl.load_tile(xt, x, [b, 0])
            if x.dtype == pl.DT_FP32:
                pl.copy(xf, xt)
            else:
                pl.cast(xf, xt)
            pl.amax(row_max, xf, dim=1)
            pl.row_expand_sub(xf, xf, row_max)
            pl.exp(xf, xf)
            pl.sum(row_sum, xf, dim=1)
            pl.row_expand_div(xf, xf, row_sum)
            if x.dtype == pl.DT_FP32:
                pl.copy(yt, xf)
            else:
                pl.cast(yt, xf)
            pl.store_tile(y, yt, [b, 0])


def main(rows=100, cols=512, dtype=torch.float16, backend=None, block_dim=4):
    x = torch.randn(rows, cols, dtype=dtype) * 3
    y = torch.empty_like(x)
    kernel = softmax_kernel if backend is None else pl.jit(softmax_kernel.fn, backend=backend)
    report = kernel[None, block_dim](x, y)
    ref = torch.softmax(x.float(), dim=-1).to(dtype)
    tol = {torch.float32: (1e-5, 1e-6), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}[dtype]
    torch.testing.assert_close(y, ref, rtol=tol[0], atol=tol[1])
    return report


if __name__ == "__main__":
    print(main())

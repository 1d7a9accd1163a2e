"""Professional-mode elementwise add, double buffered, split over the cores by rows of tiles.

    python examples/pro/add.py            # 8192 x 4096 fp16 on the simulator, checked against torch
"""
import torch

import pypto_pro.language as pl


@pl.jit
def add_kernel(
    x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16],
    y: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16],
    z: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16],
):
    tile_type = pl.TileType(shape=[128, 128], dtype=pl.DT_FP16, target_memory=pl.MemorySpace.Vec)
    a_db = pl.make_tile_group(type=tile_type, addrs=0x0000, mutex_ids=[0, 1])
    b_db = pl.make_tile_group(type=tile_type, addrs=0x10000, mutex_ids=[2, 3])
    c_db = pl.make_tile_group(type=tile_type, addrs=0x20000, mutex_ids=[30, 31])
    with pl.section_vector():
        num_cores = pl.get_block_num()
        core_id = pl.get_block_idx()
        m_tile_num = x.shape[0] // 128
        n_tile_num = x.shape[1] // 128
        for i in pl.range(core_id, m_tile_num, num_cores):
            for j in pl.range(0, n_tile_num, 1):
                tile_a = a_db.next()
                tile_b = b_db.next()
                tile_c = c_db.next()
                pl.load_tile(tile_a, x, [i, j])
                pl.load_tile(tile_b, y, [i, j])
                pl.add(tile_c, tile_a, tile_b)
                pl.store_tile(z, tile_c, [i, j])


def main(rows=8192, cols=4096, backend=None):
    x = torch.randn(rows, cols, dtype=torch.float16)
    y = torch.randn(rows, cols, dtype=torch.float16)
    z = torch.empty_like(x)
    num_cores = rows // 128
    kernel = add_kernel if backend is None else pl.jit(add_kernel.fn, backend=backend)
    report = kernel[None, num_cores](x, y, z)
    torch.testing.assert_close(z, x + y)
    return report


if __name__ == "__main__":
    print(main())

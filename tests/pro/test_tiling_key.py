"""TilingKey: each combination of field values is folded to constants and compiled as its own kernel."""
import pytest
import torch

import pypto_pro.language as pl

VEC, F16 = pl.MemorySpace.Vec, pl.DT_FP16
KEY = pl.TilingKey(TILE_N=(64, 128), OP=("add", "mul"))


@pl.jit(tiling_key=KEY)
def keyed(x: pl.Tensor[[pl.DYNAMIC, 256], F16], y: pl.Tensor[[pl.DYNAMIC, 256], F16],
          z: pl.Tensor[[pl.DYNAMIC, 256], F16]):
    key = pl.get_tiling_key()
    t = pl.TileType([32, key.TILE_N], F16, VEC)
    a, b, c = (pl.make_tile(t, addr=i * t.nbytes) for i in range(3))
    with pl.section_vector():
        for i in pl.range(pl.get_block_idx(), pl.ceil_div(x.shape[0], 32), pl.get_block_num()):
            for j in range(256 // key.TILE_N):             # compile-time: folded per variant
                pl.load_tile(a, x, [i, j])
                pl.load_tile(b, y, [i, j])
                if key.OP == "add":
                    pl.add(c, a, b)
                else:
                    pl.mul(c, a, b)
                pl.store_tile(z, c, [i, j])


def test_each_combination_is_its_own_kernel():
    x = torch.randn(70, 256, dtype=torch.float16)
    y = torch.randn(70, 256, dtype=torch.float16)
    before = keyed.compile_count
    for tile_n in (64, 128):
        for op, ref in (("add", x.float() + y.float()), ("mul", x.float() * y.float())):
            z = torch.zeros_like(x)
            keyed[None, 2, {"TILE_N": tile_n, "OP": op}](x, y, z)
            torch.testing.assert_close(z, ref.half())
            kernel = keyed.compile(x, y, z, key={"TILE_N": tile_n, "OP": op}).kernel
            loads = [i for i in kernel.blocks[0].instructions() if i.op == "TLOAD"]
            assert len(loads) == 2 * 256 // tile_n
            assert f"TILE_N{tile_n}" in kernel.name and op in kernel.name
    assert keyed.compile_count - before == 4
    z = torch.zeros_like(x)
    keyed[None, 2, {"OP": "mul", "TILE_N": 64}](x, y, z)          # cached: no fifth compilation
    assert keyed.compile_count - before == 4


def test_defaults_and_bad_values():
    x = torch.randn(32, 256, dtype=torch.float16)
    z = torch.zeros_like(x)
    keyed[None, 1](x, x, z)                                        # defaults: first allowed values
    torch.testing.assert_close(z, (x.float() * 2).half())
    with pytest.raises(pl.LaunchError, match="not one of the allowed values"):
        keyed[None, 1, {"TILE_N": 96}](x, x, z)
    with pytest.raises(pl.LaunchError, match="unknown TilingKey field"):
        keyed[None, 1, {"TILE_M": 64}](x, x, z)
    assert len(list(KEY.combinations())) == 4

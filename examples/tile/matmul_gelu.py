"""C = gelu(A @ B + bias) at the Tile level: the K loop accumulates in the cube's L0C, the epilogue (bias,
GELU, cast) runs on the vector cores of the same cluster — the accumulator is handed over through a GM
workspace slot, so the next output tile's K loop overlaps this tile's epilogue.

    python examples/tile/matmul_gelu.py [sim|cpu|reference]
"""
import torch

import pypto.tile as pt


@pt.kernel
def matmul_bias_gelu(A, B, bias, C, BM: int = 128, BN: int = 128, BK: int = 64):
    """A [M, K] @ B [K, N] + bias [N] -> C [M, N]."""
    i, j = pt.program_id(0), pt.program_id(1)
    acc = pt.zeros((BM, BN))
    for k in pt.range(pt.cdiv(A.shape[1], BK)):
        a = pt.load(A.tile((BM, BK))[i, k])
        b = pt.load(B.tile((BK, BN))[k, j])
        acc += pt.matmul(a, b)
    y = pt.gelu(acc + pt.load(bias.tile((BN,))[j]).float())
    pt.store(C.tile((BM, BN))[i, j], y.to(C.dtype))


def run(a, b, bias, BM=128, BN=128, BK=64):
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
    grid = (pt.cdiv(a.shape[0], BM), pt.cdiv(b.shape[1], BN))
    matmul_bias_gelu[grid](a, b, bias, c, BM=BM, BN=BN, BK=BK)
    return c


def main(m=200, k=160, n=300, dtype=torch.float16):
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    bias = torch.randn(n, dtype=dtype)
    c = run(a, b, bias, BM=64, BN=64, BK=64)
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float()).to(dtype)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)
    print("matmul + bias + gelu matches torch:", tuple(c.shape), dtype)


if __name__ == "__main__":
    import sys

    import pypto
    pypto.set_backend(sys.argv[1] if len(sys.argv) > 1 else "sim")      # sim | cpu | reference
    main()

"""Layer norm at the Tile level: one program per block of BR rows (the whole row in one tile), statistics
and normalisation in fp32, the result rounded to the input's dtype.

    python examples/tile/layer_norm.py [sim|cpu|reference]
"""
import torch

import pypto.tile as pt


@pt.kernel
def layer_norm(X, W, B, Y, BR: int = 16, eps: float = 1e-5):
    """X, Y: [rows, n]; W, B: [n]."""
    n = X.shape[1]
    i = pt.program_id(0)
    x = pt.load(X.tile((BR, n))[i, 0]).float()
    mean = pt.sum(x, dim=-1) / n
    xc = x - mean
    var = pt.sum(xc * xc, dim=-1) / n
    w = pt.load(W.tile((n,))[0]).float()
    b = pt.load(B.tile((n,))[0]).float()
    y = xc * pt.rsqrt(var + eps) * w + b
    pt.store(Y.tile((BR, n))[i, 0], y.to(Y.dtype))


def run(x, w, b, BR=16, eps=1e-5):
    y = torch.empty_like(x)
    layer_norm[(pt.cdiv(x.shape[0], BR),)](x, w, b, y, BR=BR, eps=eps)
    return y


def main(rows=100, n=512, dtype=torch.float16):
    x = torch.randn(rows, n, dtype=dtype)
    w, b = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    y = run(x, w, b)
    ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5).to(dtype)
    torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
    print("layer norm matches torch:", tuple(y.shape), dtype)


if __name__ == "__main__":
    import sys

    import pypto
    pypto.set_backend(sys.argv[1] if len(sys.argv) > 1 else "sim")      # sim | cpu | reference
    main()

"""Causal flash attention at the Tile level: one program per (query tile, batch*head); the loop over
key/value tiles keeps a running row max ``m``, row sum ``l`` and output accumulator ``acc`` (online
softmax), so the [S, S] score matrix never exists in GM.

    python examples/tile/flash_attention.py [sim|cpu|reference]   # a small case against torch
"""
import math

import torch

import pypto.tile as pt


@pt.kernel
def flash_attention(Q, K, V, O, BM: int = 64, BN: int = 256, causal: bool = True, scores=pt.float32,
                    partials=pt.float32):
    """Q, K, V, O: [batch*heads, seq, head_dim]. ``scores`` / ``partials``: the dtypes in which the cube
    hands Q K^T and P V to the vector cores (through GM) — fp16 halves that traffic, at some precision."""
    seq, d = Q.shape[1], Q.shape[2]
    i, bh = pt.program_id(0), pt.program_id(1)
    scale = 1.0 / math.sqrt(d)
    q = pt.load(Q[bh].tile((BM, d))[i, 0])
    m = pt.full((BM, 1), float("-inf"))
    l = pt.zeros((BM, 1))
    acc = pt.zeros((BM, d))
    n_kv = pt.cdiv(K.shape[1], BN)
    if causal:
        n_kv = pt.min(pt.cdiv((i + 1) * BM, BN), n_kv)
    for j in pt.range(0, n_kv):
        k = pt.load(K[bh].tile((BN, d))[j, 0])
        s = pt.matmul(q, k, trans_b=True, out_dtype=scores).float() * scale
        if causal:
            s = pt.where(pt.causal_mask((BM, BN), i * BM, j * BN), s, float("-inf"))
        m_new = pt.maximum(m, pt.amax(s, dim=-1))
        alpha = pt.exp(m - m_new)
        p = pt.exp(s - m_new)
        l = l * alpha + pt.sum(p, dim=-1)
        v = pt.load(V[bh].tile((BN, d))[j, 0])
        acc = acc * alpha + pt.matmul(p.to(V.dtype), v, out_dtype=partials)
        m = m_new
    pt.store(O[bh].tile((BM, d))[i, 0], (acc / l).to(O.dtype))


def attention(q, k, v, BM=64, BN=256, causal=True, scores=pt.float32, partials=pt.float32):
    """O = softmax(q k^T / sqrt(d), causal) v for q, k, v [batch*heads, seq, d]."""
    o = torch.empty_like(q)
    grid = (pt.cdiv(q.shape[1], BM), q.shape[0])
    flash_attention[grid](q, k, v, o, BM=BM, BN=BN, causal=causal, scores=scores, partials=partials)
    return o


def main(bh=2, seq=200, d=64, dtype=torch.float16):
    q, k, v = (torch.randn(bh, seq, d, dtype=dtype) for _ in range(3))
    o = attention(q, k, v, BM=64, BN=64)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    print("flash attention matches torch:", tuple(o.shape), dtype)


if __name__ == "__main__":
    import sys

    import pypto
    pypto.set_backend(sys.argv[1] if len(sys.argv) > 1 else "sim")      # sim | cpu | reference
    main()

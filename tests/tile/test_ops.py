"""Tile ops against torch (computed independently here), on the reference interpreter and the simulator:
elementwise math and broadcasts, reductions, masks and selects, casts, matmul forms, loop-carried tiles."""

import pytest
import torch

import pypto
import pypto.tile as pt

BACKENDS = ["reference", "sim"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_vector_ops_with_tails(backend):
    """45 x 100 tensors in 16 x 64 tiles: row and column tails everywhere."""
    @pt.kernel(backend=backend)
    def k(X, Y, R, O1, O2, O3):
        i, j = pt.program_id(0), pt.program_id(1)
        x = pt.load(X.tile((16, 64))[i, j]).float()
        y = pt.load(Y.tile((16, 64))[i, j]).float()
        r = pt.load(R.tile((64,))[j]).float()                # a [1, 64] row
        a = pt.maximum(x, y) * 2.0 - pt.abs(y) / 4.0 + 1.5
        b = pt.exp(pt.minimum(x, 0.5)) + pt.sqrt(pt.abs(y) + 1.0) * r
        c = pt.where(x > y, pt.tanh(x), pt.sigmoid(y)) + (1.0 - x) / (pt.abs(y) + 2.0)
        s = pt.sum(a, dim=-1) + pt.amax(b, dim=-1)        # [16, 1]
        pt.store(O1.tile((16, 64))[i, j], (a + b * c - s).to(O1.dtype))
        pt.store(O2.tile((16, 64))[i, j], pt.relu(x - pt.amin(y, dim=-1)).to(O2.dtype))
        pt.store(O3.tile((16, 64))[i, j], (pt.expand(pt.amax(x, dim=-1), (16, 64)) + r).to(O3.dtype))

    torch.manual_seed(0)
    X, Y = torch.randn(45, 100, dtype=torch.float16), torch.randn(45, 100, dtype=torch.float16)
    R = torch.randn(100, dtype=torch.float16)
    outs = [torch.empty(45, 100, dtype=torch.float16) for _ in range(3)]
    k[(3, 2)](X, Y, R, *outs)
    ref = [torch.empty(45, 100) for _ in range(3)]
    for i0 in range(0, 45, 16):
        for j0 in range(0, 100, 64):
            x, y = X[i0:i0 + 16, j0:j0 + 64].float(), Y[i0:i0 + 16, j0:j0 + 64].float()
            r = R[j0:j0 + 64].float()
            a = torch.maximum(x, y) * 2 - y.abs() / 4 + 1.5
            b = torch.exp(torch.clamp(x, max=0.5)) + torch.sqrt(y.abs() + 1) * r
            c = torch.where(x > y, torch.tanh(x), torch.sigmoid(y)) + (1 - x) / (y.abs() + 2)
            s = a.sum(1, keepdim=True) + b.amax(1, keepdim=True)
            ref[0][i0:i0 + 16, j0:j0 + 64] = a + b * c - s
            ref[1][i0:i0 + 16, j0:j0 + 64] = torch.relu(x - y.amin(1, keepdim=True))
            ref[2][i0:i0 + 16, j0:j0 + 64] = x.amax(1, keepdim=True) + r
    for o, r in zip(outs, ref):
        torch.testing.assert_close(o.float(), r, rtol=1e-2, atol=3e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_reductions_masks_and_iota(backend):
    @pt.kernel(backend=backend)
    def k(X, S, M):
        x = pt.load(X.tile((32, 48))[0, 0])
        pt.store(S.tile((1, 48))[0, 0], pt.sum(x, dim=0) + pt.amax(x, dim=0))
        rows = pt.arange((32, 48), axis=0, start=3)
        cols = pt.arange((32, 48), axis=1)
        tri = pt.where(pt.causal_mask((32, 48), 5, 0), x, 0.0)
        pt.store(M.tile((32, 48))[0, 0], tri + pt.where(cols >= rows, 1.0, -1.0))

    X = torch.randn(32, 48)
    S, M = torch.empty(1, 48), torch.empty(32, 48)
    k[(1,)](X, S, M)
    torch.testing.assert_close(S, X.sum(0, keepdim=True) + X.amax(0, keepdim=True), rtol=1e-5, atol=1e-4)
    r, c = torch.arange(32).unsqueeze(1), torch.arange(48).unsqueeze(0)
    ref = torch.where(c <= r + 5, X, 0.0) + torch.where(c >= r + 3, 1.0, -1.0)
    torch.testing.assert_close(M, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_forms_on_the_cube(backend):
    """trans_a / trans_b, an fp16 result stored straight from L0C, a product fed to another matmul."""
    torch.manual_seed(1)
    A, B, C = torch.randn(64, 32).half(), torch.randn(64, 48).half(), torch.randn(64, 48).half()
    D1, D2 = torch.empty(32, 48).half(), torch.empty(32, 64)
    pt.kernel(_mm_kernel, backend=backend)[(1,)](A, B, C, D1, D2)
    ab = (A.float().T @ B.float()).half()
    torch.testing.assert_close(D1, ab, rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(D2, ab.float() @ C.float().T, rtol=1e-3, atol=5e-2)


def _mm_kernel(A, B, C, D1, D2):
    a = pt.load(A.tile((64, 32))[0, 0])
    b = pt.load(B.tile((64, 48))[0, 0])
    c = pt.load(C.tile((64, 48))[0, 0])
    ab = pt.matmul(a, b, trans_a=True, out_dtype=pt.float16)          # [32, 48] fp16
    pt.store(D1.tile((32, 48))[0, 0], ab)
    pt.store(D2.tile((32, 64))[0, 0], pt.matmul(ab, c, trans_b=True))  # [32, 48] @ [48, 64]


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_loop_accumulates_in_l0c_and_explicit_acc(backend):
    @pt.kernel(backend=backend)
    def k(A, B, C):
        i = pt.program_id(0)
        acc = pt.zeros((32, 64))
        for kk in pt.range(pt.cdiv(A.shape[1], 32)):
            acc = pt.matmul(pt.load(A.tile((32, 32))[i, kk]), pt.load(B.tile((32, 64))[kk, 0]), acc=acc)
        pt.store(C.tile((32, 64))[i, 0], acc)
    torch.manual_seed(2)
    A, B = torch.randn(70, 100).half(), torch.randn(100, 64).half()
    C = torch.empty(70, 64)
    k[(3,)](A, B, C)
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_carried_rebinding_in_place_updates_and_zero_trips(backend):
    """acc rebound, s updated with +=, m carried through max; a row tile with no iterations keeps its
    initial values."""
    @pt.kernel(backend=backend)
    def k(X, O, n: int = 3):
        i = pt.program_id(0)
        acc = pt.zeros((8, 32))
        s = pt.full((8, 1), 1.0)
        m = pt.full((8, 32), -1e30)
        for j in pt.range(i, n):                    # program 3 has no iteration
            x = pt.load(X.tile((8, 32))[i, j])
            acc = acc * 0.5 + x
            s += pt.sum(x, dim=-1)
            m = pt.maximum(m, x)
        pt.store(O.tile((8, 32))[i, 0], acc + s + pt.maximum(m, -5.0))
    torch.manual_seed(3)
    X = torch.randn(32, 96)
    O = torch.empty(32, 32)
    k[(4,)](X, O)
    for i in range(4):
        acc, s, m = torch.zeros(8, 32), torch.ones(8, 1), torch.full((8, 32), -1e30)
        for j in range(i, 3):
            x = X[8 * i:8 * i + 8, 32 * j:32 * j + 32]
            acc, s, m = acc * 0.5 + x, s + x.sum(1, keepdim=True), torch.maximum(m, x)
        torch.testing.assert_close(O[8 * i:8 * i + 8], acc + s + torch.clamp(m, min=-5.0), rtol=1e-5, atol=1e-4)


def test_dynamic_sizes_compile_once():
    @pt.kernel(backend="sim")
    def k(X: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], Y: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        i = pt.program_id(0)
        pt.store(Y.tile((16, 64))[i, 0], pt.exp(pt.load(X.tile((16, 64))[i, 0])))
    for rows in (16, 40, 77):
        x = torch.randn(rows, 64)
        y = torch.empty_like(x)
        k[(pt.cdiv(rows, 16),)](x, y)
        torch.testing.assert_close(y, x.exp())
    assert k.trace_count == 1


def test_grid_from_a_function_of_the_arguments():
    @pt.kernel(backend="reference")
    def k(X, Y, BR: int = 8):
        i = pt.program_id(0)
        pt.store(Y.tile((BR, 16))[i, 0], pt.load(X.tile((BR, 16))[i, 0]) * 3.0)
    x = torch.randn(20, 16)
    y = torch.empty_like(x)
    k[lambda a: (pt.cdiv(a["X"].shape[0], a["BR"]),)](x, y, BR=8)
    torch.testing.assert_close(y, x * 3)


def fused_attention_kernel(Q_tile, K_tile, V_tile, out_tile):
    """The issue's sketch, verbatim: tile views in, one attention block out."""
    q_blk = pt.load(Q_tile); k_blk = pt.load(K_tile)                # noqa: E702
    score_blk = pt.matmul(q_blk, pt.transpose(k_blk))
    prob_blk = pt.softmax(score_blk)
    v_blk = pt.load(V_tile)
    pt.store(out_tile, pt.matmul(prob_blk, v_blk))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_issue_sketch_reads_naturally(backend):
    @pt.kernel(backend=backend)
    def attention(Q, K, V, O, BM: int = 32):
        i = pt.program_id(0)
        s, d = K.shape
        fused_attention_kernel(Q.tile((BM, d))[i, 0], K.tile((s, d))[0, 0], V.tile((s, d))[0, 0],
                               O.tile((BM, d))[i, 0])
    torch.manual_seed(5)
    q, k, v = torch.randn(80, 64).half(), torch.randn(64, 64).half(), torch.randn(64, 64).half()
    o = torch.empty(80, 64)
    attention[(3,)](q, k, v, o)
    ref = torch.softmax(q.float() @ k.float().T, -1).half().float() @ v.float()
    torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_through_gm_scratch(backend):
    @pt.kernel(backend=backend)
    def k(X, Y):
        i = pt.program_id(0)
        y = pt.reshape(pt.exp(pt.load(X.tile((8, 64))[i, 0])), (16, 32)) * 2.0
        pt.store(Y.tile((16, 32))[i, 0], y)
    X = torch.randn(24, 64)
    Y = torch.empty(48, 32)
    k[(3,)](X, Y)
    torch.testing.assert_close(Y, (X.exp() * 2).reshape(48, 32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_programs_past_the_end_read_and_write_nothing(backend):
    @pt.kernel(backend=backend)
    def k(X, Y):
        i = pt.program_id(0)
        pt.store(Y.tile((16, 32))[i, 0], pt.load(X.tile((16, 32))[i, 0]) + 1.0)
    X = torch.randn(20, 32)
    Y = torch.zeros(20, 32)
    k[(4,)](X, Y)                        # 2 programs would do; programs 2 and 3 have empty tiles
    torch.testing.assert_close(Y, X + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unary_ops_named_as_in_torch(backend):
    """pt.reciprocal and the other unary ops that carry torch's names compute what torch's do."""
    names = ["reciprocal", "rsqrt", "erf", "sin", "cos", "log1p", "expm1", "floor", "ceil"]

    @pt.kernel(backend=backend)
    def k(X, O):
        x = pt.load(X.tile((16, 32))[0, 0])
        for n, name in enumerate(names):
            pt.store(O.tile((16, 32))[n, 0], getattr(pt, name)(x))

    torch.manual_seed(1)
    X = torch.rand(16, 32) * 3 + 0.1                        # positive: every op's domain
    O = torch.empty(16 * len(names), 32)
    k[(1,)](X, O)
    for n, name in enumerate(names):
        torch.testing.assert_close(O[16 * n:16 * (n + 1)], getattr(torch, name)(X), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, name=name: f"pt.{name}: {m}")

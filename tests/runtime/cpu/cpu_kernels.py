"""Hand-built Block IR kernels for the codegen and cpu backend tests (and their torch references).

Each builder returns a Kernel; tails come from dynamic valid shapes (Min(tile, size - offset)).
"""
from __future__ import annotations

import sympy
import torch

from pypto import dtypes
from pypto.errors import SourceLoc
from pypto.ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag,
                            CrossCoreWaitFlag, For, GMParam, GMRegion, If, Kernel, SetFlag, TileDecl, WaitFlag,
                            instr)
from pypto.ir.isa import MemSpace, Pipe
from pypto.symbolic import ceildiv, index_symbol, smin, symbol

M, N, K = symbol("M"), symbol("N"), symbol("K")
UB, L1, L0A, L0B, L0C = MemSpace.UB, MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C
F32 = dtypes.float32


def loc(line: int, func: str = "") -> SourceLoc:
    return SourceLoc("model.py", line, func)


class Builder:
    """Places tiles one after another per memory space and builds instructions against them."""

    def __init__(self):
        self.tiles: dict[str, TileDecl] = {}
        self.top: dict = {}

    def tile(self, name, space, dtype, shape, valid=None):
        nbytes = shape[0] * shape[1] * dtype.itemsize
        addr = self.top.get(space, 0)
        self.top[space] = addr + -(-nbytes // 32) * 32
        self.tiles[name] = TileDecl(name, space, dtype, tuple(shape), addr, valid)
        return name

    def __call__(self, op, *operands, line=None, **attrs):
        return instr(op, list(operands), self.tiles, attrs, loc(line) if line else None)


def vector_add(dtype, rows_per_tile=16, cols=256) -> Kernel:
    """z = x + y over [M, cols]; each core takes a contiguous run of row tiles, double-buffered."""
    b = Builder()
    i = index_symbol("i")
    n_tiles = ceildiv(M, rows_per_tile)
    per_core = ceildiv(n_tiles, BLOCK_NUM)
    t0 = BLOCK_IDX * per_core
    t1 = smin(n_tiles, t0 + per_core)
    valid = [smin(rows_per_tile, M - (i + k) * rows_per_tile) for k in range(2)]
    for k in range(2):
        for n in ("x", "y", "z"):
            b.tile(f"{n}{k}", UB, dtype, (rows_per_tile, cols), (valid[k], cols))

    def step(k):
        row = (i + k) * rows_per_tile
        return [
            WaitFlag(Pipe.V, Pipe.MTE2, k),
            b("TLOAD", f"x{k}", GMRegion("x", (row, 0)), line=10),
            b("TLOAD", f"y{k}", GMRegion("y", (row, 0)), line=10),
            SetFlag(Pipe.MTE2, Pipe.V, k), WaitFlag(Pipe.MTE2, Pipe.V, k),
            WaitFlag(Pipe.MTE3, Pipe.V, k),
            b("TADD", f"z{k}", f"x{k}", f"y{k}", line=11),
            SetFlag(Pipe.V, Pipe.MTE2, k),
            SetFlag(Pipe.V, Pipe.MTE3, k), WaitFlag(Pipe.V, Pipe.MTE3, k),
            b("TSTORE", GMRegion("z", (row, 0)), f"z{k}", line=12),
            SetFlag(Pipe.MTE3, Pipe.V, k),
        ]
    prologue = [SetFlag(Pipe.V, Pipe.MTE2, 0), SetFlag(Pipe.V, Pipe.MTE2, 1),
                SetFlag(Pipe.MTE3, Pipe.V, 0), SetFlag(Pipe.MTE3, Pipe.V, 1)]
    epilogue = [WaitFlag(Pipe.V, Pipe.MTE2, 0), WaitFlag(Pipe.V, Pipe.MTE2, 1),
                WaitFlag(Pipe.MTE3, Pipe.V, 0), WaitFlag(Pipe.MTE3, Pipe.V, 1)]
    body = prologue + [For(i, t0, t1, 2, step(0) + [If(sympy.Lt(i + 1, t1), step(1))], {"pipeline": 2})] + epilogue
    gm = [GMParam(n, dtype, (M, cols)) for n in ("x", "y", "z")]
    blk = Block("vadd", CoreType.AIV, gm, [], list(b.tiles.values()), body)
    return Kernel(f"vadd_{dtype.name}", [blk], loc=loc(9, "vadd"))


def softmax_rows(dtype, rows=8, cols=256) -> Kernel:
    """y = softmax(x, -1) for x [M, cols], one row tile per core-loop step, fp32 inside."""
    b = Builder()
    r = index_symbol("r")
    vr = smin(rows, M - r)
    b.tile("xt", UB, dtype, (rows, cols), (vr, cols))
    xf = b.tile("xf", UB, F32, (rows, cols), (vr, cols)) if dtype != F32 else "xt"
    b.tile("m", UB, F32, (rows, 8), (vr, 1))
    b.tile("s", UB, F32, (rows, 8), (vr, 1))
    body = [b("TLOAD", "xt", GMRegion("x", (r, 0)), line=20),
            SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)]
    if dtype != F32:
        body.append(b("TCVT", xf, "xt", line=21))
    body += [b("TROWMAX", "m", xf, line=22),
             b("TROWEXPANDSUB", xf, xf, "m", line=22),
             b("TEXP", xf, xf, line=22),
             b("TROWSUM", "s", xf, line=22),
             b("TROWEXPANDDIV", xf, xf, "s", line=22)]
    if dtype != F32:
        body.append(b("TCVT", "xt", xf, line=23))
    body += [SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
             b("TSTORE", GMRegion("y", (r, 0)), "xt", line=24),
             SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    start = BLOCK_IDX * rows
    loop = For(r, start, M, BLOCK_NUM * rows, body)
    gm = [GMParam("x", dtype, (M, cols)), GMParam("y", dtype, (M, cols))]
    return Kernel(f"softmax_{dtype.name}", [Block("softmax_rows", CoreType.AIV, gm, [], list(b.tiles.values()),
                                                  [loop])], loc=loc(19, "softmax"))


def rms_norm(dtype, rows=8, cols=256, eps=1e-6) -> Kernel:
    """y = x * rsqrt(mean(x^2, -1) + eps) * w for x [M, cols], w [cols]."""
    b = Builder()
    r = index_symbol("r")
    vr = smin(rows, M - r)
    b.tile("xt", UB, dtype, (rows, cols), (vr, cols))
    xf = b.tile("xf", UB, F32, (rows, cols), (vr, cols)) if dtype != F32 else "xt"
    b.tile("sq", UB, F32, (rows, cols), (vr, cols))
    b.tile("ss", UB, F32, (rows, 8), (vr, 1))
    b.tile("wt", UB, dtype, (1, cols))
    wf = b.tile("wf", UB, F32, (1, cols)) if dtype != F32 else "wt"
    head = [b("TLOAD", "wt", GMRegion("w", (0,)), line=30)]
    if dtype != F32:
        head += [SetFlag(Pipe.MTE2, Pipe.V, 1), WaitFlag(Pipe.MTE2, Pipe.V, 1), b("TCVT", wf, "wt", line=30)]
        head += [SetFlag(Pipe.V, Pipe.MTE2, 1), WaitFlag(Pipe.V, Pipe.MTE2, 1)]
    body = [b("TLOAD", "xt", GMRegion("x", (r, 0)), line=31),
            SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)]
    if dtype != F32:
        body.append(b("TCVT", xf, "xt", line=31))
    body += [b("TMUL", "sq", xf, xf, line=32),
             b("TROWSUM", "ss", "sq", line=32),
             b("TMULS", "ss", "ss", 1.0 / cols, line=32),
             b("TADDS", "ss", "ss", eps, line=32),
             b("TRSQRT", "ss", "ss", line=32),
             b("TROWEXPANDMUL", xf, xf, "ss", line=33),
             b("TCOLEXPANDMUL", xf, xf, wf, line=33)]
    if dtype != F32:
        body.append(b("TCVT", "xt", xf, line=33))
    body += [SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
             b("TSTORE", GMRegion("y", (r, 0)), "xt", line=34),
             SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    gm = [GMParam("x", dtype, (M, cols)), GMParam("w", dtype, (cols,)), GMParam("y", dtype, (M, cols))]
    blk = Block("rms_norm_rows", CoreType.AIV, gm, [], list(b.tiles.values()),
                head + [For(r, BLOCK_IDX * rows, M, BLOCK_NUM * rows, body)])
    return Kernel(f"rms_norm_{dtype.name}", [blk], loc=loc(29, "rms_norm"))


def _matmul_tiles(b, dtype, bm, bn, bk, m0, n0, kk, out_dtype=F32):
    vm, vn, vk = smin(bm, M - m0), smin(bn, N - n0), smin(bk, K - kk)
    b.tile("a1", L1, dtype, (bm, bk), (vm, vk))
    b.tile("b1", L1, dtype, (bk, bn), (vk, vn))
    b.tile("a0", L0A, dtype, (bm, bk), (vm, vk))
    b.tile("b0", L0B, dtype, (bk, bn), (vk, vn))
    b.tile("c0", L0C, out_dtype, (bm, bn), (vm, vn))


def _matmul_k_loop(b, kk, m0, n0, bk):
    return For(kk, 0, K, bk, [
        WaitFlag(Pipe.MTE1, Pipe.MTE2, 0),
        b("TLOAD", "a1", GMRegion("a", (m0, kk)), line=41),
        b("TLOAD", "b1", GMRegion("b", (kk, n0)), line=42),
        SetFlag(Pipe.MTE2, Pipe.MTE1, 0), WaitFlag(Pipe.MTE2, Pipe.MTE1, 0),
        WaitFlag(Pipe.M, Pipe.MTE1, 0),
        b("TMOV", "a0", "a1", line=43),
        b("TMOV", "b0", "b1", line=43),
        SetFlag(Pipe.MTE1, Pipe.MTE2, 0),
        SetFlag(Pipe.MTE1, Pipe.M, 0), WaitFlag(Pipe.MTE1, Pipe.M, 0),
        If(sympy.Eq(kk, 0), [b("TMATMUL", "c0", "a0", "b0", line=44)],
           [b("TMATMUL_ACC", "c0", "a0", "b0", line=44)]),
        SetFlag(Pipe.M, Pipe.MTE1, 0),
    ], {"pipeline": 1})


def matmul(dtype, bm=64, bn=64, bk=32) -> Kernel:
    """c [M, N] fp32 = a [M, K] @ b [K, N] through L1 -> L0A / L0B -> L0C; one output tile per core."""
    b = Builder()
    kk = index_symbol("kk")
    tiles_n = ceildiv(N, bn)
    m0 = sympy.floor(BLOCK_IDX / tiles_n) * bm
    n0 = sympy.Mod(BLOCK_IDX, tiles_n) * bn
    _matmul_tiles(b, dtype, bm, bn, bk, m0, n0, kk)
    body = [SetFlag(Pipe.MTE1, Pipe.MTE2, 0), SetFlag(Pipe.M, Pipe.MTE1, 0),
            _matmul_k_loop(b, kk, m0, n0, bk),
            WaitFlag(Pipe.MTE1, Pipe.MTE2, 0), WaitFlag(Pipe.M, Pipe.MTE1, 0),
            SetFlag(Pipe.M, Pipe.FIX, 0), WaitFlag(Pipe.M, Pipe.FIX, 0),
            b("TSTORE", GMRegion("c", (m0, n0)), "c0", line=45)]
    gm = [GMParam("a", dtype, (M, K)), GMParam("b", dtype, (K, N)), GMParam("c", F32, (M, N))]
    return Kernel(f"matmul_{dtype.name}", [Block("matmul", CoreType.AIC, gm, [], list(b.tiles.values()), body)],
                  loc=loc(40, "matmul"))


def matmul_relu(dtype, bm=32, bn=64, bk=32) -> Kernel:
    """Cube + vector: the cube core computes a tile of a @ b into a GM workspace and signals; each
    vector sub-block takes half of the tile's rows, applies relu * 2 and stores c."""
    b = Builder()
    kk = index_symbol("kk")
    tiles_n = ceildiv(N, bn)
    m0 = sympy.floor(BLOCK_IDX / tiles_n) * bm
    n0 = sympy.Mod(BLOCK_IDX, tiles_n) * bn
    _matmul_tiles(b, dtype, bm, bn, bk, m0, n0, kk)
    cube_body = [SetFlag(Pipe.MTE1, Pipe.MTE2, 0), SetFlag(Pipe.M, Pipe.MTE1, 0),
                 _matmul_k_loop(b, kk, m0, n0, bk),
                 WaitFlag(Pipe.MTE1, Pipe.MTE2, 0), WaitFlag(Pipe.M, Pipe.MTE1, 0),
                 SetFlag(Pipe.M, Pipe.FIX, 0), WaitFlag(Pipe.M, Pipe.FIX, 0),
                 b("TSTORE", GMRegion("ws", (m0, n0)), "c0", line=45),
                 CrossCoreSetFlag(Pipe.FIX, 3)]
    gm_cube = [GMParam("a", dtype, (M, K)), GMParam("b", dtype, (K, N)), GMParam("ws", F32, (M, N))]
    cube = Block("mm_cube", CoreType.AIC, gm_cube, [], list(b.tiles.values()), cube_body)

    v = Builder()
    half_rows = bm // 2
    r0 = m0 + SUBBLOCK_IDX * half_rows
    vr = sympy.Max(0, smin(half_rows, M - r0))
    vn = smin(bn, N - n0)
    v.tile("t", UB, F32, (half_rows, bn), (vr, vn))
    v.tile("o", UB, dtype, (half_rows, bn), (vr, vn))
    vec_body = [CrossCoreWaitFlag(Pipe.MTE2, 3),
                If(sympy.Gt(vr, 0), [
                    v("TLOAD", "t", GMRegion("ws", (r0, n0)), line=50),
                    SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
                    v("TRELU", "t", "t", line=51),
                    v("TMULS", "t", "t", 2.0, line=51),
                    v("TCVT", "o", "t", line=51),
                    SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
                    v("TSTORE", GMRegion("c", (r0, n0)), "o", line=52)])]
    gm_vec = [GMParam("ws", F32, (M, N)), GMParam("c", dtype, (M, N))]
    vec = Block("relu_vec", CoreType.AIV, gm_vec, [], list(v.tiles.values()), vec_body)
    return Kernel(f"matmul_relu_{dtype.name}", [cube, vec], loc=loc(39, "matmul_relu"))


# ---------------------------------------------------------------- torch references
def ref_softmax(x):
    return torch.softmax(x.float(), -1).to(x.dtype)


def ref_rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def ref_matmul(a, b):
    return a.float() @ b.float()


def tolerance(dtype):
    """(rtol, atol) per dtype: fp32 accumulation order differs from torch's; fp16/bf16 round once."""
    return {dtypes.float32: (1e-5, 1e-5), dtypes.float16: (1e-3, 1e-3), dtypes.bfloat16: (8e-3, 8e-3)}[dtype]


# ---------------------------------------------------------------- every instruction, once
# (op, tile sources, destination kind, scalar, attrs). Sources: a, b (any values), p (positive),
# nz (nonzero), m (a bool mask), at (a's transposed box), bc / nzc (the first column of b / nz as a
# [vr, 1] tile, what row-expand instructions read), br / nzr (their first row, [1, vc]). Destinations: same (dtype, valid
# [vr, vc]), row ([vr, 1]), col ([1, vc]), bool ([vr, vc] bool), idx_row / idx_col (int32).
FLOAT_OPS = [
    ("TADD", "ab", "same", None, {}), ("TSUB", "ab", "same", None, {}), ("TMUL", "ab", "same", None, {}),
    ("TDIV", "a,nz", "same", None, {}), ("TMAX", "ab", "same", None, {}), ("TMIN", "ab", "same", None, {}),
    ("TPOW", "p,b", "same", None, {}), ("TREM", "a,nz", "same", None, {}),
    ("TADDS", "a", "same", 0.75, {}), ("TSUBS", "a", "same", 0.75, {}), ("TMULS", "a", "same", -1.25, {}),
    ("TDIVS", "a", "same", 3.0, {}), ("TMAXS", "a", "same", 0.1, {}), ("TMINS", "a", "same", 0.1, {}),
    ("TRSUBS", "a", "same", 0.75, {}), ("TRDIVS", "nz", "same", 3.0, {}), ("TPOWS", "p", "same", 1.5, {}),
    ("TRPOWS", "a", "same", 1.5, {}),
    ("TABS", "a", "same", None, {}), ("TNEG", "a", "same", None, {}), ("TRELU", "a", "same", None, {}),
    ("TMOV_V", "a", "same", None, {}), ("TEXP", "a", "same", None, {}), ("TLOG", "p", "same", None, {}),
    ("TSQRT", "p", "same", None, {}), ("TRSQRT", "p", "same", None, {}), ("TRECIP", "nz", "same", None, {}),
    ("TSIN", "a", "same", None, {}), ("TCOS", "a", "same", None, {}), ("TTANH", "a", "same", None, {}),
    ("TSIGMOID", "a", "same", None, {}), ("TERF", "a", "same", None, {}), ("TLOG1P", "p", "same", None, {}),
    ("TEXPM1", "a", "same", None, {}), ("TFLOOR", "a", "same", None, {}), ("TCEIL", "a", "same", None, {}),
    ("TROUND", "a", "same", None, {}), ("TSIGN", "a", "same", None, {}),
    ("TROWEXPANDADD", "a,bc", "same", None, {}), ("TROWEXPANDSUB", "a,bc", "same", None, {}),
    ("TROWEXPANDMUL", "a,bc", "same", None, {}), ("TROWEXPANDDIV", "a,nzc", "same", None, {}),
    ("TROWEXPANDMAX", "a,bc", "same", None, {}), ("TROWEXPANDMIN", "a,bc", "same", None, {}),
    ("TCOLEXPANDADD", "a,br", "same", None, {}), ("TCOLEXPANDSUB", "a,br", "same", None, {}),
    ("TCOLEXPANDMUL", "a,br", "same", None, {}), ("TCOLEXPANDDIV", "a,nzr", "same", None, {}),
    ("TCOLEXPANDMAX", "a,br", "same", None, {}), ("TCOLEXPANDMIN", "a,br", "same", None, {}),
    ("TROWEXPAND", "bc", "same", None, {}), ("TCOLEXPAND", "br", "same", None, {}),
    ("TEXPANDS", "", "same", 2.5, {}), ("TARANGE", "", "same", 3.0, {}), ("TARANGE", "", "same", -2.0, {"axis": 0}),
    ("TTRIL", "", "same", 1, {}), ("TTRIU", "", "same", -2, {}),
    ("TSEL", "m,a,b", "same", None, {}), ("TTRANS", "at", "same", None, {}),
    ("TROWCUMSUM", "a", "same", None, {}), ("TCOLCUMSUM", "a", "same", None, {}),
    ("TROWSUM", "a", "row", None, {}), ("TROWMAX", "a", "row", None, {}), ("TROWMIN", "a", "row", None, {}),
    ("TROWPROD", "p", "row", None, {}),
    ("TCOLSUM", "a", "col", None, {}), ("TCOLMAX", "a", "col", None, {}), ("TCOLMIN", "a", "col", None, {}),
    ("TCOLPROD", "p", "col", None, {}),
    ("TCMP", "ab", "bool", None, {"cmp": "lt"}), ("TCMP", "ab", "bool", None, {"cmp": "ge"}),
    ("TCMPS", "a", "bool", 0.25, {"cmp": "gt"}), ("TCMPS", "a", "bool", 0.25, {"cmp": "ne"}),
    ("TISFINITE", "a", "bool", None, {}),
    ("TROWARGMAX", "a", "idx_row", None, {}), ("TCOLARGMAX", "a", "idx_col", None, {}),
]

INT_OPS = [
    ("TADD", "ab", "same", None, {}), ("TSUB", "ab", "same", None, {}), ("TMUL", "ab", "same", None, {}),
    ("TDIV", "a,nz", "same", None, {}), ("TMAX", "ab", "same", None, {}), ("TMIN", "ab", "same", None, {}),
    ("TREM", "a,nz", "same", None, {}), ("TAND", "ab", "same", None, {}), ("TOR", "ab", "same", None, {}),
    ("TNOT", "a", "same", None, {}), ("TABS", "a", "same", None, {}), ("TNEG", "a", "same", None, {}),
    ("TADDS", "a", "same", 7, {}), ("TMULS", "a", "same", -3, {}), ("TMAXS", "a", "same", 2, {}),
    ("TDIVS", "a", "same", 4, {}), ("TEXPANDS", "", "same", 5, {}), ("TSEL", "m,a,b", "same", None, {}),
    ("TROWCUMSUM", "a", "same", None, {}), ("TROWEXPANDADD", "a,bc", "same", None, {}),
    ("TROWSUM", "a", "row", None, {}), ("TCOLMAX", "a", "col", None, {}),
    ("TCMP", "ab", "bool", None, {"cmp": "eq"}), ("TCMPS", "a", "bool", 0, {"cmp": "le"}),
]

OP_TILE = 32
OP_VALID = (13, 29)
_OUTPUTS = {"same": "out", "row": "out_row", "col": "out_col", "bool": "out_bool", "idx_row": "out_idx",
            "idx_col": "out_idx"}


def op_table(dtype, skip=()):
    return [e for e in (INT_OPS if dtype == dtypes.int32 else FLOAT_OPS) if e[0] not in skip]


def _sources(spec):
    """'ab' -> [a, b]; 'a,nz' -> [a, nz]; a single multi-letter name stays whole."""
    if "," in spec:
        return spec.split(",")
    return [spec] if spec in ("nz", "at", "bc", "br", "nzc", "nzr") else list(spec)


def every_op(dtype, mask_dtype=dtypes.bool_, skip=()) -> tuple[Kernel, dict]:
    """One AIV kernel that applies every op of the table (but ``skip``) to small tiles with tail valid
    shapes and stores each result into its own slice of an output; masks (compare results, the select
    mask) are ``mask_dtype``. Returns the kernel and {output: number of slices}."""
    b = Builder()
    S = OP_TILE
    vr, vc = OP_VALID
    for name in ("a", "b", "p", "nz"):
        b.tile(name, UB, dtype, (S, S), (vr, vc))
    b.tile("m", UB, mask_dtype, (S, S), (vr, vc))
    b.tile("at", UB, dtype, (S, S), (vc, vr))
    for name, valid in (("bc", (vr, 1)), ("nzc", (vr, 1)), ("br", (1, vc)), ("nzr", (1, vc))):
        b.tile(name, UB, dtype, (S, S), valid)
    b.tile("d", UB, dtype, (S, S), (vr, vc))
    b.tile("drow", UB, dtype, (S, S), (vr, 1))
    b.tile("dcol", UB, dtype, (S, S), (1, vc))
    b.tile("dbool", UB, mask_dtype, (S, S), (vr, vc))
    b.tile("irow", UB, dtypes.int32, (S, S), (vr, 1))
    b.tile("icol", UB, dtypes.int32, (S, S), (1, vc))
    dst_of = {"same": "d", "row": "drow", "col": "dcol", "bool": "dbool", "idx_row": "irow", "idx_col": "icol"}
    source = {"at": "a", "bc": "b", "br": "b", "nzc": "nz", "nzr": "nz"}
    body = [b("TLOAD", n, GMRegion(source.get(n, n), (0, 0)), line=60, **({"trans": True} if n == "at" else {}))
            for n in ("a", "b", "p", "nz", "m", "at", "bc", "br", "nzc", "nzr")]
    body += [SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)]
    count = {}
    for op, srcs, kind, scalar, attrs in op_table(dtype, skip):
        dst = dst_of[kind]
        operands = [dst] + _sources(srcs) + ([scalar] if scalar is not None else [])
        out = _OUTPUTS[kind]
        k = count.get(out, 0)
        count[out] = k + 1
        body += [b(op, *operands, line=61, **attrs),
                 SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
                 b("TSTORE", GMRegion(out, (k, 0, 0)), dst, line=62),
                 SetFlag(Pipe.MTE3, Pipe.V, 0), WaitFlag(Pipe.MTE3, Pipe.V, 0)]
    gm = [GMParam(n, dtype, (S, S)) for n in ("a", "b", "p", "nz")] + [GMParam("m", mask_dtype, (S, S))]
    out_dtype = {"out": dtype, "out_row": dtype, "out_col": dtype, "out_bool": mask_dtype, "out_idx": dtypes.int32}
    gm += [GMParam(o, out_dtype[o], (n, S, S)) for o, n in count.items()]
    blk = Block("every_op", CoreType.AIV, gm, [], list(b.tiles.values()), body)
    name = f"every_op_{dtype.name}" + ("" if mask_dtype == dtypes.bool_ else f"_{mask_dtype.name}_masks")
    return Kernel(name, [blk], loc=loc(59, "every_op")), count


def every_op_inputs(dtype, seed=0, mask_dtype=dtypes.bool_):
    g = torch.Generator().manual_seed(seed)
    S = OP_TILE
    if dtype == dtypes.int32:
        a = torch.randint(-50, 50, (S, S), generator=g, dtype=torch.int32)
        b = torch.randint(-50, 50, (S, S), generator=g, dtype=torch.int32)
        p = torch.randint(1, 50, (S, S), generator=g, dtype=torch.int32)
        nz = p * torch.where(torch.rand(S, S, generator=g) < 0.5, -1, 1).to(torch.int32)
    else:
        t = dtype.torch_dtype
        a = (torch.randn(S, S, generator=g) * 2).to(t)
        b = (torch.randn(S, S, generator=g) * 2).to(t)
        p = (torch.rand(S, S, generator=g) * 3 + 0.1).to(t)
        nz = (p * torch.where(torch.rand(S, S, generator=g) < 0.5, -1.0, 1.0)).to(t)
        a[0, :4] = torch.tensor([0.5, 1.5, -2.5, 0.0]).to(t)     # rounding ties and a zero
    m = (torch.rand(S, S, generator=g) < 0.5).to(mask_dtype.torch_dtype)
    return {"a": a, "b": b, "p": p, "nz": nz, "m": m}


# ---------------------------------------------------------------- a kernel with scalar parameters
def scale_rows(dtype=F32, rows=8, cols=256) -> Kernel:
    """y[r0 : r0+8] = alpha * x[r0 : r0+8]: r0 (int) and alpha (real) are scalar parameters."""
    b = Builder()
    r0 = symbol("r0")
    alpha = sympy.Symbol("alpha", real=True)
    b.tile("t", UB, dtype, (rows, cols), (smin(rows, M - r0), cols))
    body = [b("TLOAD", "t", GMRegion("x", (r0, 0)), line=80),
            SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
            b("TMULS", "t", "t", alpha, line=81),
            SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
            b("TSTORE", GMRegion("y", (r0, 0)), "t", line=82)]
    gm = [GMParam("x", dtype, (M, cols)), GMParam("y", dtype, (M, cols))]
    return Kernel("scale_rows", [Block("scale_rows", CoreType.AIV, gm, [r0, alpha], list(b.tiles.values()), body)],
                  loc=loc(79, "scale_rows"))


# ---------------------------------------------------------------- kernels with planted bugs
def faulty(kind: str) -> Kernel:
    """A small AIV (or cube + vector) kernel with one bug the device would get wrong."""
    b = Builder()
    b.tile("t", UB, F32, (8, 64))
    load = b("TLOAD", "t", GMRegion("x", (0, 0)), line=70)
    store = b("TSTORE", GMRegion("y", (0, 0)), "t", line=72)
    sync_in = [SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0)]
    sync_out = [SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0)]
    compute = [b("TADDS", "t", "t", 1.0, line=71)]
    gm = [GMParam("x", F32, (M, 64)), GMParam("y", F32, (M, 64))]
    if kind == "missing_set":
        body = [load, WaitFlag(Pipe.MTE2, Pipe.V, 0)] + compute + sync_out + [store]
    elif kind == "leftover_set":
        body = [load] + sync_in + [SetFlag(Pipe.MTE2, Pipe.V, 1)] + compute + sync_out + [store]
    elif kind == "out_of_bounds":
        body = [b("TLOAD", "t", GMRegion("x", (M - 4, 0)), line=70)] + sync_in + compute + sync_out + [store]
    elif kind == "over_capacity":
        b.tiles["t"].addr = 196608 - 1024
        body = [load] + sync_in + compute + sync_out + [store]
    elif kind == "single_type_cross_flag":
        body = [load] + sync_in + compute + sync_out + [store, CrossCoreSetFlag(Pipe.MTE3, 1)]
    elif kind == "cross_core_deadlock":
        vec = Block("vec", CoreType.AIV, gm, [], list(b.tiles.values()),
                    [CrossCoreWaitFlag(Pipe.V, 5), load] + sync_in + compute + sync_out + [store])
        cube = Block("cube", CoreType.AIC, [], [], [], [CrossCoreSetFlag(Pipe.FIX, 4)])
        return Kernel(f"faulty_{kind}", [cube, vec], loc=loc(69, kind))
    else:
        raise ValueError(kind)
    return Kernel(f"faulty_{kind}", [Block("faulty", CoreType.AIV, gm, [], list(b.tiles.values()), body)],
                  loc=loc(69, kind))


FAULTS = ("missing_set", "leftover_set", "out_of_bounds", "over_capacity", "single_type_cross_flag",
          "cross_core_deadlock")

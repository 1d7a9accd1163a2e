"""Hand-built Block IR kernels for the tests and benchmarks of the simulator, the cpu backend and
codegen, with torch references for them. Nothing in pypto imports this module.

Two families, written the way the lowering writes kernels (sizes may be sympy symbols; tails get
valid shapes Min(tile, size - offset)):

- simulator kernels (``*_kernel``): a one-instruction kernel, n-buffered streaming vector kernels
  (add, copy, softmax rows, rms_norm rows, swiglu), a tiled cube matmul (GM -> L1 -> L0A/L0B -> L0C
  -> GM, K accumulation, double buffering) and a cube+vector matmul + relu linked by cross-core
  flags; sizes are the caller's (ints or symbols). bench_sim.py times them.
- codegen / cpu kernels over the size symbols M, N, K: vector_add, softmax_rows, rms_norm, matmul,
  matmul_relu, scale_rows (scalar parameters) and faulty (one planted bug each), with their torch
  references and tolerances. The kernel of every instruction is generated from the instruction table
  (pypto/testing/instructions.py).
"""
from __future__ import annotations

import sympy
import torch

from .. import dtypes
from ..dtypes import DataType, float16, float32
from ..errors import SourceLoc
from ..ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag,
                        For, GMParam, GMRegion, If, Kernel, SetFlag, TileDecl, WaitFlag, instr, walk)
from ..ir.isa import ISA, MemSpace, Pipe
from ..symbolic import ceildiv, index_symbol, smin, symbol

M, N, K = symbol("M"), symbol("N"), symbol("K")           # the cpu kernels' dynamic sizes
UB, L1, L0A, L0B, L0C = MemSpace.UB, MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C
V, MTE1, MTE2, MTE3, FIX = Pipe.V, Pipe.MTE1, Pipe.MTE2, Pipe.MTE3, Pipe.FIX   # (M is a size: the cube is Pipe.M)
F32 = dtypes.float32
ALIGN = 32                                                # bytes between tiles of one memory space


def loc(line: int, func: str = "kernel") -> SourceLoc:
    return SourceLoc("model.py", line, func)


class Builder:
    """Places tiles one after another per memory space (ALIGN-aligned) and builds instructions against them."""

    def __init__(self):
        self.tiles: dict[str, TileDecl] = {}
        self.top: dict = {}

    def decl(self, name, space, dtype, shape, valid=None) -> TileDecl:
        addr = self.top.get(space, 0)
        t = TileDecl(name, space, dtype, tuple(shape), addr, valid)
        self.top[space] = addr + -(-t.nbytes // ALIGN) * ALIGN
        self.tiles[name] = t
        return t

    def tile(self, name, space, dtype, shape, valid=None) -> str:
        return self.decl(name, space, dtype, shape, valid).name

    def __call__(self, op, *operands, line=None, **attrs):
        return instr(op, list(operands), self.tiles, attrs, loc(line) if line else None)


# ---------------------------------------------------------------------------------- one instruction
def single_op_kernel(op: str, src_dtypes, dst_dtype: DataType, shape, valid=None, scalar=None, attrs=None,
                     dst_shape=None, src_shapes=None) -> Kernel:
    """Load every source tile from GM (params in0, in1, ...), run ``op`` once, store dst to param ``out``.
    ``valid`` applies to every tile (reductions: the source's valid region; the dst gets the result's)."""
    alloc = Builder().decl
    rows, cols = shape
    dst_shape = tuple(dst_shape or shape)
    src_shapes = list(src_shapes or [shape] * len(src_dtypes))
    srcs = [alloc(f"s{k}", MemSpace.UB, dt, sh, valid=valid) for k, (dt, sh) in enumerate(zip(src_dtypes, src_shapes))]
    kind = ISA[op].kind
    dvalid = valid
    if op.startswith("TROW") and kind == "reduce":
        dvalid = (valid or shape)[0], 1
    elif op.startswith("TCOL") and kind == "reduce":
        dvalid = 1, (valid or shape)[1]
    elif op == "TTRANS":
        dvalid = (valid or shape)[::-1] if valid else None
    dst = alloc("d", MemSpace.UB, dst_dtype, dst_shape, valid=dvalid)
    tiles = {t.name: t for t in srcs + [dst]}
    body = [instr("TLOAD", [t.name, GMRegion(f"in{k}", (0, 0))], tiles, loc=loc(10 + k)) for k, t in enumerate(srcs)]
    body += [SetFlag(MTE2, V, 0), WaitFlag(MTE2, V, 0)] if srcs else []
    ops = ["d"] + [t.name for t in srcs] + ([scalar] if scalar is not None else [])
    body.append(instr(op, ops, tiles, attrs=attrs, loc=loc(20)))
    body += [SetFlag(V, MTE3, 0), WaitFlag(V, MTE3, 0),
             instr("TSTORE", [GMRegion("out", (0, 0)), "d"], tiles, loc=loc(30))]
    params = [GMParam(f"in{k}", t.dtype, t.shape) for k, t in enumerate(srcs)]
    params.append(GMParam("out", dst_dtype, dst_shape))
    blk = Block(f"one_{op.lower()}", CoreType.AIV, params, [], list(tiles.values()), body, loc=loc(1))
    return Kernel(blk.name, [blk])


# ---------------------------------------------------------------------------------- streaming vector kernels
def _stream_kernel(name, rows, cols, tile_rows, in_specs, out_specs, compute, scratch=(), buffers=2,
                   preload=(), fixed=(), setup=None):
    """An AIV kernel that walks row tiles [tile_rows, cols] of [rows, cols] tensors — tile t on core
    block_idx + k * block_num — with ``buffers``-deep buffering (the loop is unrolled by ``buffers``
    so every buffer has its own tiles and event ids).
    in_specs / out_specs: [(param, dtype)], tiles f"{param}{b}"; scratch: [(name, dtype, cols, valid_cols)]
    per buffer (valid rows = the buffer's); preload: [(param, dtype, (r, c))] loaded once into tile
    ``param`` before the loop, then ``setup(T)`` V statements (fixed: [(name, dtype, shape)] tiles they may
    fill); compute(b, T) -> the V statements of one tile."""
    alloc = Builder().decl
    n_tiles = ceildiv(rows, tile_rows)
    mine = ceildiv(n_tiles - BLOCK_IDX, BLOCK_NUM)          # tiles of this core
    j = index_symbol("j")
    tiles = [alloc(p, MemSpace.UB, dt, shape) for p, dt, shape in list(preload) + list(fixed)]
    for b in range(buffers):
        t_idx = BLOCK_IDX + (j + b) * BLOCK_NUM
        vrows = sympy.Min(tile_rows, rows - t_idx * tile_rows)
        for p, dt in in_specs + out_specs:
            tiles.append(alloc(f"{p}{b}", MemSpace.UB, dt, (tile_rows, cols), valid=(vrows, cols)))
        for sname, dt, scols, vcols in scratch:
            tiles.append(alloc(f"{sname}{b}", MemSpace.UB, dt, (tile_rows, scols), valid=(vrows, vcols or scols)))
    T = {t.name: t for t in tiles}
    body_loop = []
    for b in range(buffers):
        row0 = (BLOCK_IDX + (j + b) * BLOCK_NUM) * tile_rows
        stmts = [WaitFlag(V, MTE2, b)]
        stmts += [instr("TLOAD", [f"{p}{b}", GMRegion(p, (row0, 0))], T, loc=loc(11)) for p, _ in in_specs]
        stmts += [SetFlag(MTE2, V, b), WaitFlag(MTE2, V, b)]
        if out_specs:
            stmts.append(WaitFlag(MTE3, V, b))
        stmts += compute(b, T)
        stmts.append(SetFlag(V, MTE2, b))
        if out_specs:
            stmts += [SetFlag(V, MTE3, b), WaitFlag(V, MTE3, b)]
            stmts += [instr("TSTORE", [GMRegion(p, (row0, 0)), f"{p}{b}"], T, loc=loc(31)) for p, _ in out_specs]
            stmts.append(SetFlag(MTE3, V, b))
        body_loop.append(If(sympy.Lt(j + b, mine), stmts))
    pro = []
    if preload:
        pro += [instr("TLOAD", [p, GMRegion(p, (0,) * len(shape))], T, loc=loc(9)) for p, _, shape in preload]
        pro += [SetFlag(MTE2, V, buffers), WaitFlag(MTE2, V, buffers)] + (setup(T) if setup else [])
    pro += [SetFlag(V, MTE2, b) for b in range(buffers)]
    pro += [SetFlag(MTE3, V, b) for b in range(buffers)] if out_specs else []
    epi = [WaitFlag(V, MTE2, b) for b in range(buffers)]
    epi += [WaitFlag(MTE3, V, b) for b in range(buffers)] if out_specs else []
    body = pro + [For(j, 0, mine, buffers, body_loop)] + epi
    params = [GMParam(p, dt, shape) for p, dt, shape in preload]
    params += [GMParam(p, dt, (rows, cols)) for p, dt in in_specs + out_specs]
    blk = Block(name, CoreType.AIV, params, [], tiles, body, loc=loc(1))
    return Kernel(name, [blk])


def vector_add_kernel(rows, cols, tile_rows, dtype=float32, buffers=2) -> Kernel:
    def compute(b, T):
        return [instr("TADD", [f"z{b}", f"x{b}", f"y{b}"], T, loc=loc(20))]
    return _stream_kernel("vadd", rows, cols, tile_rows, [("x", dtype), ("y", dtype)], [("z", dtype)], compute,
                          buffers=buffers)


def copy_kernel(rows, cols, tile_rows, dtype=float16, buffers=2) -> Kernel:
    """GM -> UB -> GM through one V move per tile (the GM-bound kernel)."""
    def compute(b, T):
        return [instr("TMOV", [f"y{b}", f"x{b}"], T, loc=loc(20))]
    return _stream_kernel("copy", rows, cols, tile_rows, [("x", dtype)], [("y", dtype)], compute, buffers=buffers)


def softmax_kernel(rows, cols, tile_rows, dtype=float16, buffers=2) -> Kernel:
    """y = softmax(x, dim=-1) row tile by row tile, computed in fp32."""
    def compute(b, T):
        xf, m, s = f"xf{b}", f"m{b}", f"s{b}"
        return [instr("TCVT", [xf, f"x{b}"], T, loc=loc(21)),
                instr("TROWMAX", [m, xf], T, loc=loc(22)),
                instr("TROWEXPANDSUB", [xf, xf, m], T, loc=loc(23)),
                instr("TEXP", [xf, xf], T, loc=loc(24)),
                instr("TROWSUM", [s, xf], T, loc=loc(25)),
                instr("TROWEXPANDDIV", [xf, xf, s], T, loc=loc(26)),
                instr("TCVT", [f"y{b}", xf], T, loc=loc(27))]
    scratch = [("xf", float32, cols, None), ("m", float32, 8, 1), ("s", float32, 8, 1)]
    return _stream_kernel("softmax_rows", rows, cols, tile_rows, [("x", dtype)], [("y", dtype)], compute,
                          scratch, buffers)


def rms_norm_kernel(rows, cols, tile_rows, dtype=float16, eps=1e-6, buffers=2) -> Kernel:
    """y = x * rsqrt(mean(x^2) + eps) * w row tile by row tile, in fp32; w [1, cols] is loaded once."""
    def setup(T):
        return [instr("TCVT", ["wf", "w"], T, loc=loc(19))]

    def compute(b, T):
        xf, sq, r = f"xf{b}", f"sq{b}", f"r{b}"
        return [instr("TCVT", [xf, f"x{b}"], T, loc=loc(21)),
                instr("TMUL", [sq, xf, xf], T, loc=loc(22)),
                instr("TROWSUM", [r, sq], T, loc=loc(23)),
                instr("TMULS", [r, r, 1.0 / cols], T, loc=loc(24)),
                instr("TADDS", [r, r, eps], T, loc=loc(25)),
                instr("TRSQRT", [r, r], T, loc=loc(26)),
                instr("TROWEXPANDMUL", [xf, xf, r], T, loc=loc(27)),
                instr("TCOLEXPANDMUL", [xf, xf, "wf"], T, loc=loc(28)),
                instr("TCVT", [f"y{b}", xf], T, loc=loc(29))]
    scratch = [("xf", float32, cols, None), ("sq", float32, cols, None), ("r", float32, 8, 1)]
    return _stream_kernel("rms_norm_rows", rows, cols, tile_rows, [("x", dtype)], [("y", dtype)], compute,
                          scratch, buffers, preload=[("w", dtype, (1, cols))], fixed=[("wf", float32, (1, cols))],
                          setup=setup)


def swiglu_kernel(rows, cols, tile_rows, dtype=float16, buffers=2) -> Kernel:
    """g = silu(a) * b = a * sigmoid(a) * b row tile by row tile, in fp32 (the gated MLP's middle)."""
    def compute(b, T):
        af, bf = f"af{b}", f"bf{b}"
        return [instr("TCVT", [af, f"a{b}"], T, loc=loc(21)),
                instr("TCVT", [bf, f"b{b}"], T, loc=loc(22)),
                instr("TMUL", [bf, bf, af], T, loc=loc(23)),
                instr("TSIGMOID", [af, af], T, loc=loc(24)),
                instr("TMUL", [af, af, bf], T, loc=loc(25)),
                instr("TCVT", [f"g{b}", af], T, loc=loc(26))]
    scratch = [("af", float32, cols, None), ("bf", float32, cols, None)]
    return _stream_kernel("swiglu", rows, cols, tile_rows, [("a", dtype), ("b", dtype)], [("g", dtype)], compute,
                          scratch, buffers)


# ---------------------------------------------------------------------------------- cube
def matmul_kernel(m, n, k, tm=128, tn=128, tk=64, dtype=float16, out_dtype=float32, buffers=2,
                  name="matmul") -> Kernel:
    """C[m, n] = A[m, k] @ B[k, n] on the cube: output tiles [tm, tn] spread over block_idx, the K loop
    double-buffered through L1 and L0A/L0B, accumulation in L0C, FIX stores C (converting to out_dtype)."""
    alloc = Builder().decl
    tiles_n = ceildiv(n, tn)
    n_out = ceildiv(m, tm) * tiles_n
    mine = ceildiv(n_out - BLOCK_IDX, BLOCK_NUM)
    kt = ceildiv(k, tk)
    o, kk = index_symbol("o"), index_symbol("kk")
    t_idx = BLOCK_IDX + o * BLOCK_NUM
    m0 = sympy.floor(t_idx / tiles_n) * tm
    n0 = sympy.Mod(t_idx, tiles_n) * tn
    mv = sympy.Min(tm, m - m0)
    nv = sympy.Min(tn, n - n0)
    tiles = []
    for b in range(buffers):
        k0 = (kk + b) * tk
        kv = sympy.Min(tk, k - k0)
        tiles += [alloc(f"a1_{b}", MemSpace.L1, dtype, (tm, tk), valid=(mv, kv)),
                  alloc(f"b1_{b}", MemSpace.L1, dtype, (tk, tn), valid=(kv, nv)),
                  alloc(f"a0_{b}", MemSpace.L0A, dtype, (tm, tk), valid=(mv, kv)),
                  alloc(f"b0_{b}", MemSpace.L0B, dtype, (tk, tn), valid=(kv, nv))]
    tiles.append(alloc("c", MemSpace.L0C, float32, (tm, tn), valid=(mv, nv)))
    T = {t.name: t for t in tiles}
    kloop = []
    for b in range(buffers):
        k0 = (kk + b) * tk
        first = sympy.Eq(kk + b, 0)
        mm = [If(first, [instr("TMATMUL", ["c", f"a0_{b}", f"b0_{b}"], T, loc=loc(40))],
                 [instr("TMATMUL_ACC", ["c", f"a0_{b}", f"b0_{b}"], T, loc=loc(40))])]
        stmts = [WaitFlag(MTE1, MTE2, b),
                 instr("TLOAD", [f"a1_{b}", GMRegion("a", (m0, k0))], T, loc=loc(41)),
                 instr("TLOAD", [f"b1_{b}", GMRegion("b", (k0, n0))], T, loc=loc(42)),
                 SetFlag(MTE2, MTE1, b), WaitFlag(MTE2, MTE1, b),
                 WaitFlag(Pipe.M, MTE1, b),
                 instr("TMOV", [f"a0_{b}", f"a1_{b}"], T, loc=loc(43)),
                 instr("TMOV", [f"b0_{b}", f"b1_{b}"], T, loc=loc(44)),
                 SetFlag(MTE1, MTE2, b),
                 SetFlag(MTE1, Pipe.M, b), WaitFlag(MTE1, Pipe.M, b)]
        if b == 0:                   # the first matmul of a tile overwrites c: the previous store must be done
            stmts.append(If(first, [WaitFlag(FIX, Pipe.M, 0)]))
        stmts += mm + [SetFlag(Pipe.M, MTE1, b)]
        kloop.append(If(sympy.Lt(kk + b, kt), stmts))
    per_tile = [For(kk, 0, kt, buffers, kloop),
                SetFlag(Pipe.M, FIX, 0), WaitFlag(Pipe.M, FIX, 0),
                instr("TSTORE", [GMRegion("c_out", (m0, n0)), "c"], T, loc=loc(45)),
                SetFlag(FIX, Pipe.M, 0)]
    pro = [SetFlag(MTE1, MTE2, b) for b in range(buffers)] + [SetFlag(Pipe.M, MTE1, b) for b in range(buffers)]
    pro.append(SetFlag(FIX, Pipe.M, 0))
    epi = [WaitFlag(MTE1, MTE2, b) for b in range(buffers)] + [WaitFlag(Pipe.M, MTE1, b) for b in range(buffers)]
    epi.append(WaitFlag(FIX, Pipe.M, 0))
    body = pro + [For(o, 0, mine, 1, per_tile)] + epi
    params = [GMParam("a", dtype, (m, k)), GMParam("b", dtype, (k, n)), GMParam("c_out", out_dtype, (m, n))]
    blk = Block(name, CoreType.AIC, params, [], tiles, body, loc=loc(2))
    return Kernel(name, [blk])


def matmul_relu_kernel(m, n, k, tm=64, tn=64, tk=64, dtype=float16) -> Kernel:
    """out = relu(A @ B) with a cube block and a vector block per cluster: the cube writes each C tile
    to the GM workspace ``ws`` and signals both vector sub-blocks (cross-core flag 0); each sub-block
    takes half the rows, applies relu and stores ``out``, then signals back (flag 1) that ``ws`` is free."""
    cube = matmul_kernel(m, n, k, tm, tn, tk, dtype, float32, name="mm_part").blocks[0]
    # the cube stores into the workspace instead of the output, and talks to the vector sub-blocks
    for s in walk(cube.body):
        if getattr(s, "op", None) == "TSTORE":
            s.operands[0] = GMRegion("ws", s.operands[0].offsets)
    cube.gm_params[2] = GMParam("ws", float32, (m, n))
    loop = next(s for s in cube.body if isinstance(s, For))
    store_at = next(i for i, s in enumerate(loop.body) if getattr(s, "op", None) == "TSTORE")
    o = loop.var
    loop.body.insert(store_at, If(sympy.Gt(o, 0), [CrossCoreWaitFlag(FIX, 1)]))
    loop.body.insert(store_at + 2, CrossCoreSetFlag(FIX, 0))       # after the store drains
    mine = loop.stop
    cube.body.append(If(sympy.Gt(mine, 0), [CrossCoreWaitFlag(FIX, 1)]))

    alloc = Builder().decl
    half = tm // 2
    tiles_n = ceildiv(n, tn)
    t_idx = BLOCK_IDX + o * BLOCK_NUM
    m0 = sympy.floor(t_idx / tiles_n) * tm + SUBBLOCK_IDX * half
    n0 = sympy.Mod(t_idx, tiles_n) * tn
    valid = (sympy.Max(0, sympy.Min(half, m - m0)), sympy.Min(tn, n - n0))
    tiles = [alloc("w", MemSpace.UB, float32, (half, tn), valid=valid),
             alloc("r", MemSpace.UB, dtype, (half, tn), valid=valid)]
    T = {t.name: t for t in tiles}
    work = [WaitFlag(V, MTE2, 1),
            instr("TLOAD", ["w", GMRegion("ws", (m0, n0))], T, loc=loc(51)),
            SetFlag(MTE2, V, 0), WaitFlag(MTE2, V, 0),
            instr("TRELU", ["w", "w"], T, loc=loc(52)),
            WaitFlag(MTE3, V, 0),
            instr("TCVT", ["r", "w"], T, loc=loc(53)),
            SetFlag(V, MTE2, 1),
            SetFlag(V, MTE3, 0), WaitFlag(V, MTE3, 0),
            instr("TSTORE", [GMRegion("out", (m0, n0)), "r"], T, loc=loc(54)),
            SetFlag(MTE3, V, 0)]
    vbody = [SetFlag(MTE3, V, 0), SetFlag(V, MTE2, 1),
             For(o, 0, mine, 1, [CrossCoreWaitFlag(MTE2, 0),
                                 If(sympy.Gt(sympy.Min(half, m - m0), 0), work),
                                 CrossCoreSetFlag(MTE3, 1)]),
             WaitFlag(MTE3, V, 0), WaitFlag(V, MTE2, 1)]
    vec = Block("relu_part", CoreType.AIV, [GMParam("ws", float32, (m, n)), GMParam("out", dtype, (m, n))], [],
                tiles, vbody, loc=loc(3))
    return Kernel("matmul_relu", [cube, vec])


# ================================================================================== codegen / cpu kernels
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


def _cube_tile(dtype, bm, bn, bk):
    """The cube's part of one output tile: its tiles, the K loop and the drain up to the L0C result.
    -> (builder, tile row offset, tile column offset, statements)."""
    b = Builder()
    kk = index_symbol("kk")
    tiles_n = ceildiv(N, bn)
    m0 = sympy.floor(BLOCK_IDX / tiles_n) * bm
    n0 = sympy.Mod(BLOCK_IDX, tiles_n) * bn
    _matmul_tiles(b, dtype, bm, bn, bk, m0, n0, kk)
    body = [SetFlag(Pipe.MTE1, Pipe.MTE2, 0), SetFlag(Pipe.M, Pipe.MTE1, 0),
            _matmul_k_loop(b, kk, m0, n0, bk),
            WaitFlag(Pipe.MTE1, Pipe.MTE2, 0), WaitFlag(Pipe.M, Pipe.MTE1, 0),
            SetFlag(Pipe.M, Pipe.FIX, 0), WaitFlag(Pipe.M, Pipe.FIX, 0)]
    return b, m0, n0, body


def matmul(dtype, bm=64, bn=64, bk=32) -> Kernel:
    """c [M, N] fp32 = a [M, K] @ b [K, N] through L1 -> L0A / L0B -> L0C; one output tile per core."""
    b, m0, n0, body = _cube_tile(dtype, bm, bn, bk)
    body.append(b("TSTORE", GMRegion("c", (m0, n0)), "c0", line=45))
    gm = [GMParam("a", dtype, (M, K)), GMParam("b", dtype, (K, N)), GMParam("c", F32, (M, N))]
    return Kernel(f"matmul_{dtype.name}", [Block("matmul", CoreType.AIC, gm, [], list(b.tiles.values()), body)],
                  loc=loc(40, "matmul"))


def matmul_relu(dtype, bm=32, bn=64, bk=32) -> Kernel:
    """Cube + vector: the cube core computes a tile of a @ b into a GM workspace and signals; each
    vector sub-block takes half of the tile's rows, applies relu * 2 and stores c."""
    b, m0, n0, cube_body = _cube_tile(dtype, bm, bn, bk)
    cube_body += [b("TSTORE", GMRegion("ws", (m0, n0)), "c0", line=45), CrossCoreSetFlag(Pipe.FIX, 3)]
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

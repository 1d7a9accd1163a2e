"""Hand-built Block IR kernels (the way Tensor mode will lower them) for the simulator's tests and
benchmarks, and for other backends that want the same programs: a one-instruction kernel, an
n-buffered streaming vector kernel (add, softmax rows, rms_norm rows, copy), a tiled matmul on the
cube (GM -> L1 -> L0A/L0B -> L0C -> GM, K accumulation, double buffering) and a cube+vector kernel
linked by cross-core flags. Sizes may be sympy symbols (dynamic); tails get valid shapes.
"""
from __future__ import annotations

import sympy

from ...dtypes import DataType, float16, float32
from ...errors import SourceLoc
from ...ir.block import (BLOCK_IDX, BLOCK_NUM, SUBBLOCK_IDX, Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag,
                         For, GMParam, GMRegion, If, Kernel, SetFlag, TileDecl, WaitFlag, instr)
from ...ir.isa import ISA, MemSpace, Pipe

V, MTE2, MTE3, MTE1, M, FIX = Pipe.V, Pipe.MTE2, Pipe.MTE3, Pipe.MTE1, Pipe.M, Pipe.FIX
ALIGN = 32


def loc(line: int, file: str = "model.py") -> SourceLoc:
    return SourceLoc(file, line, "kernel")


class _Alloc:
    """Bump allocator of aligned addresses per memory space."""

    def __init__(self):
        self.next = {}

    def __call__(self, name, space, dtype, shape, valid=None):
        addr = self.next.get(space, 0)
        t = TileDecl(name, space, dtype, tuple(shape), addr=addr, valid=valid)
        self.next[space] = addr + -(-t.nbytes // ALIGN) * ALIGN
        return t


def _idx(name):
    return sympy.Symbol(name, integer=True, nonnegative=True)


def _ceil(a, b):
    return sympy.ceiling(sympy.sympify(a) / b)


# ---------------------------------------------------------------------------------- one instruction
def single_op_kernel(op: str, src_dtypes, dst_dtype: DataType, shape, valid=None, scalar=None, attrs=None,
                     dst_shape=None, src_shapes=None) -> Kernel:
    """Load every source tile from GM (params in0, in1, ...), run ``op`` once, store dst to param ``out``.
    ``valid`` applies to every tile (reductions: the source's valid region; the dst gets the result's)."""
    alloc = _Alloc()
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
    alloc = _Alloc()
    n_tiles = _ceil(rows, tile_rows)
    mine = _ceil(n_tiles - BLOCK_IDX, BLOCK_NUM)          # tiles of this core
    j = _idx("j")
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
    alloc = _Alloc()
    tiles_n = _ceil(n, tn)
    n_out = _ceil(m, tm) * tiles_n
    mine = _ceil(n_out - BLOCK_IDX, BLOCK_NUM)
    kt = _ceil(k, tk)
    o, kk = _idx("o"), _idx("kk")
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
                 WaitFlag(M, MTE1, b),
                 instr("TMOV", [f"a0_{b}", f"a1_{b}"], T, loc=loc(43)),
                 instr("TMOV", [f"b0_{b}", f"b1_{b}"], T, loc=loc(44)),
                 SetFlag(MTE1, MTE2, b),
                 SetFlag(MTE1, M, b), WaitFlag(MTE1, M, b)]
        if b == 0:                   # the first matmul of a tile overwrites c: the previous store must be done
            stmts.append(If(first, [WaitFlag(FIX, M, 0)]))
        stmts += mm + [SetFlag(M, MTE1, b)]
        kloop.append(If(sympy.Lt(kk + b, kt), stmts))
    per_tile = [For(kk, 0, kt, buffers, kloop),
                SetFlag(M, FIX, 0), WaitFlag(M, FIX, 0),
                instr("TSTORE", [GMRegion("c_out", (m0, n0)), "c"], T, loc=loc(45)),
                SetFlag(FIX, M, 0)]
    pro = [SetFlag(MTE1, MTE2, b) for b in range(buffers)] + [SetFlag(M, MTE1, b) for b in range(buffers)]
    pro.append(SetFlag(FIX, M, 0))
    epi = [WaitFlag(MTE1, MTE2, b) for b in range(buffers)] + [WaitFlag(M, MTE1, b) for b in range(buffers)]
    epi.append(WaitFlag(FIX, M, 0))
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
    for s in _walk_all(cube.body):
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

    alloc = _Alloc()
    half = tm // 2
    tiles_n = _ceil(n, tn)
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


def _walk_all(stmts):
    from ...ir.block import walk
    return walk(stmts)

"""The MoE block's unpermute and weighted sum as one prebuilt AIV kernel (a custom_kernel node):

    out[t, :] = sum_s  weights[t, s] * y_perm[rows[t, s], :]          fp32 [N, H]

For a tile of tokens and a chunk of columns, each slot s gathers its rows of y_perm by indexed DMA
(MGATHER, the row indices rows[t0:t0+T, s] loaded as an index column), converts them to fp32, scales
each row by its weight (TROWEXPANDMUL) and adds them into the accumulator, which is stored once. It
reads the N k routed rows once and writes N H fp32, where index_select then a weighted sum over k
writes and reads back the [N, k, H] gathered rows (~2 N k H bytes more; bench_moe measures both).
The row indices are checked by MGATHER as every row move's (pypto/runtime/sim/indexed.py).
"""
from __future__ import annotations

import sympy

from pypto import dtypes, symbolic as sym
from pypto.errors import user_location
from pypto.frontend import api as P
from pypto.ir.block import BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, If, Kernel, TileDecl, instr
from pypto.ir.isa import MemSpace
from pypto.ir.kernel_node import KernelBuild, KernelNode
from pypto.ir.tensor_graph import ValueInfo

TOKENS = 16                 # tokens per tile
COLS = 512                  # columns per chunk: the accumulator, the gathered rows and their fp32 copy in UB


class UnpermuteNode(KernelNode):
    level = "tile"

    def __init__(self, dtype, k: int, hidden: int, n, loc):
        self.dtype, self.k, self.hidden, self.n, self.loc = dtype, k, hidden, n, loc
        self.name = f"moe_unpermute_{dtype.name}_{k}_{hidden}"
        self.params, self.outputs = ("y_perm", "rows", "weights"), ("out",)
        self.fresh = {"out": ValueInfo((n, hidden), dtypes.float32, "out")}
        self._builds: dict = {}

    def reference(self, tensors: dict, scalars: dict) -> dict:
        y = tensors["y_perm"][tensors["rows"].long()].float()                      # [N, k, H]
        return {"out": (y * tensors["weights"].float().unsqueeze(-1)).sum(1)}

    def build(self, machine) -> KernelBuild:
        kernel = self._builds.get(machine.name)
        if kernel is None:
            kernel = self._builds[machine.name] = _kernel(self.dtype, self.k, self.hidden, machine, self.loc, self.name)
        tiles = sym.ceildiv(self.n, TOKENS)
        bd = max(1, min(tiles, machine.num_aiv)) if isinstance(tiles, int) else \
            sympy.Max(1, sympy.Min(tiles, machine.num_aiv))
        return KernelBuild(kernel, [], [], {}, bd)


def _kernel(dt, k: int, hidden: int, machine, loc, name: str) -> Kernel:
    from pypto.passes.memory import plan_memory
    from pypto.passes.pipe_sync import synchronize
    from pypto.passes.vector_barriers import insert_barriers
    f32, i32 = dtypes.float32, dtypes.int32
    R, n = sym.symbol("routed_rows"), sym.symbol("tokens")
    j = sym.index_symbol("j")
    mine = sym.ceildiv(sym.ceildiv(n, TOKENS) - BLOCK_IDX, BLOCK_NUM)
    t0 = (BLOCK_IDX + j * BLOCK_NUM) * TOKENS
    vr = sympy.Min(TOKENS, n - t0)
    chunk = min(COLS, hidden)
    tiles: dict = {}

    def decl(tname, dtype, cols, vcols):
        tiles[tname] = TileDecl(tname, MemSpace.UB, dtype, (TOKENS, cols), None, (vr, vcols))
        return tname

    def op(name, *operands, **attrs):
        return instr(name, list(operands), tiles, attrs, loc)

    body = []
    for c0 in range(0, hidden, chunk):
        cc = min(chunk, hidden - c0)
        acc, g, g32 = decl(f"acc_{c0}", f32, cc, cc), decl(f"g_{c0}", dt, cc, cc), decl(f"g32_{c0}", f32, cc, cc)
        body.append(op("TEXPANDS", acc, 0.0))
        for s in range(k):
            idx, w, w32 = decl(f"idx_{c0}_{s}", i32, 8, 1), decl(f"w_{c0}_{s}", dt, 16, 1), \
                decl(f"w32_{c0}_{s}", f32, 8, 1)
            body += [op("TLOAD", idx, GMRegion("rows", (t0, s))),
                     op("TLOAD", w, GMRegion("weights", (t0, s))),
                     op("MGATHER", g, GMRegion("y_perm", (0, c0)), idx, _lookup="the MoE unpermute"),
                     op("TCVT", w32, w), op("TCVT", g32, g),
                     op("TROWEXPANDMUL", g32, g32, w32),
                     op("TADD", acc, acc, g32)]
        body.append(op("TSTORE", GMRegion("out", (t0, c0)), acc))
    params = [GMParam("y_perm", dt, (R, hidden)), GMParam("rows", i32, (n, k)), GMParam("weights", dt, (n, k)),
              GMParam("out", f32, (n, hidden))]
    block = Block(name, CoreType.AIV, params, [], list(tiles.values()), [For(j, 0, mine, 1, body, loc=loc)], loc=loc)
    plan_memory(block, machine, None)
    synchronize(block, machine)
    insert_barriers(block)
    return Kernel(name, [block], loc=loc)


def unpermute(y_perm, rows, weights):
    """sum over slots s of weights[:, s] * y_perm[rows[:, s]] in fp32: y_perm [N k, H], rows [N, k] int32,
    weights [N, k] of y_perm's dtype (traced: one custom_kernel node)."""
    N, k = weights.shape[0], weights.shape[1]
    node = UnpermuteNode(y_perm.dtype, k, y_perm.shape[1], N, user_location())
    call = P.emit("custom_kernel", [y_perm, rows, weights], {"kernel": node, "scalars": {}})
    return P.emit("kernel_result", [call], {"index": 0})


"""Row gather / scatter along dim 0 by indexed DMA (MGATHER / MSCATTER, pypto/ir/isa.py), the row form of
``index_select(x, 0, idx)`` (and ``x[idx]``), ``index_copy(x, 0, idx, src)`` and a 1-D
``scatter(x, 0, idx, src)`` (canonicalize.py picks it; the other forms keep the one-hot compare).

    gather   out[i, :] = table[idx[i], :]          table [R, C], idx [n] -> out [n, C]
    scatter  x[idx[i], :] = src[i, :]              x [R, C] updated in place, src [n, C], idx [n]

Each is one prebuilt AIV kernel, a ``custom_kernel`` node of the graph (ir/kernel_node.py): the index rows
are cut into tiles of ``rows`` indices, tile t on core block_idx + k * block_num, two tiles in flight per
core; per tile one TLOAD of the indices [rows, 1] and per column chunk one MGATHER + TSTORE (gather) or
TLOAD + MSCATTER (scatter). The cost is linear in the rows moved, n * C, where the one-hot form is
n * R * C. Every index is checked where it is used (sim, cpu): one outside [0, R) is an error at the
user's line, and nothing outside the tensor is read or written. Duplicate scatter indices: the last row
of a tile wins (rows move in order); across tiles, which core writes last is not defined (as torch).
"""
from __future__ import annotations

import sympy
import torch

from .. import dtypes, symbolic as sym
from ..ir.block import BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, If, Kernel, TileDecl, instr
from ..ir.kernel_node import KernelBuild, KernelNode
from ..ir.tensor_graph import ValueInfo
from ..ir.isa import MemSpace

TILE_BYTES = 48 * 1024        # one rows tile; two per core in flight (UB: 192 KiB on a2a3)
MAX_ROWS = 512                # indices per tile
ROW_BYTES = 32                # a tile row is at least one 32-byte block


def _pad_cols(cols: int, itemsize: int) -> int:
    per = max(1, ROW_BYTES // itemsize)
    return -(-cols // per) * per


def tile_plan(cols: int, itemsize: int) -> tuple[int, int]:
    """(index rows per tile, columns per chunk) for rows of ``cols`` elements."""
    chunk = cols
    if _pad_cols(cols, itemsize) * itemsize > TILE_BYTES:
        chunk = max(1, (TILE_BYTES // itemsize) // (ROW_BYTES // itemsize or 1) * (ROW_BYTES // itemsize or 1))
    rows = max(1, min(MAX_ROWS, TILE_BYTES // (_pad_cols(chunk, itemsize) * itemsize)))
    return rows, chunk


class RowMoveNode(KernelNode):
    """The custom_kernel node of one row gather or scatter. Params: gather (table, idx, out) with ``out``
    written whole (``fresh``: not an input of the node); scatter (x, idx, src) with ``x`` read and written."""
    level = "tile"

    def __init__(self, kind: str, dtype, cols: int, n, lookup: str, loc):
        self.kind, self.dtype, self.cols, self.n, self.loc = kind, dtype, cols, n, loc
        self.lookup = lookup            # the user's op, named by an index error
        self.name = f"row_{kind}_{dtype.name}_{cols}"
        if kind == "gather":
            self.params, self.outputs = ("table", "idx"), ("out",)
            self.fresh = {"out": ValueInfo((n, cols), dtype, "out")}
        else:
            self.params, self.outputs = ("x", "idx", "src"), ("x",)
            self.fresh = {}
        self._builds: dict = {}

    def reference(self, tensors: dict, scalars: dict) -> dict:
        idx = tensors["idx"].reshape(-1).long()
        if self.kind == "gather":
            return {"out": torch.index_select(tensors["table"], 0, idx)}
        x = tensors["x"].clone()
        x.index_copy_(0, idx, tensors["src"][:idx.numel()])
        return {"x": x}

    def build(self, machine) -> KernelBuild:
        kernel = self._builds.get(machine.name)
        if kernel is None:
            kernel = self._builds[machine.name] = row_kernel(self.kind, self.dtype, self.cols, machine, self.loc,
                                                             self.name, self.lookup)
        rows, _ = tile_plan(self.cols, self.dtype.itemsize)
        tiles = sym.ceildiv(self.n, rows)
        bd = tiles if isinstance(tiles, int) else sympy.Max(1, sympy.Min(tiles, machine.num_aiv))
        if isinstance(bd, int):
            bd = max(1, min(bd, machine.num_aiv))
        return KernelBuild(kernel, [], [], {}, bd)


def row_kernel(kind: str, dt, cols: int, machine, loc, name: str, lookup: str) -> Kernel:
    """The Block IR of a row gather / scatter of ``cols``-wide rows of dtype ``dt`` (addresses and flags
    planned by passes/memory.py and pipe_sync.py, as the Tensor-level kernels')."""
    from .memory import plan_memory
    from .pipe_sync import synchronize
    from .vector_barriers import insert_barriers
    rows, chunk = tile_plan(cols, dt.itemsize)
    R, n = sym.symbol("table_rows"), sym.symbol("index_rows")
    i32 = dtypes.int32
    j = sym.index_symbol("j")
    n_tiles = sym.ceildiv(n, rows)
    mine = sym.ceildiv(n_tiles - BLOCK_IDX, BLOCK_NUM)
    tiles: dict = {}

    def decl(tname, dtype, shape, valid):
        tiles[tname] = TileDecl(tname, MemSpace.UB, dtype, shape, None, valid)
        return tname

    body = []
    for b in range(2):
        t = BLOCK_IDX + (j + b) * BLOCK_NUM
        r0 = t * rows
        vr = sympy.Min(rows, n - r0)
        idx = decl(f"idx{b}", i32, (rows, _pad_cols(1, 4)), (vr, 1))
        stmts = [instr("TLOAD", [idx, GMRegion("idx", (r0, 0))], tiles, loc=loc)]
        for c0 in range(0, cols, chunk):
            cc = min(chunk, cols - c0)
            data = decl(f"rows{b}_{c0}", dt, (rows, _pad_cols(cc, dt.itemsize)), (vr, cc))
            if kind == "gather":
                stmts += [instr("MGATHER", [data, GMRegion("table", (0, c0)), idx], tiles, {"_lookup": lookup}, loc),
                          instr("TSTORE", [GMRegion("out", (r0, c0)), data], tiles, loc=loc)]
            else:
                stmts += [instr("TLOAD", [data, GMRegion("src", (r0, c0))], tiles, loc=loc),
                          instr("MSCATTER", [GMRegion("x", (0, c0)), data, idx], tiles, {"_lookup": lookup}, loc)]
        body.append(If(sympy.Lt(j + b, mine), stmts, loc=loc))
    if kind == "gather":
        params = [GMParam("table", dt, (R, cols)), GMParam("idx", i32, (n, 1)), GMParam("out", dt, (n, cols))]
    else:
        params = [GMParam("x", dt, (R, cols)), GMParam("idx", i32, (n, 1)), GMParam("src", dt, (n, cols))]
    block = Block(name, CoreType.AIV, params, [], list(tiles.values()), [For(j, 0, mine, 2, body, loc=loc)], loc=loc)
    plan_memory(block, machine, None)
    synchronize(block, machine)
    insert_barriers(block)
    return Kernel(name, [block], loc=loc, attrs={"decisions": {"row_move": f"{kind}: {rows} indices a tile, "
                                                                           f"{chunk} columns a chunk"}})


# ---------------------------------------------------------------------- the graph rewrites (canonicalize.py)
ROW_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32)


def _static(d) -> int | None:
    if isinstance(d, int):
        return d
    return int(d) if isinstance(d, sympy.Basic) and d.is_Integer else None


def _rows_view(x):
    """x as [rows, cols] (cols static), or None."""
    from ..frontend import api as P
    if x.ndim == 1:
        return P.reshape(x, (x.shape[0], 1))
    cols = 1
    for d in x.shape[1:]:
        s = _static(d)
        if s is None:
            return None
        cols *= s
    return x if x.ndim == 2 else P.reshape(x, (x.shape[0], cols))


def _index_column(idx):
    from ..frontend import api as P
    if idx.dtype != dtypes.int32:
        idx = P.cast(idx, dtypes.int32)
    return P.reshape(idx, (idx.shape[0], 1))


def row_form(g, nid) -> bool:
    """Whether node ``nid`` (index_select or scatter) becomes a row move: the conditions of gather_rows /
    scatter_rows on the node's input infos."""
    op, a = g.op(nid), g.node(nid)["attrs"]
    infos = [g.info(i) for i in g.node(nid)["inputs"]]
    if op == "index_select":
        x, idx = infos
        return a["dim"] == 0 and x.dtype in ROW_DTYPES and idx.rank == 1 and \
            (x.rank == 1 or all(_static(d) is not None for d in x.shape[1:]))
    if op == "scatter":
        return len(infos) == 3 and a.get("reduce") is None and a["dim"] == 0 and infos[0].rank == 1 and \
            infos[1].rank == 1 and infos[0].dtype in ROW_DTYPES
    if op == "index_copy":
        x, idx, _ = infos
        return a["dim"] == 0 and x.dtype in ROW_DTYPES and all(_static(d) is not None for d in x.shape[1:])
    return False


def gather_rows(g, nid, ins):
    """index_select(x, 0, idx) as a row gather, or None where the row form does not apply (another dim,
    a dtype the row move does not take, dynamic trailing dims)."""
    from ..frontend import api as P
    if not row_form(g, nid):
        return None
    x, idx = ins
    table = _rows_view(x)
    cols = _static(table.shape[1])
    node = RowMoveNode("gather", x.dtype, cols, idx.shape[0], g.op(nid), g.node(nid)["loc"])
    call = P.emit("custom_kernel", [table, _index_column(idx)], {"kernel": node, "scalars": {}})
    out = P.emit("kernel_result", [call], {"index": 0})
    return out if x.ndim == 2 else P.reshape(out, (idx.shape[0],) + tuple(x.shape[1:]))


def scatter_rows(g, nid, ins):
    """index_copy(x, 0, idx, src) (x[idx[i]] = src[i], whole rows) or a 1-D scatter(x, 0, idx, src) without
    reduce (the same for one-element rows) as a row scatter, or None."""
    from ..frontend import api as P
    if not row_form(g, nid):
        return None
    x, idx, src = ins
    n = idx.shape[0]
    if x.ndim == 1 and tuple(src.shape) != (n,):
        src = P.view(src, (n,), (0,))             # scatter: the leading part of a longer src
    table, rows = _rows_view(x), _rows_view(src)
    node = RowMoveNode("scatter", x.dtype, _static(table.shape[1]), n, g.op(nid), g.node(nid)["loc"])
    call = P.emit("custom_kernel", [table, _index_column(idx), rows], {"kernel": node, "scalars": {}})
    out = P.emit("kernel_result", [call], {"index": 0})
    return out if x.ndim == 2 else P.reshape(out, tuple(x.shape))

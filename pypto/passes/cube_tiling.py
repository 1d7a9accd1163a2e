"""Tiling of a matmul: one cube TileProgram (and, for split-K, a vector program that adds the parts).

Axes: batch dims (grid), M and N (parallel: one L0C tile [mt, nt] per step of the tile loop) and
K (sequential, steps of kt accumulated in L0C). Per K step: TLOAD A [mt, kt] and B [kt, nt] from
GM into L1 (MTE2; a transposed operand is read with a transposing load), TMOV them into L0A/L0B
(MTE1), TMATMUL on the first step and TMATMUL_ACC after (M). After the loop the fp32 L0C tile is
stored to GM, converted to the output dtype on the way (FIX). The K loop is double-buffered (two
sets of L1/L0A/L0B tiles), so the loads of step k+1 overlap the matmul of step k.

Split-K: when the M x N tiles are too few to occupy the cube cores and K is long, K is cut into S
chunks run on different cores (a grid axis); each writes an fp32 partial [S, ..., M, N] and a small
vector program sums the parts and converts to the output dtype.

Masks known at compile time (static_masks.py): when A is zero outside an affine index mask (a causal
softmax's P, tril/triu), each M tile's K loop runs over the key tiles its rows can keep only; when
nothing reads this matmul's output outside such a mask (QK^T feeding the select), an output tile with
no kept element runs no K step; the vector program making such an A (the softmax) computes and stores
the columns the K window reads only (narrow_a_producer, called by tiling.py).
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from .. import dtypes, symbolic as sym
from ..ir.isa import MemSpace
from ..ir.tensor_graph import TensorGraph, ValueInfo
from ..ir.tile_graph import GMTile, TileAxis, TileOp, TileParam, TileProgram, TileValue
from . import static_masks, storage as st
from .iterspace import is_one as _is_one
from .tile_choice import cube_tiles
from .vector_tiling import NeedsCopy


def _operand(acc: st.Access, rank_batch: int, row_dim: int, col_dim: int):
    """(trans, leading value dims) of a matmul operand read through ``acc``: its value dims
    (batch..., row, col) must map to the buffer's last two dims (either order), batch dims to leading ones."""
    vd = acc.vdims
    r, c = vd[row_dim], vd[col_dim]
    nb = len(acc.shape)
    if r is None or c is None:
        return None
    if (r, c) == (nb - 2, nb - 1):
        return False
    if (r, c) == (nb - 1, nb - 2):
        return True
    return None


def matmul_program(g, n, storage, out_acc, scope, name):
    node = g.node(n)
    a_src, b_src = node["inputs"]
    attrs = node["attrs"]
    a_info, b_info, out = g.info(a_src), g.info(b_src), g.info(n)
    a_acc, b_acc = storage[a_src], storage[b_src]
    a_trans, b_trans = bool(attrs.get("a_trans")), bool(attrs.get("b_trans"))
    ra, rb = len(a_info.shape), len(b_info.shape)
    # value dims of a: (..., M, K) or (..., K, M) with a_trans
    a_row, a_col = (ra - 1, ra - 2) if a_trans else (ra - 2, ra - 1)
    b_row, b_col = (rb - 1, rb - 2) if b_trans else (rb - 2, rb - 1)
    ta = _operand(a_acc, ra - 2, a_row, a_col)
    tb = _operand(b_acc, rb - 2, b_row, b_col)
    if ta is None or tb is None:
        # a strided view (rows and columns not the last two dims of its buffer): the driver copies it
        # to a contiguous workspace and asks again
        raise NeedsCopy(a_src if ta is None else b_src)
    M, N = out.shape[-2], out.shape[-1]
    K = a_info.shape[a_col]
    batch = out.shape[:-2]
    spec = scope.machine
    item = a_info.dtype.itemsize
    acc_dt = dtypes.int32 if not a_info.dtype.is_floating else dtypes.float32
    (mt, nt, kt, splits), k_window, skip = _tiles_and_windows(g, n, M, N, K, scope)
    if splits > 1:
        return _split_k(g, n, storage, out_acc, scope, name, splits, (mt, nt, kt), k_window)
    window = skip or k_window
    return _build(name, a_acc, b_acc, (ta, a_row, a_col), (tb, b_row, b_col), a_info, b_info, out, out_acc,
                  batch, M, N, K, (mt, nt, kt), acc_dt, 1, scope, node, out.dtype, window)


def _k_window(g, a_src, M, K, mt, kt):
    """When A is zero outside a compile-time mask (static_masks), the K steps a row block of A can have
    non-zero columns in: a function of the M tile index giving (first K, K length), whole K tiles, at least
    one step (a block whose columns are all masked computes one tile of zeros); the N tile index is not
    used (_skip_ignored's window uses it). None: the whole K."""
    mask = static_masks.zero_mask(g, a_src)
    if mask is None or not mask.usable_for_ranges():
        return None
    last_tile = sym.ceildiv(K, kt) - 1

    def window(m, n_index=None):
        lo, hi = mask.col_range(m * mt, sympy.Min(M, (m + 1) * mt) - 1)
        first = 0 if lo is None else sympy.Max(0, sympy.Min(sympy.floor(lo / kt), last_tile)) * kt
        end = K if hi is None else sympy.Min(K, hi + 1)
        return sym.simplify(first), sym.simplify(sympy.Max(first + 1, end) - first)
    return window


def _tiles_and_windows(g, n, M, N, K, scope):
    """The one tile choice of matmul ``n`` ((mt, nt, kt, splits), cube_tiles) with its static-mask windows:
    the K window of a masked A (_k_window; None for a transposed A or without static masks) and, unsplit,
    the window of output tiles nothing reads (_skip_ignored). matmul_program lowers by it; a_columns_read
    tells A's producer what it reads by the same choice."""
    node = g.node(n)
    a_src = node["inputs"][0]
    batch = tuple(g.info(n).shape[:-2])
    if node["attrs"].get("row_chunks"):        # one chunk of row_chunks.py's loop: the tiles of the whole
        batch += (node["attrs"]["row_chunks"],)
    tiles = cube_tiles(M, N, K, batch, g.info(a_src).dtype, scope.machine, node["attrs"].get("cube_tile"),
                       node["loc"])
    mt, nt, kt, splits = tiles
    if not scope.static_masks:
        return tiles, None, None
    k_window = None if node["attrs"].get("a_trans") else _k_window(g, a_src, M, K, mt, kt)
    skip = _skip_ignored(g, n, M, N, K, mt, nt) if splits == 1 else None
    return tiles, k_window, skip


def a_columns_read(g, n, scope):
    """(mt, end) when matmul ``n`` reads, in its M tile m, only A's columns below ``end(m)`` (its K window,
    _k_window); None when it may read every column. The same tile choice as matmul_program."""
    node = g.node(n)
    attrs = node["attrs"]
    if not scope.static_masks or attrs.get("a_trans"):
        return None
    out = g.info(n)
    M, N, K = out.shape[-2], out.shape[-1], g.info(node["inputs"][0]).shape[-1]
    (mt, _, _, splits), window, skip = _tiles_and_windows(g, n, M, N, K, scope)
    if splits > 1 or window is None or skip is not None:
        return None

    def end(m):
        first, length = window(m)
        return sym.simplify(first + length)
    return mt, end


def narrow_a_producer(g, stores, prog, scope):
    """A vector program whose one stored value is only the A operand of a matmul with a K window, one whole
    row per column tile: its row tiles compute and store the columns that matmul reads only (valid column
    extents a function of the row tile index). The columns dropped are masked in every row of the tile, so
    the row reductions over the kept ones are exact; the matmul never reads the ones left unwritten."""
    if len(stores) != 1 or prog.kind != "vector":
        return prog
    (p,) = stores
    users = g.users(p)
    if len(users) != 1 or g.op(users[0]) != "matmul" or g.node(users[0])["inputs"][0] != p \
            or p in g.output_nodes():
        return prog
    reads = a_columns_read(g, users[0], scope)
    shape = g.info(p).shape
    if reads is None or len(prog.axes) != len(shape):
        return prog
    mt, end = reads
    rows, cols = prog.axes[-2], prog.axes[-1]
    S = shape[-1]
    if not (isinstance(S, int) and cols.size == S and cols.tile == S and sym.equal(rows.size, shape[-2])
            and isinstance(rows.tile, int) and mt % rows.tile == 0):
        return prog
    valid_cols = end(sym.floordiv(rows.index, mt // rows.tile))
    tiles = {k: (replace(t, valid=(t.valid[0], valid_cols)) if t.phase != "setup" and t.valid[-1] == S else t)
             for k, t in prog.tiles.items()}
    return replace(prog, tiles=tiles)


def _skip_ignored(g, n, M, N, K, mt, nt):
    """When no result reads the elements of this matmul's output outside a compile-time mask
    (static_masks.ignored_mask), an output tile holding none of the kept elements runs no K step: its L0C
    tile is stored as it is, and the select after it puts the fill value there. A K window as _k_window's."""
    mask = static_masks.ignored_mask(g, n)
    if mask is None or not mask.usable_for_ranges():
        return None

    def window(m, n_index):
        lo, hi = mask.col_range(m * mt, sympy.Min(M, (m + 1) * mt) - 1)
        live = [sympy.Integer(1)]
        if hi is not None:
            live.append(sympy.Max(0, hi - n_index * nt + 1))
        if lo is not None:
            live.append(sympy.Max(0, sympy.Min(N, (n_index + 1) * nt) - lo))
        return 0, sym.simplify(K * sympy.Min(*live))
    return window


def _build(name, a_acc, b_acc, a_desc, b_desc, a_info, b_info, out, out_acc, batch, M, N, K, tiles, acc_dt,
           splits, scope, node, store_dtype, k_window=None):
    mt, nt, kt = tiles
    loc = node["loc"]
    axes = []
    lead = []                 # leading dims of the output buffer, in order
    if splits > 1:
        kc = -(-(-(-K // splits)) // kt) * kt
        s_axis = TileAxis("s", -(-K // kc), 1)
        axes.append(s_axis)
        lead.append(s_axis)
    batch_axes = [TileAxis(f"b{k}", d, 1) for k, d in enumerate(batch)]
    axes += batch_axes
    lead += batch_axes
    m_axis, n_axis = TileAxis("m", M, mt), TileAxis("n", N, nt)
    axes += [m_axis, n_axis]
    if splits > 1 and k_window is not None:
        # the chunk's part of the K window; a chunk outside it runs one step over one masked (zero) column,
        # so its part is 0
        start, end = s_axis.index * kc, sympy.Min(K, (s_axis.index + 1) * kc)
        first, length = k_window(m_axis.index)
        k0 = sym.simplify(sympy.Min(sympy.Max(start, first), end - 1))
        k_len = sym.simplify(sympy.Max(1, sympy.Min(end, first + length) - k0))
        k_axis = TileAxis("k", k_len, kt, "sequential")
    elif splits > 1:
        k_len = sympy.Min(kc, K - s_axis.index * kc)
        k_axis = TileAxis("k", k_len, kt, "sequential")
        k0 = s_axis.index * kc
    elif k_window is not None:
        k0, k_len = k_window(m_axis.index, n_axis.index)
        k_axis = TileAxis("k", k_len, kt, "sequential")
    else:
        k_len = K
        k_axis = TileAxis("k", K, kt, "sequential")
        k0 = 0
    axes.append(k_axis)

    def valid(a: TileAxis, size):
        if isinstance(size, int) and size % a.tile == 0:
            return a.tile
        if isinstance(size, int) and size <= a.tile:
            return size
        return sympy.Min(a.tile, size - a.index * a.tile)
    vm, vn, vk = valid(m_axis, M), valid(n_axis, N), valid(k_axis, k_len)
    tiles_ = {
        "a1": TileValue("a1", MemSpace.L1, a_info.dtype, (mt, kt), (vm, vk), "step"),
        "b1": TileValue("b1", MemSpace.L1, b_info.dtype, (kt, nt), (vk, vn), "step"),
        "a0": TileValue("a0", MemSpace.L0A, a_info.dtype, (mt, kt), (vm, vk), "step"),
        "b0": TileValue("b0", MemSpace.L0B, b_info.dtype, (kt, nt), (vk, vn), "step"),
        "c0": TileValue("c0", MemSpace.L0C, acc_dt, (mt, nt), (vm, vn), "pre"),
    }
    params = []

    def param(acc, mode, dtype):
        pname = f"{mode}{sum(1 for p in params if p.mode == mode)}"
        params.append(TileParam(pname, acc.buffer, dtype, tuple(acc.shape), mode,
                                [(acc.buffer, tuple(acc.offsets), tuple(acc.extents))]))
        return pname

    koff = k0 + k_axis.index * kt
    ops = []
    for tile, acc, (trans, r_dim, c_dim), info, r_off, c_off in (
            ("a1", a_acc, a_desc, a_info, m_axis.index * mt, koff),
            ("b1", b_acc, b_desc, b_info, koff, n_axis.index * nt)):
        pname = param(acc, "in", info.dtype)
        offs = list(acc.offsets)
        nb = len(acc.shape)
        for j, v in enumerate(acc.vdims):
            if v is None or j in (r_dim, c_dim):
                continue
            # a batch dim of the operand: aligned to the right of the output's batch dims
            # (a size-1 dim broadcast against a longer output batch dim stays at its one index)
            bj = j - (len(acc.vdims) - 2) + len(batch)
            if 0 <= bj < len(batch) and not (_is_one(info.shape[j]) and not _is_one(batch[bj])):
                offs[v] = offs[v] + batch_axes[bj].index
        r_buf, c_buf = (nb - 1, nb - 2) if trans else (nb - 2, nb - 1)
        offs[r_buf] = offs[r_buf] + r_off
        offs[c_buf] = offs[c_buf] + c_off
        attrs = {"trans": True} if trans else {}
        ops.append(TileOp("TLOAD", [tile, GMTile(pname, tuple(sym.simplify(o) if not isinstance(o, int) else o
                                                                for o in offs))], "step", attrs, loc))
    ops.append(TileOp("TMOV", ["a0", "a1"], "step", {}, loc))
    ops.append(TileOp("TMOV", ["b0", "b1"], "step", {}, loc))
    ops.append(TileOp("TMATMUL", ["c0", "a0", "b0"], "step", {}, loc, sympy.Eq(k_axis.index, 0),
                      [TileOp("TMATMUL_ACC", ["c0", "a0", "b0"], "step", {}, loc)]))
    oname = param(out_acc, "out", store_dtype)
    ooffs = list(out_acc.offsets)
    nbo = len(out_acc.shape)
    for j, a in enumerate(lead):
        ooffs[nbo - 2 - len(lead) + j] = ooffs[nbo - 2 - len(lead) + j] + a.index
    ooffs[nbo - 2] = ooffs[nbo - 2] + m_axis.index * mt
    ooffs[nbo - 1] = ooffs[nbo - 1] + n_axis.index * nt
    ops.append(TileOp("TSTORE", [GMTile(oname, tuple(sym.simplify(o) if not isinstance(o, int) else o
                                                     for o in ooffs)), "c0"], "post", {}, loc))
    return TileProgram(name, "matmul", axes, params, tiles_, ops, {}, [], {"tiles": (mt, nt, kt)}, loc)


def _split_k(g, n, storage, out_acc, scope, name, splits, tiles, k_window=None):
    """Partial products over K chunks into fp32 [S, ..., M, N], then a vector sum over S."""
    from .fusion import plan_fusion
    from .vector_tiling import VectorTiler
    node = g.node(n)
    out = g.info(n)
    acc_dt = dtypes.float32 if out.dtype.is_floating else dtypes.int32
    ws = scope.add_buffer(f"ws{n}_parts", (splits, *out.shape), acc_dt, "workspace")
    ws_acc = st.full_access(ws)
    a_src, b_src = node["inputs"]
    attrs = node["attrs"]
    a_info, b_info = g.info(a_src), g.info(b_src)
    ra, rb = len(a_info.shape), len(b_info.shape)
    a_trans, b_trans = bool(attrs.get("a_trans")), bool(attrs.get("b_trans"))
    a_row, a_col = (ra - 1, ra - 2) if a_trans else (ra - 2, ra - 1)
    b_row, b_col = (rb - 1, rb - 2) if b_trans else (rb - 2, rb - 1)
    ta = _operand(storage[a_src], ra - 2, a_row, a_col)
    tb = _operand(storage[b_src], rb - 2, b_row, b_col)
    M, N, K = out.shape[-2], out.shape[-1], a_info.shape[a_col]
    cube = _build(name, storage[a_src], storage[b_src], (ta, a_row, a_col), (tb, b_row, b_col), a_info, b_info,
                  out, ws_acc, out.shape[:-2], M, N, K, tiles, acc_dt, splits, scope, node, acc_dt, k_window)
    # the vector sum over the parts
    mini = TensorGraph(f"{name}_sum")
    src = mini.add_input(ValueInfo((splits, *out.shape), acc_dt, "parts"), node["loc"])
    s = mini.add_node("sum", [src], {"dims": (0,), "keepdim": False}, ValueInfo(out.shape, acc_dt), node["loc"])
    last = s
    if out.dtype != acc_dt:
        last = mini.add_node("cast", [s], {"dtype": out.dtype}, ValueInfo(out.shape, out.dtype), node["loc"])
    plan = plan_fusion(mini, scope.machine)
    grp = plan.groups[plan.group_of[last]]
    vec = VectorTiler(mini, grp, plan, {src: ws_acc}, {last: out_acc}, scope.view, scope.machine,
                      scope.unique(f"{name}_sum")).build()
    return [cube, vec]

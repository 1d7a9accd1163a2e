"""The tile chooser: tile sizes from hints, otherwise the candidate with the lowest estimated time
among those whose working set fits the on-chip buffer (double-buffered).

Vector groups: the working set is estimated from the group's values (dtype, and whether each runs
along the row and col axes) with a linear scan of their live ranges; the time of a candidate is
tiles-per-core x (per-tile overhead + max(vector cycles, load/store cycles)), with the machine's
vector bytes/cycle, per-instruction issue cost and MTE bandwidth. Sizes unknown at compile time
count as ``ASSUMED_DYNAMIC``. Whole axes (reductions kept in one tile) take their full size; grid
axes take 1. A hint (``set_vec_tile_shapes``) maps onto the axes through the hinted op's dims.
"""
from __future__ import annotations

import math

from .. import symbolic as sym
from ..errors import TilingError

ASSUMED_DYNAMIC = 4096
TILE_OVERHEAD_CYCLES = 160         # scalar loop + flags per tile
FILL = 0.85                        # share of the buffer the estimate may use (alignment, temps)
MAX_COLS_BYTES = 32768             # a row of one tile: long enough to amortise instruction issue
ROW_BURST_BYTES = 64               # what one more row of a GM box costs the MTE, in bytes moved


def _est(size) -> int:
    """A size for the estimates: each dynamic symbol of it counts as ``ASSUMED_DYNAMIC`` (a flattened
    [2048 * T] is 2048x a lone T: counting the whole product as one assumed size chose 128-element
    tiles, one per core)."""
    if isinstance(size, int):
        return size
    try:
        v = sym.evaluate(size, {s.name: ASSUMED_DYNAMIC for s in sym.free_symbols(size)})
    except Exception:  # noqa: BLE001 - an expression the evaluator cannot take: the plain assumption
        return ASSUMED_DYNAMIC
    return v if v >= 1 else ASSUMED_DYNAMIC


def _pow2_upto(n):
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _hinted_node(tiler):
    """(node, {Dim: hinted extent}) of the first op of the group that carries a vector hint."""
    g = tiler.g
    for n in tiler.group.nodes:
        hint = g.node(n)["attrs"].get("vec_tile")
        if not hint:
            continue
        sp = tiler.plan.spaces[n]
        ins = g.node(n)["inputs"]
        amap = sp.in_maps[0] if sp.reduces or sp.scans else sp.out_map
        if len(amap) != len(hint):
            if ins and len(sp.in_maps) and len(sp.in_maps[0]) == len(hint):
                amap = sp.in_maps[0]
            else:
                continue
        return n, {d.find(): h for d, h in zip(amap, hint) if d is not None}
    return None, {}


def hinted_dims(tiler) -> dict:
    return _hinted_node(tiler)[1]


def _hint_tiles(tiler, sizes):
    """Per-axis tile sizes from the first hinted op of the group (None when no op is hinted)."""
    n, per_dim = _hinted_node(tiler)
    if n is None:
        return None, None
    per_axis = [1] * len(sizes)
    for d, h in per_dim.items():
        per_axis[tiler.canon.axis_of[d]] *= h
    # dims of an axis that the hint does not name run in full (a hint covers its op's dims only)
    for k, run in enumerate(tiler.canon.runs):
        for d in run:
            if d not in per_dim and isinstance(d.size, int):
                per_axis[k] *= d.size
    return per_axis, tiler.g.node(n)["loc"]


def ub_budget(tiler) -> int:
    """The UB bytes the chooser may plan for: the capacity, scaled down by the driver when the memory
    planner could not place the tiles of a first choice (the estimate is an estimate)."""
    return int(tiler.machine.capacity["UB"] * getattr(tiler, "ub_scale", 1.0))


def vector_tiles(tiler, sizes, modes) -> list:
    canon, spec = tiler.canon, tiler.machine
    n = len(sizes)
    if n == 0:
        return []
    tiles = [1] * n
    hinted, loc = _hint_tiles(tiler, sizes)
    fixed = {}
    for k in range(n):
        kind, role = canon.kind(k), canon.roles[k]
        if role == "whole":
            if not isinstance(sizes[k], int):
                raise TilingError(f"a reduction over a dynamic dim ({sizes[k]}) must be split, not kept whole")
            fixed[k] = sizes[k]
        elif kind == "grid":
            fixed[k] = 1
    if modes & {"rows1", "point", "trans_rows1"} and canon.row is not None:
        fixed[canon.row] = 1
    if "point" in modes:
        fixed[canon.col] = 1
    if modes & {"trans", "trans_rows1"}:          # the transposing load needs its rows and columns aligned for both dtypes
        for k in (canon.col, canon.row):
            if k is not None and k not in fixed and isinstance(sizes[k], int) and sizes[k] > 16:
                fixed[k] = min(64 if getattr(tiler, "ub_scale", 1.0) >= 1 else 16, -(-sizes[k] // 16) * 16)
    if hinted is not None:
        for k in range(n):
            tiles[k] = fixed[k] if k in fixed and (canon.roles[k] == "whole" or canon.kind(k) == "grid"
                                                   or fixed[k] == 1) else max(1, hinted[k])
            if isinstance(sizes[k], int) and k not in fixed:
                tiles[k] = min(tiles[k], sizes[k])
        # the hint fits its own op; the fused group around it may hold more values: shrink what it may
        align = max(spec.alignment // max(tiler.g.info(m).dtype.itemsize for m in tiler.group.nodes), 1)
        while working_set(tiler, tiles) > ub_budget(tiler):
            movable = [k for k in range(n) if k not in fixed and tiles[k] > (align if k == canon.col else 1)]
            if not movable:
                raise TilingError(f"vector tile shape {list(tiles)} of this fused group needs about "
                                  f"{working_set(tiler, tiles)} bytes of UB with double buffering, over "
                                  f"{ub_budget(tiler)}", loc=loc)
            k = max(movable, key=lambda j: tiles[j])
            tiles[k] = max(tiles[k] // 2, align if k == canon.col else 1)
        return tiles
    return _auto(tiler, sizes, fixed)


def _candidates(size, fixed_value, align, limit):
    if fixed_value is not None:
        return [fixed_value]
    est = _est(size)
    cands = {c for c in _pow2_upto(min(limit, max(est, 1)))}
    if isinstance(size, int) and size <= limit:
        cands.add(size)
    if align > 1:
        cands = {c for c in cands if c % align == 0 or (isinstance(size, int) and c == size)} or {align}
    return sorted(cands)


def _auto(tiler, sizes, fixed) -> list:
    canon, spec = tiler.canon, tiler.machine
    n = len(sizes)
    col, row = canon.col, canon.row
    itemsize = max(tiler.g.info(m).dtype.itemsize for m in tiler.group.nodes)
    col_align = max(spec.alignment // itemsize, 1)
    col_cands = _candidates(sizes[col], fixed.get(col), col_align, MAX_COLS_BYTES // itemsize)
    row_cands = _candidates(sizes[row], fixed.get(row), 1, 4096) if row is not None else [1]
    best, best_t = None, math.inf
    ub = ub_budget(tiler)
    for tc in col_cands:
        for tr in row_cands:
            tiles = [fixed.get(k, 1) for k in range(n)]
            tiles[col] = tc
            if row is not None:
                tiles[row] = tr
            ws = working_set(tiler, tiles)
            if ws > ub * FILL and best is not None:
                continue
            t = _time(tiler, sizes, tiles)
            if ws > ub * FILL:
                t = math.inf if best is None and ws <= ub else t * 1e6
            if t < best_t or best is None:
                best, best_t = tiles, t
    if working_set(tiler, best) > ub:
        raise TilingError(f"no tile of this fused group fits the {ub}-byte UB "
                          f"(smallest needs {working_set(tiler, best)} bytes)",
                          loc=tiler.g.node(tiler.group.nodes[-1])["loc"])
    return best


def _values(tiler):
    """(element bytes, axes it runs along, first, last position) of every value of the group, by node
    order: inputs from their first to their last use, results from their node to their last use (to
    the end when stored), plus an fp32 temp for each fp16/bf16 op (its math runs in fp32)."""
    if getattr(tiler, "_values_cache", None) is not None:
        return tiler._values_cache
    g, canon = tiler.g, tiler.canon
    order = {n: i for i, n in enumerate(tiler.group.nodes)}
    last = {}
    for n in tiler.group.nodes:
        for src in g.node(n)["inputs"]:
            last[src] = order[n]
    vals, seen = [], set()
    for n in tiler.group.nodes:
        sp = tiler.plan.spaces[n]
        for k, src in enumerate(g.node(n)["inputs"]):
            if src in tiler.members or g.op(src) == "scalar" or src in seen:
                continue
            seen.add(src)
            acc = tiler.storage.get(src)
            axes = tiler.axes_of(sp.in_maps[k], acc) if acc is not None else set()
            vals.append((g.info(src).dtype.itemsize, axes, order[n], last.get(src, order[n])))
        axes = {canon.axis_of[d.find()] for d in sp.out_map if d is not None}
        end = max(last.get(n, order[n]), order[n]) if n not in tiler.stores else len(order)
        item = g.info(n).dtype.itemsize
        vals.append((item, axes, order[n], end))
        if item < 4 and g.op(n) not in ("cast", "full"):
            vals.append((4, {canon.axis_of[d.find()] for d in sp.dims}, order[n], order[n]))
    tiler._values_cache = vals
    return vals


def _bytes(item, axes, tiles, canon, alignment) -> int:
    rows = tiles[canon.row] if (canon.row is not None and canon.row in axes) else 1
    cols = tiles[canon.col] if canon.col in axes else 1
    per = max(alignment // item, 1)
    return rows * (-(-cols // per) * per) * item


def working_set(tiler, tiles) -> int:
    """Estimated UB bytes: loop-invariant values once, the peak of the per-tile values twice (ping-pong)."""
    canon, spec = tiler.canon, tiler.machine
    sizes = tiler_sizes(tiler)
    steps = len(tiler.group.nodes) + 1
    live = [0] * (steps + 1)
    setup = 0
    for item, axes, first, last in _values(tiler):
        nbytes = _bytes(item, axes, tiles, canon, spec.alignment)
        if not any(canon.roles[k] in ("par", "seq") and not _single(sizes[k], tiles[k]) for k in axes):
            setup += nbytes
            continue
        for i in range(first, min(last, steps - 1) + 1):
            live[i] += nbytes
    return setup + 2 * max(live)


def tiler_sizes(tiler):
    if getattr(tiler, "_sizes", None) is None:
        from .vector_tiling import _prod
        tiler._sizes = [_prod([d.size for d in run]) for run in tiler.canon.runs]
    return tiler._sizes


def _single(size, tile) -> bool:
    return isinstance(size, int) and size <= tile


def _time(tiler, sizes, tiles) -> float:
    """Estimated cycles: tiles per core x (per-tile overhead + max(vector work, GM transfers))."""
    spec, canon = tiler.machine, tiler.canon
    count = 1
    for size, t in zip(sizes, tiles):
        count *= -(-_est(size) // t)
    per_core = -(-count // spec.num_aiv)
    vbytes = spec.vector["bytes_per_cycle"]
    issue = spec.vector.get("issue_cycles", 8)
    mte = spec.memory.get("mte2_bytes_per_cycle", 128)
    vec = sum(issue + _bytes(max(item, 4), axes, tiles, canon, spec.alignment) / vbytes
              for item, axes, _, _ in _values(tiler))
    rows = tiles[canon.row] if canon.row is not None else 1
    moved = [tiler.g.info(n).dtype.itemsize for n in tiler.stores] + \
        [tiler.g.info(src).dtype.itemsize for _, _, src, _, acc in tiler.ext if acc is not None]
    # a GM box moves row by row: short rows pay a per-burst cost (wide tiles stream better)
    mem = sum(rows * (tiles[canon.col] * item + ROW_BURST_BYTES) / mte for item in moved)
    return per_core * (TILE_OVERHEAD_CYCLES + max(vec, mem))


# ---------------------------------------------------------------- cube
CUBE_STEP_OVERHEAD = 40          # flags and scalar work per K step
CUBE_M = (16, 32, 48, 64, 96, 128, 160, 192, 256)            # not only powers of two: a tile count that
CUBE_N = (16, 32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 512)   # matches the cores matters more
CUBE_K = (8, 16, 32, 64, 128, 256)


def _align_up(v, a):
    return -(-v // a) * a


def _cube_fits(mt, nt, kt, item, spec, double=True) -> bool:
    cap = spec.capacity
    d = 2 if double else 1
    return (d * mt * kt * item <= cap["L0A"] and d * kt * nt * item <= cap["L0B"] and mt * nt * 4 <= cap["L0C"]
            and d * (mt * kt + kt * nt) * item <= cap["L1"])


SPLIT_K = (1, 2, 3, 4, 6, 8)


def cube_time(M, N, K, nbatch, mt, nt, kt, item, out_item, spec, flops, splits=1) -> float:
    """Estimated cycles of a matmul cut into [mt, nt] output tiles and kt steps (K cut into ``splits``
    parts on different cores, plus the vector pass that adds the fp32 parts)."""
    cores = spec.num_aic
    m, n, k = _est(M), _est(N), _est(K)
    tiles = nbatch * -(-m // mt) * -(-n // nt) * splits
    steps = -(-(-(-k // splits)) // kt)
    rounds = -(-tiles // cores)
    active = min(tiles, cores)
    load = (mt * kt + kt * nt) * item
    mem = spec.memory
    l2_bw = mem.get("l2_bytes_per_s", mem["hbm_bytes_per_s"]) / (spec.clock_ghz * 1e9)
    step = max(2 * mt * nt * kt / flops, load / mem.get("mte2_bytes_per_cycle", 128),
               load / mem.get("mte1_bytes_per_cycle", 256), load * active / l2_bw) + CUBE_STEP_OVERHEAD
    store = mt * nt * (4 if splits > 1 else out_item) / mem.get("fix_bytes_per_cycle", 128) \
        + mem.get("gm_latency_cycles", 500)
    total = rounds * (steps * step + store)
    if splits > 1:        # the parts written, read back and added, and one more launch
        total += nbatch * m * n * (4 * splits * 2 + out_item) / spec.hbm_bytes_per_cycle \
            + spec.dispatch.get("task_dispatch_cycles", 1000) + mem.get("gm_latency_cycles", 500)
    return total


_CUBE_CACHE: dict = {}


def cube_tiles(M, N, K, batch, dtype, spec, hint, loc):
    """-> (mt, nt, kt, split_k parts) for a matmul [M, K] x [K, N] (with ``batch`` leading dims);
    remembered per shape, dtype and machine (the layers of a model repeat their matmuls)."""
    key = (M, N, K, tuple(batch), dtype.name, spec.name, repr(hint))
    if key not in _CUBE_CACHE:
        _CUBE_CACHE[key] = _cube_tiles(M, N, K, batch, dtype, spec, hint, loc)
    return _CUBE_CACHE[key]


def _cube_tiles(M, N, K, batch, dtype, spec, hint, loc):
    item = dtype.itemsize
    flops = spec.cube_flops_per_cycle(dtype.name)
    nbatch = 1
    for d in batch:
        nbatch *= _est(d)
    if hint:
        mt, kt, nt = hint["m"][0], hint["k"][0], hint["n"][0]
        if not _cube_fits(mt, nt, kt, item, spec, double=False):
            raise TilingError(f"cube tile shapes m={mt} k={kt} n={nt} do not fit the cube buffers", loc=loc)
        # the K loop is double-buffered: a hinted kL0 that fits only once steps K in halves (the same
        # product; CANN's hint [64, 64], [128, 128], [128, 128] on fp32 fills L0B once)
        while not _cube_fits(mt, nt, kt, item, spec) and kt % 2 == 0 and (kt // 2 * item) % spec.alignment == 0:
            kt //= 2
        return mt, nt, kt, 1
    k_align = max(32 // item, 8)
    m_cap = _align_up(_est(M), 16)
    n_cap = _align_up(_est(N), 16)
    k_cap = _align_up(_est(K), k_align)
    splits_ok = SPLIT_K if isinstance(K, int) else (1,)
    best, best_t = None, math.inf
    for mt in CUBE_M:
        if mt > max(m_cap, 16):
            continue
        for nt in CUBE_N:
            if nt > max(n_cap, 16):
                continue
            for kt in CUBE_K:
                if kt % k_align or kt > max(k_cap, k_align):
                    continue
                if not _cube_fits(mt, nt, kt, item, spec):
                    continue
                for sk in splits_ok:
                    if sk > 1 and -(-_est(K) // kt) < 4 * sk:
                        continue          # each part keeps a few K steps
                    t = cube_time(M, N, K, nbatch, mt, nt, kt, item, 4, spec, flops, sk)
                    if t < best_t * 0.999 or (t <= best_t * 1.001 and best and mt * nt > best[0] * best[1]):
                        best, best_t = (mt, nt, kt, sk), t
    if best is None:
        raise TilingError(f"no cube tile fits the buffers for a {dtype} matmul", loc=loc)
    return best

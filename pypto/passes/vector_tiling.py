"""Tiling of one fused vector group: TensorGraph ops -> one TileProgram.

1. Canonical axes. The group's iteration dims collapse where every value (and every GM box it is
   read from or written to) treats neighbours alike, leaving ``grid..., row, col`` axes: a tile is
   ``[row tile, col tile]`` and extent 1 along grid axes (Block IR tiles are 2-D; a GM box covers
   the last two dims of its tensor). Dims a reduction keeps in one tile are ``whole`` (one tile
   along them); the dim of a two-level reduction is the sequential axis.
2. Tile sizes: from the ops' ``vec_tile`` hints, else ``tile_choice``.
3. Values: each group value's tile has the row/col extents of the axes it runs along (1 where it
   broadcasts), a valid shape for tails, and a phase: ``setup`` when no parallel axis moves it
   (loaded once per core), ``step`` when it runs along the sequential axis, else ``pre``.
4. Ops: one rule per op (vector_rules); loads of GM inputs on first use, stores of the values
   used outside the group (a broadcast value only from the first tile along the axes it lacks).
"""
from __future__ import annotations

import sympy

from .. import symbolic as sym
from ..errors import CompileError
from ..ir.isa import MemSpace
from ..ir.tile_graph import GMTile, TileAxis, TileOp, TileParam, TileProgram, TileValue
from . import tile_choice
from .iterspace import is_one
from .exprs import same

_is_unit = is_one

F32_ALIGN = 8


class NeedsCopy(Exception):
    """A group cannot read value ``src`` where it lives; the driver copies it to a contiguous buffer."""

    def __init__(self, src):
        super().__init__(src)
        self.src = src


class Canon:
    """Canonical axes of a group: ``runs`` of Dims, the role of each, and which is row/col."""

    def __init__(self, runs, roles):
        self.runs = runs
        self.roles = roles
        self.axis_of = {d: k for k, run in enumerate(runs) for d in run}
        n = len(runs)
        self.col = n - 1
        self.row = n - 2 if n >= 2 else None

    def kind(self, k) -> str:
        return "col" if k == self.col else "row" if k == self.row else "grid"


def _role(group, d):
    if d is group.seq:
        return "seq"
    return "whole" if d in group.whole else "par"


def canonical_axes(group, presences, accesses, pinned, split_before=frozenset()) -> Canon:
    """presences: sets of Dims each tile runs along; accesses: (Access, {Dim: buffer dim})."""
    dims = group.dims
    if not dims:
        return Canon([], [])
    runs = [[dims[0]]]
    for d in dims[1:]:
        a = runs[-1][-1]
        ok = (_role(group, a) == _role(group, d) != "seq" and a not in pinned and d not in pinned
              and d not in split_before
              and all((a in s) == (d in s) for s in presences)
              and all(_buffer_adjacent(acc, bmap, a, d) for acc, bmap in accesses))
        if ok:
            runs[-1].append(d)
        else:
            runs.append([d])
    roles = []
    for run in runs:
        r = _role(group, run[0])
        roles.append("whole" if r == "whole" else "seq" if r == "seq" else "par")
    canon = Canon(runs, roles)
    for k, r in enumerate(roles):
        if r == "whole" and canon.kind(k) == "grid":
            raise CompileError(f"cannot tile: a reduced/scanned dim (sizes {[d.size for d in runs[k]]}) is neither "
                               "of the last two iteration dims of its fused group")
    return canon


def _buffer_adjacent(acc, bmap, a, b) -> bool:
    if a not in bmap and b not in bmap:
        return True
    if (a in bmap) != (b in bmap):
        return False
    ba, bb = bmap[a], bmap[b]
    if bb <= ba:
        return False
    if any(not is_one(acc.shape[x]) for x in range(ba + 1, bb)):
        return False
    return acc.offsets[bb] == 0 and same(acc.extents[bb], acc.shape[bb])


def _contiguous(acc) -> bool:
    """The access reads its whole buffer, its dims in the buffer's order (not a permuted view)."""
    used = [v for v in acc.vdims if v is not None]
    return all(o == 0 for o in acc.offsets) and all(same(e, n) for e, n in zip(acc.extents, acc.shape)) \
        and used == sorted(used)


def _prod(xs):
    n = 1
    for x in xs:
        n = n * x
    return sym.simplify(n) if not isinstance(n, int) else n


def align_cols(cols: int, itemsize: int, alignment: int) -> int:
    per = max(alignment // itemsize, 1)
    return -(-cols // per) * per


class VectorTiler:
    """Builds the TileProgram of one vector group. ``storage``: node id -> Access of materialised
    values; ``stores``: member node id -> Access it must be written to; ``views``: callback
    (buffer name, param shape) -> name of a buffer with exactly that shape."""

    def __init__(self, g, group, plan, storage, stores, views, machine, name):
        self.g, self.group, self.plan = g, group, plan
        self.storage, self.stores, self.views = storage, stores, views
        self.machine = machine
        self.name = name
        self.members = set(group.nodes)
        self.ops: list = []
        self.tiles: dict = {}
        self.params: list = []
        self._param_of: dict = {}
        self.presence: dict = {}      # tile name -> (has_row, has_col)
        self.tile_of: dict = {}       # value key -> tile name / ("scalar", v)
        self.scalar_bind: dict = {}
        self._n = 0
        self.cur = None               # node being lowered
        self.cur_phase = "pre"

    # ------------------------------------------------------------------ values and presences
    def _external_inputs(self):
        """(node, k, src, amap, Access or None) of every operand read from outside the group."""
        out = []
        for n in self.group.nodes:
            for k, src in enumerate(self.g.node(n)["inputs"]):
                if src in self.members:
                    continue
                amap = self.plan.spaces[n].in_maps[k]
                acc = self.storage.get(src) if self.g.op(src) != "scalar" else None
                out.append((n, k, src, amap, acc))
        return out

    @staticmethod
    def _load_dims(amap, acc):
        """{Dim: buffer dim} for the dims a load actually reads (broadcast dims excluded)."""
        m = {}
        for d, b in zip(amap, acc.vdims):
            if d is not None and b is not None:
                m[d.find()] = b
        return m

    def build(self) -> TileProgram:
        g, group = self.g, self.group
        presences, accesses, pinned = [], [], set()
        self._access_sources = []
        copyable = []                  # inputs a contiguous copy would read along more merged dims
        self.ext = self._external_inputs()
        for n, k, src, amap, acc in self.ext:
            if acc is not None:
                bmap = self._load_dims(amap, acc)
                presences.append(set(bmap))
                accesses.append((acc, bmap))
                self._access_sources.append(src)
                broadcast = any(d is not None and v is None for d, v in zip(amap, acc.vdims))
                if not _contiguous(acc) or broadcast:
                    copyable.append(src)
        for n in group.nodes:
            sp = self.plan.spaces[n]
            pres = {d.find() for d in sp.out_map if d is not None}
            presences.append(pres)
            if n in self.stores:
                acc = self.stores[n]
                accesses.append((acc, {d.find(): b for d, b in zip(sp.out_map, acc.vdims)
                                       if d is not None and b is not None}))
                self._access_sources.append(None)
            pinned |= {d.find() for d in sp.scans}
            if g.op(n) in ("tril", "triu"):
                pinned |= {d.find() for d in sp.out_map[-2:] if d is not None}
        try:
            canon = canonical_axes(group, presences, accesses, pinned, self._hint_splits())
        except CompileError:
            try:
                canon = canonical_axes(group, presences, accesses, pinned)     # the hint's axes cannot hold it
            except CompileError as why:
                # a strided input keeps dims apart that a contiguous copy would merge: copy it first
                if copyable:
                    raise NeedsCopy(copyable[0])
                raise CompileError(why.message, loc=g.node(group.nodes[-1])["loc"], hint=why.hint) from None
        self.canon = canon
        self.accesses = accesses
        # tiles along each axis
        sizes = [_prod([d.size for d in run]) for run in canon.runs]
        modes = set()
        for (acc, bmap), src in zip(accesses, self._access_sources):
            mode = self._access_mode(acc, bmap)
            if src is None and mode in ("trans", "trans_rows1"):
                mode = "point"          # no transposing store: a column box of the output is written element-wise
            whole = {k for k in (canon.row, canon.col) if k is not None and canon.runs and canon.roles[k] != "par"}
            # a strided read against a whole axis (one element, or one row, per GM box while the
            # reduction needs every row of the axis in one tile): make it contiguous first
            if src is not None and (mode == "point" and whole or
                                    mode in ("rows1", "trans_rows1") and canon.row in whole):
                raise NeedsCopy(src)
            modes.add(mode)
        self.tile_sizes = tile_choice.vector_tiles(self, sizes, modes)
        for k, role in enumerate(canon.roles):
            if role == "whole" and isinstance(sizes[k], int) and self.tile_sizes[k] < sizes[k]:
                raise CompileError(f"cannot tile: the reduced/scanned dim of size {sizes[k]} would be cut into "
                                   f"tiles of {self.tile_sizes[k]}")
        self.axes = []
        for k, run in enumerate(canon.runs):
            role = "sequential" if canon.roles[k] == "seq" else "parallel"
            self.axes.append(TileAxis(f"a{k}", sizes[k], self.tile_sizes[k], role))
        # the ops
        from .vector_rules import lower_node
        from .vector_rules import expand as expand_tile
        for n in group.nodes:
            self.cur = n
            self.cur_phase = self._node_phase(n)
            lower_node(self, n)
            want = self.axes_of(self.plan.spaces[n].out_map)
            has_row = canon.row is not None and canon.row in want
            has_col = bool(self.axes) and canon.col in want
            if self.presence[self.tile_of[n]] != (has_row, has_col):      # a broadcast read kept its shape
                self.tile_of[n] = expand_tile(self, self.tile_of[n], has_row, has_col)
        for n in group.nodes:
            if n in self.stores:
                self._store(n)
        scalars = dict(self.scalar_bind)
        loc = g.node(group.nodes[-1])["loc"]
        return TileProgram(self.name, "vector", self.axes, self.params, self.tiles, self.ops, scalars,
                           list(group.nodes), {}, loc)

    def _hint_splits(self) -> set:
        """Dims a vector hint tiles partially: they keep their own axis (a hint of (4, 64) on [37, 200]
        means 4 x 64 tiles, not 256-element runs of the flattened tensor)."""
        from .tile_choice import hinted_dims
        return {d for d, h in hinted_dims(self).items() if not (isinstance(d.size, int) and h >= d.size)}

    def _access_mode(self, acc, bmap) -> str:
        """How a GM box of this access can hold a tile: "normal" (rows then the last dim), "rows1" (one
        row per box: the row dim is not next to the col dim), "trans" (the col dim comes right before
        the row dim: a transposing load), "point" (neither: one element per box)."""
        canon = self.canon
        if not canon.runs:
            return "normal"
        rows = [bmap[d] for d in canon.runs[canon.row] if d in bmap] if canon.row is not None else []
        cols = [bmap[d] for d in canon.runs[canon.col] if d in bmap]
        used = sorted(set(bmap.values()))
        if not used:
            return "normal"
        last = used[-1]

        def next_to(lo_dims, hi_dims):
            return all(_is_unit(acc.shape[x]) for x in range(max(lo_dims) + 1, min(hi_dims)))
        # a buffer dim after the col dims that no axis runs along (a fixed index, e.g. x[..., 3:4]):
        # the box's last dim is not the col dim
        trailing = [x for x in range(last + 1, len(acc.shape)) if not _is_unit(acc.shape[x])]
        if cols and max(cols) == last and trailing:
            return "trans_rows1" if len(trailing) == 1 and next_to(cols, trailing) else "point"
        if cols and max(cols) == last:
            return "normal" if not rows or next_to(rows, cols) else "rows1"
        if not cols:
            return "normal" if not rows or max(rows) == last else "rows1"
        if rows and max(rows) == last and max(cols) < min(rows) and next_to(cols, rows):
            return "trans"
        if not rows or max(rows) < max(cols):
            # the col dim comes right before a dim of a grid axis (one element along it): a transposing
            # load of a [cols, 1] box, one row per tile
            following = [x for x in used if x > max(cols)]
            if len(following) == 1 and next_to(cols, following):
                return "trans_rows1"
        return "point"

    # ------------------------------------------------------------------ tiles
    def axes_of(self, amap, acc=None) -> set:
        """The canonical axes a value (read through ``acc`` when given) runs along."""
        out = set()
        for j, d in enumerate(amap):
            if d is None:
                continue
            if acc is not None and acc.vdims[j] is None:
                continue      # broadcast read
            out.add(self.canon.axis_of[d.find()])
        return out

    def _phase_of_axes(self, axes: set) -> str:
        if any(self.canon.roles[k] == "seq" for k in axes):
            return "step"
        if any(self.canon.roles[k] == "par" and not self._single_tile(k) for k in axes):
            return "pre"
        return "setup"

    def _single_tile(self, k) -> bool:
        a = self.axes[k]
        return isinstance(a.size, int) and a.size <= a.tile

    def _node_phase(self, n) -> str:
        sp = self.plan.spaces[n]
        axes = {self.canon.axis_of[d.find()] for d in sp.dims}
        return self._phase_of_axes(axes)

    def valid(self, k):
        cache = self.__dict__.setdefault("_valid", {})
        if k not in cache:
            cache[k] = self._valid_of(k)
        return cache[k]

    def _valid_of(self, k):
        a = self.axes[k]
        if isinstance(a.size, int) and a.size <= a.tile:
            return a.size
        if isinstance(a.size, int) and a.size % a.tile == 0:
            return a.tile
        return sympy.Min(a.tile, a.size - a.index * a.tile)

    def new_tile(self, dtype, has_row: bool, has_col: bool, hint: str = "t", phase: str | None = None) -> str:
        canon = self.canon
        tr = self.tile_sizes[canon.row] if (has_row and canon.row is not None) else 1
        tc = self.tile_sizes[canon.col] if (has_col and self.axes) else 1
        vr = self.valid(canon.row) if (has_row and canon.row is not None) else 1
        vc = self.valid(canon.col) if (has_col and self.axes) else 1
        self._n += 1
        name = f"{hint}{self._n}"
        cols = align_cols(tc, dtype.itemsize, self.machine.alignment)
        self.tiles[name] = TileValue(name, MemSpace.UB, dtype, (tr, cols), (vr, vc), phase or self.cur_phase)
        self.presence[name] = (bool(has_row and canon.row is not None), bool(has_col and self.axes))
        return name

    def like(self, tile: str, dtype=None, hint="t") -> str:
        r, c = self.presence[tile]
        return self.new_tile(dtype or self.tiles[tile].dtype, r, c, hint)

    def emit(self, op: str, operands: list, attrs: dict | None = None, phase: str | None = None, guard=None):
        loc = self.g.node(self.cur)["loc"] if self.cur is not None else None
        self.ops.append(TileOp(op, list(operands), phase or self.cur_phase, dict(attrs or {}), loc, guard))

    # ------------------------------------------------------------------ operands
    def scalar_value(self, v):
        """A scalar operand: numbers inline, symbolic values through a scalar param."""
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, (int, float)):
            return v
        return sym.simplify(v)

    def operand(self, n, k):
        """Operand k of node n: ("tile", name) or ("scalar", value)."""
        src = self.g.node(n)["inputs"][k]
        if self.g.op(src) == "scalar" and src not in self.members:
            return ("scalar", self.scalar_value(self.g.node(src)["attrs"]["value"]), self.g.info(src).dtype)
        if src in self.members:
            return ("tile", self.tile_of[src], None)
        amap = self.plan.spaces[n].in_maps[k]
        key = (src, tuple(d.find() if d is not None else None for d in amap))
        if key not in self.tile_of:
            self.tile_of[key] = self._load(src, amap)
        return ("tile", self.tile_of[key], None)

    def _param(self, acc, shape, dtype, mode, box=None) -> str:
        buf = self.views(acc.buffer, shape)
        key = (buf, mode)
        if key not in self._param_of:
            idx = sum(1 for p in self.params if p.mode == mode)
            name = f"{mode}{idx}"
            self.params.append(TileParam(name, buf, dtype, tuple(shape), mode))
            self._param_of[key] = name
        param = next(p for p in self.params if p.name == self._param_of[key])
        region = (buf, box[0], box[1]) if box is not None else (acc.buffer, tuple(acc.offsets), tuple(acc.extents))
        if region not in param.regions:
            param.regions.append(region)
        return self._param_of[key]

    def gm_view(self, acc, amap, present_axes):
        """-> (param shape, offsets) of the box a tile of this value reads/writes."""
        canon = self.canon
        axis_bdims = {}
        for j, d in enumerate(amap):
            if d is None or acc.vdims[j] is None:
                continue
            k = canon.axis_of[d.find()]
            if k in present_axes:
                axis_bdims.setdefault(k, []).append(acc.vdims[j])
        owner = {}
        for k, bs in axis_bdims.items():
            for b in range(min(bs), max(bs) + 1):
                owner[b] = k
        dims = []          # (size, offset, axis or None)
        b = 0
        r = len(acc.shape)
        while b < r:
            if b in owner:
                k = owner[b]
                bs = [x for x in range(b, r) if owner.get(x) == k]
                size = _prod([acc.shape[x] for x in bs])
                off, stride = 0, 1
                for x in reversed(bs):
                    if acc.offsets[x] != 0:
                        off = off + sympy.sympify(acc.offsets[x]) * stride
                    stride = stride * acc.shape[x]
                extent = _prod([acc.extents[bs[0]]] + [acc.shape[x] for x in bs[1:]])
                dims.append([size, off, k, extent])
                b = bs[-1] + 1
            else:
                if not (is_one(acc.shape[b]) and acc.offsets[b] == 0):
                    dims.append([acc.shape[b], acc.offsets[b], None, acc.extents[b]])
                b += 1
        col = canon.col if self.axes else None
        row = canon.row
        trans = False
        if col is not None and col in present_axes:
            if dims[-1][2] != col:
                one = self.tile_sizes[col] == 1 and (row is None or self.tile_sizes[row] == 1)
                if one:
                    pass                  # a one-element tile: any box order holds it
                elif len(dims) > 1 and dims[-2][2] == col and (
                        (row in present_axes and dims[-1][2] == row)
                        or ((dims[-1][2] is None or canon.kind(dims[-1][2]) == "grid")
                            and (row not in present_axes or self.tile_sizes[row] == 1))):
                    trans = True
                else:
                    raise CompileError("internal: a strided box with a tile larger than one element",
                                       loc=self.g.node(self.cur)["loc"] if self.cur is not None else None)
        elif not dims or dims[-1][2] is not None:
            dims.append([1, 0, None, 1])          # the tile's single column
        shape, offsets, box_offs, box_ext = [], [], [], []
        for size, off, k, extent in dims:
            shape.append(size)
            box_offs.append(sym.simplify(off) if not isinstance(off, int) else off)
            box_ext.append(extent)
            if k is not None:
                a = self.axes[k]
                step = 1 if canon.kind(k) == "grid" else a.tile
                off = off + a.index * step
            offsets.append(sym.simplify(off) if not isinstance(off, int) else off)
        # the whole box the program touches, in the param's own coordinates (what the runtime checks)
        return tuple(shape), tuple(offsets), trans, (tuple(box_offs), tuple(box_ext))

    def _load(self, src, amap) -> str:
        acc = self.storage[src]
        axes = self.axes_of(amap, acc)
        canon = self.canon
        has_row = canon.row is not None and canon.row in axes
        has_col = bool(self.axes) and canon.col in axes
        info = self.g.info(src)
        shape, offsets, trans, box = self.gm_view(acc, amap, axes)
        param = self._param(acc, shape, info.dtype, "in", box)
        phase = self._phase_of_axes(axes)
        t = self.new_tile(info.dtype, has_row, has_col, "x", phase)
        self.emit("TLOAD", [t, GMTile(param, offsets)], {"trans": True} if trans else None, phase=phase)
        return t

    def _store(self, n):
        acc = self.stores[n]
        amap = self.plan.spaces[n].out_map
        tile = self.tile_of[n]
        axes = self.axes_of(amap)
        shape, offsets, trans, box = self.gm_view(acc, amap, axes)
        if trans:
            raise CompileError("writing into a transposed view is not supported", loc=self.g.node(n)["loc"])
        info = self.g.info(n)
        if self.tiles[tile].dtype != info.dtype:
            raise CompileError(f"internal: tile {tile} dtype {self.tiles[tile].dtype} != value dtype {info.dtype}")
        param = self._param(acc, shape, info.dtype, "out", box)
        phase = "post" if n == self.group.seq_node else self.tiles[tile].phase
        # a value that lacks some parallel axes is written once: from the first tile along them
        missing = [k for k, a in enumerate(self.axes) if a.role == "parallel" and k not in axes
                   and not self._single_tile(k)]
        guard = None
        if phase == "setup":
            from ..ir.block import BLOCK_IDX
            guard = sympy.Eq(BLOCK_IDX, 0)
        elif missing:
            guard = sympy.And(*[sympy.Eq(self.axes[k].index, 0) for k in missing])
        self.cur = n
        self.ops.append(TileOp("TSTORE", [GMTile(param, offsets), tile], phase, {}, self.g.node(n)["loc"], guard))

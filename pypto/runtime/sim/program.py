"""A Block compiled once for the simulator: checked statements (``COp``) and a generated Python
generator (the scalar unit) that walks For/If with run-time values and yields ``(cop, vals)`` —
``vals`` being the statement's run-time numbers: the valid (rows, cols) of every tile operand, then
the GM offsets, then the scalar operands. Nothing here touches sympy at run time.

Static checks happen here, each naming the instruction and the user's line: unknown op, operand
form, tile (an operand, or the instruction's scratch tile ``attrs["tmp"]``) not placed / misaligned /
over the buffer's capacity / in the wrong core, a static valid shape larger than the tile, an
instruction bound to the wrong pipe, event ids out of range.
"""
from __future__ import annotations

from ...errors import SimError
from ...ir.block import (Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion, If, Instr,
                         PipeBarrier, SetFlag, WaitFlag, walk)
from ...ir.block_printer import _fmt_operand
from ...ir.isa import ISA, MemSpace, Pipe, pipe_of
from ..host.exprs import constant, free_names, ident, to_source
from . import indexed
from .functional import fits_source, gm_fits_source, operand_shapes
from .timing import PIPE_INDEX, CostModel

INSTR, SET, WAIT, BARRIER, XSET, XWAIT = range(6)

SPACES_OF = {CoreType.AIV: (MemSpace.UB,),
             CoreType.AIC: (MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C)}
MATMUL_SPACES = (MemSpace.L0C, MemSpace.L0A, MemSpace.L0B)


class TileInfo:
    __slots__ = ("index", "name", "space", "dtype", "torch_dtype", "itemsize", "shape", "addr", "nbytes", "decl")

    def __init__(self, index, decl):
        self.index, self.decl, self.name = index, decl, decl.name
        self.space = MemSpace(decl.space)
        self.dtype = decl.dtype
        self.torch_dtype = decl.dtype.torch_dtype
        self.itemsize = decl.dtype.itemsize
        self.shape = tuple(int(d) for d in decl.shape)
        self.addr = decl.addr
        self.nbytes = decl.nbytes

    def footprint(self) -> str:
        return f"{self.space}[0x{self.addr:05x}, 0x{self.addr + self.nbytes:05x})"


class COp:
    """One statement, compiled."""
    __slots__ = ("kind", "pipe", "pipe_enum", "op", "stmt", "loc", "block", "_text", "index",
                 "tiles", "reads", "writes", "region", "attrs", "sem", "gm_param", "gm_rank", "gm_itemsize",
                 "n_tiles", "scalar_at", "trans", "gm_region", "measure", "static", "dynamic_valid",
                 "key", "other", "event", "flag", "kind_name", "fits", "gm_fits", "mcache", "nvalid",
                 "read_atoms", "write_atoms", "is_store", "latency", "on_chip")

    def __init__(self, kind, stmt, block, text=None):
        self.kind, self.stmt, self.block, self._text = kind, stmt, block, text
        self.loc = getattr(stmt, "loc", None) or block.loc
        self.tiles = ()
        self.reads = self.writes = ()
        self.static = None
        self.mcache = {}
        self.is_store = False
        self.latency = 0                # cycles after the pipe is done until others see the result (TPUSH)
        self.on_chip = False            # TPUSH / TPOP: a handoff slot moved on chip (its GM box still checked)
        self.dynamic_valid = False
        self.gm_param = None
        self.trans = False
        self.attrs = {}

    @property
    def text(self) -> str:
        """The statement as Block IR text; printed when first asked for (errors, traces): printing the
        operands' sympy expressions is most of a block's compile time otherwise."""
        if self._text is None:
            s = self.stmt
            self._text = _instr_text(s, self.block) if s.op in ISA else s.op
        return self._text

    def where(self) -> str:
        loc = f" at {self.loc}" if self.loc else ""
        return f"`{self.text}` ({self.pipe_enum} pipe, block {self.block.name}{loc})"


def _instr_text(s: Instr, block) -> str:
    return f"{s.op} " + ", ".join(_fmt_operand(o, block) for o in s.operands)


def stmt_text(s, block) -> str:
    if isinstance(s, Instr):
        return _instr_text(s, block)
    if isinstance(s, SetFlag):
        return f"set_flag {s.src} -> {s.dst} ev{s.event}"
    if isinstance(s, WaitFlag):
        return f"wait_flag {s.src} -> {s.dst} ev{s.event}"
    if isinstance(s, PipeBarrier):
        return f"pipe_barrier {s.pipe}"
    if isinstance(s, CrossCoreSetFlag):
        return f"cross_core_set_flag {s.pipe} flag{s.flag}"
    if isinstance(s, CrossCoreWaitFlag):
        return f"cross_core_wait_flag {s.pipe} flag{s.flag}"
    return repr(s)


class CompiledBlock:
    def __init__(self, block: Block, spec):
        self.block, self.spec = block, spec
        self.core = CoreType(block.core)
        self.cost = CostModel(spec)
        self.event_ids = spec.memory.get("event_ids", 8)
        self.tiles: dict[str, TileInfo] = {t.name: TileInfo(i, t) for i, t in enumerate(block.tiles)}
        self.tile_list = list(self.tiles.values())
        self._checked_tiles: set = set()
        self.ops: list[COp] = []
        self.gm_params = {g.name: g for g in block.gm_params}
        self.walk = self._generate()
        self.atoms, self.atom_span = self._atoms()
        for op in self.ops:                 # the atoms each instruction reads and writes, flattened
            if op.kind == INSTR:
                op.read_atoms = tuple((t, a) for t in op.reads for a in self.atoms[t])
                op.write_atoms = tuple((t, a) for t in op.writes for a in self.atoms[t])
        self.stored_params = frozenset(op.gm_param for op in self.ops if op.kind == INSTR and op.is_store)
        # the buffer of each tile (by index): declarations of one buffer read what the others wrote
        names = {}
        self.buffer_of = tuple(names.setdefault(t.decl.buffer_name, len(names)) for t in self.tile_list)
        self.spaces = sorted({t.space for t in self.tile_list}, key=str)

    # ------------------------------------------------------------------ checks
    def _err(self, cop: COp, msg: str):
        return SimError(f"{msg}\n  in {cop.where()}", loc=cop.loc)

    def _check_tile(self, cop: COp, name: str) -> TileInfo:
        t = self.tiles.get(name)
        if t is None:
            raise self._err(cop, f"instruction names tile '{name}', which block {self.block.name} does not declare")
        if name in self._checked_tiles:
            return t
        spec = self.spec
        if t.space not in SPACES_OF[self.core]:
            raise self._err(cop, f"tile '{name}' is in {t.space}, which a {self.core} core does not have "
                                 f"(it has {', '.join(map(str, SPACES_OF[self.core]))})")
        if t.addr is None:
            raise self._err(cop, f"tile '{name}' has no address (memory planning did not place it)")
        cap = spec.capacity[t.space.capacity_key]
        if t.addr < 0 or t.addr + t.nbytes > cap:
            raise self._err(cop, f"tile '{name}' {t.space} {t.dtype}[{t.shape[0]}, {t.shape[1]}] at 0x{t.addr:x} "
                                 f"needs bytes [0x{t.addr:x}, 0x{t.addr + t.nbytes:x}) but {t.space} holds "
                                 f"{cap} bytes (0x{cap:x}): over capacity")
        if t.addr % spec.alignment:
            raise self._err(cop, f"tile '{name}' address 0x{t.addr:x} is not aligned to {spec.alignment} bytes")
        valid = t.decl.valid_shape
        if len(valid) != 2:
            raise self._err(cop, f"tile '{name}' valid shape {valid} is not (rows, cols)")
        for v, s in zip(valid, t.shape):
            c = constant(v)
            if c is not None and not (0 <= c <= s):
                raise self._err(cop, f"tile '{name}' valid shape {tuple(valid)} exceeds its shape {t.shape}")
        self._checked_tiles.add(name)
        return t

    # ------------------------------------------------------------------ compile statements
    def _compile_instr(self, s: Instr) -> tuple[COp, list]:
        block = self.block
        cop = COp(INSTR, s, block)
        cop.pipe_enum = Pipe(s.pipe)
        cop.pipe = PIPE_INDEX[cop.pipe_enum]
        cop.op = s.op
        cop.attrs = dict(s.attrs)
        spec_i = ISA.get(s.op)
        if spec_i is None:
            raise self._err(cop, f"unknown instruction {s.op}")
        form = spec_i.form.split(",")
        if len(form) != len(s.operands):
            raise self._err(cop, f"{s.op} takes operands ({spec_i.form}), found {len(s.operands)}")
        tiles, gm_offs, scalars = [], [], []
        for f, o in zip(form, s.operands):
            if f == "t":
                if not isinstance(o, str):
                    raise self._err(cop, f"{s.op} expects a tile operand, found {o!r}")
                tiles.append(self._check_tile(cop, o))
            elif f == "g":
                if not isinstance(o, GMRegion):
                    raise self._err(cop, f"{s.op} expects a GM region operand, found {o!r}")
                g = self.gm_params.get(o.param)
                if g is None:
                    raise self._err(cop, f"GM region names '{o.param}', which is not a GM param of the block")
                if len(o.offsets) != len(g.shape):
                    raise self._err(cop, f"GM region {o.param} has {len(o.offsets)} offsets for a "
                                         f"{len(g.shape)}-d tensor")
                cop.gm_param, cop.gm_rank, cop.gm_itemsize = o.param, len(g.shape), g.dtype.itemsize
                cop.gm_region = o
                gm_offs = list(o.offsets)
            else:
                if isinstance(o, (str, GMRegion)):
                    raise self._err(cop, f"{s.op} expects a scalar operand, found {o!r}")
                scalars.append(o)
        if isinstance(s.attrs.get("tmp"), str):       # the planned scratch tile: placed, aligned, within capacity
            self._check_tile(cop, s.attrs["tmp"])
        cop.tiles = tuple(tiles)
        cop.n_tiles = len(tiles)
        cop.scalar_at = 2 * len(tiles) + len(gm_offs)
        cop.region = spec_i.region
        cop.is_store = cop.region in ("store", indexed.SCATTER)
        if cop.region in indexed.REGIONS and cop.gm_rank != 2:
            raise self._err(cop, f"{s.op} moves rows of a 2-D GM tensor; {cop.gm_param} has {cop.gm_rank} dims")
        cop.sem = spec_i.semantics
        cop.trans = bool(cop.attrs.get("trans", False)) and s.op == "TLOAD"
        # which pipe the data path implies
        spaces = [t.space for t in tiles]
        cop.on_chip = spec_i.kind in ("push", "pop")
        if spec_i.kind in ("store", "push"):
            expected = pipe_of(s.op, MemSpace.GM, spaces[0])
        elif spec_i.kind in ("load", "pop"):
            expected = pipe_of(s.op, spaces[0], MemSpace.GM)
        else:
            try:
                expected = pipe_of(s.op, spaces[0], spaces[1] if len(spaces) > 1 else None)
            except ValueError as exc:
                raise self._err(cop, str(exc)) from None
        if expected != cop.pipe_enum:
            raise self._err(cop, f"{s.op} from {spaces[-1]} to {spaces[0]} runs on the {expected} pipe, "
                                 f"but the instruction is bound to {cop.pipe_enum}")
        if spec_i.kind == "matmul" and tuple(spaces) != MATMUL_SPACES:
            raise self._err(cop, f"{s.op} needs dst in l0c, a in l0a, b in l0b; found "
                                 f"{', '.join(map(str, spaces))}")
        for attr, allowed in spec_i.attrs.items():
            if cop.attrs.get(attr, allowed[0]) not in allowed:
                raise self._err(cop, f"{s.op} {attr}={cop.attrs.get(attr)!r} is not one of "
                                     f"{', '.join(map(str, allowed))}")
        # accesses for the race / clobber checks (tile indices)
        if cop.region in ("store", indexed.SCATTER):
            cop.reads, cop.writes = tuple(t.index for t in tiles), ()
        elif cop.region == indexed.GATHER:
            cop.reads, cop.writes = (tiles[1].index,), (tiles[0].index,)
        elif cop.region == "load":
            cop.reads, cop.writes = (), (tiles[0].index,)
        else:
            reads = [t.index for t in tiles[1:]]
            if s.op == "TMATMUL_ACC":
                reads.append(tiles[0].index)
            cop.reads, cop.writes = tuple(reads), (tiles[0].index,)
        cop.kind = INSTR
        cop.kind_name = spec_i.kind
        # run-time values: valid (rows, cols) of every tile operand, GM offsets, scalars
        values = []
        for t in tiles:
            values.extend(t.decl.valid_shape)
        values.extend(gm_offs)
        values.extend(scalars)
        cop.dynamic_valid = any(constant(v) is None for t in tiles for v in t.decl.valid_shape)
        cop.measure = self.cost.measure_fn(cop)
        cop.nvalid = 2 * len(tiles)
        cop.fits = eval(f"lambda v: {fits_source(cop)}")
        fit = indexed.cols_fit_source if cop.region in indexed.REGIONS else gm_fits_source
        cop.gm_fits = eval(f"lambda v, s: {fit(cop)}") if cop.gm_param else None
        return cop, values

    def _compile_flag(self, s, block) -> COp:
        text = stmt_text(s, block)
        if isinstance(s, (SetFlag, WaitFlag)):
            cop = COp(SET if isinstance(s, SetFlag) else WAIT, s, block, text)
            src, dst = Pipe(s.src), Pipe(s.dst)
            cop.pipe_enum = src if cop.kind == SET else dst
            cop.pipe = PIPE_INDEX[cop.pipe_enum]
            cop.other = PIPE_INDEX[dst if cop.kind == SET else src]
            cop.key = (PIPE_INDEX[src], PIPE_INDEX[dst], int(s.event))
            cop.event = int(s.event)
            if not 0 <= cop.event < self.event_ids:
                raise self._err(cop, f"event id {s.event} is outside the {self.event_ids} ids of a pipe pair")
        elif isinstance(s, PipeBarrier):
            cop = COp(BARRIER, s, block, text)
            cop.pipe_enum = Pipe(s.pipe)
            cop.pipe = PIPE_INDEX[cop.pipe_enum]
        else:
            cop = COp(XSET if isinstance(s, CrossCoreSetFlag) else XWAIT, s, block, text)
            cop.pipe_enum = Pipe(s.pipe)
            cop.pipe = PIPE_INDEX[cop.pipe_enum]
            cop.flag = int(s.flag)
            if not 0 <= cop.flag < self.spec.cross_core_flags:
                raise self._err(cop, f"cross-core flag {s.flag} is outside 0..{self.spec.cross_core_flags - 1}")
        cop.op = text.split(" ")[0]
        return cop

    # ------------------------------------------------------------------ the generated scalar unit
    def _generate(self):
        block = self.block
        lines: list[str] = []
        consts: list = []
        loop_vars: set = set()
        used: set = set()

        hoisted = [0]

        def add_op(cop, values, names):
            """The yield of one statement; ``names``: expression source -> hoisted local of this iteration."""
            cop.index = len(self.ops)
            self.ops.append(cop)
            if values is None:
                return f"O[{cop.index}], None"
            used.update(free_names(values))
            if cop.kind == INSTR:
                nv = 2 * cop.n_tiles
                valid = [constant(v) for v in values[:nv]]
                if all(v is not None for v in valid):      # valid shapes fixed: cost and fit known now
                    if not cop.fits(valid):
                        operand_shapes(cop, valid)         # raises, explaining which tile
                    cop.static = cop.measure(valid)
            if all(constant(v) is not None for v in values):
                consts.append(tuple(constant(v) for v in values))
                return f"O[{cop.index}], C[{len(consts) - 1}]"
            srcs = [to_source(v) for v in values]
            src = ", ".join(names.get(x, x) for x in srcs)
            return f"O[{cop.index}], ({src}{',' if len(values) == 1 else ''})"

        def emit(stmts, depth, outer):
            pad = "    " * depth
            n0 = len(lines)
            # compile this list's instructions first, to hoist the expressions they share
            compiled = {id(s): self._compile_instr(s) for s in stmts if isinstance(s, Instr)}
            counts: dict = {}
            for cop, values in compiled.values():
                for v in values:
                    if constant(v) is None:
                        x = to_source(v)
                        counts[x] = counts.get(x, 0) + 1
            names = dict(outer)
            for x, c in counts.items():
                if c > 1 and x not in names:
                    hoisted[0] += 1
                    names[x] = f"_h{hoisted[0]}"
                    lines.append(f"{pad}{names[x]} = {x}")
            for s in stmts:
                if isinstance(s, Instr):
                    cop, values = compiled[id(s)]
                    lines.append(f"{pad}yield {add_op(cop, values, names)}")
                elif isinstance(s, (SetFlag, WaitFlag, PipeBarrier, CrossCoreSetFlag, CrossCoreWaitFlag)):
                    lines.append(f"{pad}yield {add_op(self._compile_flag(s, block), None, names)}")
                elif isinstance(s, For):
                    used.update(free_names([s.start, s.stop, s.step]))
                    loop_vars.add(s.var.name)
                    lines.append(f"{pad}for {ident(s.var.name)} in range({to_source(s.start)}, "
                                 f"{to_source(s.stop)}, {to_source(s.step)}):")
                    emit(s.body, depth + 1, {})        # hoisted values depend on the loop variable
                elif isinstance(s, If):
                    used.update(free_names([s.cond]))
                    lines.append(f"{pad}if {to_source(s.cond)}:")
                    emit(s.then_body, depth + 1, names)
                    if s.else_body:
                        lines.append(f"{pad}else:")
                        emit(s.else_body, depth + 1, names)
                else:
                    raise SimError(f"block {block.name}: unknown statement {s!r}", loc=block.loc)
            if len(lines) == n0:
                lines.append(f"{pad}pass")

        emit(block.body, 1, {})
        self.env_names = sorted(used - loop_vars)
        head = ["def walk(e):"] + [f"    {ident(n)} = e[{n!r}]" for n in self.env_names]
        head.append("    if False:\n        yield None")
        source = "\n".join(head + lines)
        self.source = source
        ns = {"O": self.ops, "C": consts}
        try:
            exec(compile(source, f"<sim block {block.name}>", "exec"), ns)
        except SyntaxError as exc:      # an expression the printer cannot express
            raise SimError(f"block {block.name}: cannot compile its scalar expressions ({exc})", loc=block.loc)
        return ns["walk"]

    def _atoms(self):
        """Cut each memory space at every tile boundary into disjoint byte ranges ("atoms"); a tile is a
        run of atoms. The race and clobber checks keep their state per atom, so aliasing tiles share it
        exactly where they share bytes. -> (atoms of each tile, (space, start, end) of each atom)"""
        cuts: dict = {}
        for t in self.tile_list:
            if t.addr is not None:
                cuts.setdefault(t.space, set()).update((t.addr, t.addr + t.nbytes))
        index, spans = {}, []
        for space in sorted(cuts, key=str):
            edges = sorted(cuts[space])
            for a, b in zip(edges, edges[1:]):
                index[(space, a)] = len(spans)
                spans.append((space, a, b))
        atoms = []
        for t in self.tile_list:
            if t.addr is None:
                atoms.append(())
                continue
            run, a = [], t.addr
            while a < t.addr + t.nbytes:
                k = index[(t.space, a)]
                run.append(k)
                a = spans[k][2]
            atoms.append(tuple(run))
        return atoms, spans


_CACHE: dict = {}
_CACHE_SIZE = 256


def _fingerprint(block: Block) -> tuple:
    """A Block's contents, compared by value (==, identical objects at once): its statements with a copy
    of their operands and attrs, its tiles' figures, its GM parameters. It holds the objects themselves,
    not their id()s: an id is reused once its object is freed, so an edit that freed a valid shape or an
    operand and made a new one at the same address looked unchanged."""
    stmts = tuple((s, tuple(getattr(s, "operands", ())), dict(getattr(s, "attrs", None) or {}))
                  for s in walk(block.body))
    tiles = tuple((t.name, t.space, t.dtype.name, t.shape, t.addr, t.valid) for t in block.tiles)
    return (stmts, tiles, len(block.body), tuple(block.gm_params))


def compile_block(block: Block, spec) -> CompiledBlock:
    """Compiled once per Block and machine; a Block edited since (its contents changed) is compiled again.
    The cache's CompiledBlock holds its Block and spec, so the id()s of the key stay theirs while cached."""
    key = (id(block), id(spec))
    text = _fingerprint(block)
    hit = _CACHE.get(key)
    if hit is not None and hit[1].block is block and hit[1].spec is spec and hit[0] == text:
        return hit[1]
    cb = CompiledBlock(block, spec)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (text, cb)
    return cb

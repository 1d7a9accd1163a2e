"""Block IR -> one PTO-ISA C++ kernel file (kernels/<name>.cpp) per Kernel.

The file holds, in a namespace named after the kernel: the ``Args`` struct (GM tensors, run-time
sizes, scalar parameters), one function per core program (the cube program under __DAV_CUBE__,
the vector program under __DAV_VEC__; the CPU build (-D__CPU_SIM) compiles both), and the
device entry point the NPU launcher calls. Inside a program: tiles declared with their types
and placed by TASSIGN at the planned addresses, GM boxes as GlobalTensor views, one instruction
per line with the user's source line as a comment, flags, loops and branches.
"""
from __future__ import annotations

import sympy

from ..errors import CompileError
from ..ir.block import (Block, CoreType, CrossCoreSetFlag, CrossCoreWaitFlag, For, GMRegion, If, Instr, Kernel,
                        PipeBarrier, SetFlag, TileDecl, WaitFlag, walk)
from ..ir import gm_bounds
from ..ir.isa import ISA, MemSpace
from ..machine import machine_spec
from ..sanitize import cpp_comment, cpp_string
from ..symbolic import is_static
from . import tiles as tt
from .constraints import check_instr
from .abi import CORE_SYMBOLS, KernelABI, kernel_abi
from .cexpr import ExprPrinter, float_literal
from .instructions import CMP_MODES, ROUND_MODES
from .names import Namer

INDENT = "    "
MAX_EVENTS = 8

# instructions moving a tile to / from a GM box -> is it a load (TPUSH / TPOP: the on-chip handoff, whose
# box names the FIFO slot's backing store)
_GM_MOVES = {"TLOAD": True, "TSTORE": False, "TPOP": True, "TPUSH": False}


def _pipe(p) -> str:
    return f"PIPE_{p.value if hasattr(p, 'value') else p}"


def _comment(text) -> str:
    """A '//' comment of text that may hold user strings (names, file names)."""
    return f"// {cpp_comment(text)}"


def _loc_comment(loc) -> str:
    return f"  {_comment(loc)}" if loc else ""


class BlockEmitter:
    """Prints one Block as a C++ function ``AICORE inline void <name>(const Args&, const CoreIndex&)``."""

    def __init__(self, block: Block, abi: KernelABI, machine):
        self.block = block
        self.abi = abi
        self.machine = machine
        self.tiles = {t.name: t for t in block.tiles}
        self.loop_vars = {s.var.name for s in walk(block.body) if isinstance(s, For)}
        self.namer = Namer(taken=("args", "core"))
        self.names: dict[str, str] = {}
        self._name_everything()
        self.expr = ExprPrinter(self.names)
        self.lines: list[str] = []
        self.used_symbols: set[str] = set()
        self.used_gm: dict[str, set[bool]] = {}      # GM param -> {transposed?} views used
        # scratch tiles the memory pass planned (attrs["tmp"]); ``scratch``: those codegen places itself,
        # only for a hand-built Block that did not go through the memory pass
        self.planned_scratch = {i.attrs["tmp"] for i in block.instructions() if isinstance(i.attrs.get("tmp"), str)}
        self.scratch: dict[tuple, str] = {}           # (dtype, shape) -> scratch tile name
        # ColMajor tile -> name of its RowMajor transposed view; ("block", column tile) -> its block view
        self.views: dict = {}
        self.view_lines: list[str] = []
        self.valid_deps = {t.name: self._valid_loop_deps(t) for t in block.tiles}
        self.fresh: set[str] = set()                   # loop-dependent valid shapes current at this point
        # how a failing bounds check names a GM access: "<core>:<number of the access>"
        sites = gm_bounds.access_sites(block)
        self.gm_sites = {id(i): f"{block.core}:{n}" for n, i in enumerate(sites)}
        # tiles moved to or from GM with a dynamic valid shape get it set at their first use, after the
        # bounds check: a valid shape the rule refuses (<= 0 past a tensor's end) must not fail earlier
        self.valid_at_use = {o for i in sites for o in i.operands if isinstance(o, str) and o in self.tiles
                             and any(tt.dynamic_dims(self.tiles[o]))}

    # ------------------------------------------------------------------ naming
    def _name_everything(self):
        for t in self.block.tiles:      # tiles are on every instruction line: they keep their names
            self.names[("tile", t.name)] = self.namer.name(("tile", t.name), t.name)
        for g in self.block.gm_params:
            self.names[("gm", g.name)] = self.namer.name(("gm", g.name), g.name)
        for g in self.block.gm_params:
            base = self.names[("gm", g.name)]
            self.names[("dims", g.name)] = self.namer.name(("dims", g.name), f"{base}_dims")
            self.names[("view", g.name)] = self.namer.name(("view", g.name), f"{base}_gm")
            self.names[("view_t", g.name)] = self.namer.name(("view_t", g.name), f"{base}_gm_t")
        for t in self.block.tiles:
            self.names[("type", t.name)] = self.namer.name(("type", t.name), f"{self.names[('tile', t.name)]}_t")
        symbols = [a.name for a in self.abi.ints + self.abi.reals] + sorted(self.loop_vars) + list(CORE_SYMBOLS)
        for s in symbols:
            self.names[s] = self.namer.name(("sym", s), CORE_SYMBOLS.get(s, s))

    def tile_name(self, name: str, instr: Instr | None = None) -> str:
        if name not in self.tiles:
            raise CompileError(f"block {self.block.name}: {instr.op if instr else 'tile'} uses '{name}', "
                               f"which is not a declared tile", loc=instr.loc if instr else self.block.loc)
        return self.names[("tile", name)]

    def _track(self, *exprs):
        for e in exprs:
            if isinstance(e, sympy.Basic):
                self.used_symbols |= {s.name for s in e.free_symbols}

    def int_expr(self, e) -> str:
        self._track(e)
        return self.expr.int_expr(e)

    # ------------------------------------------------------------------ body
    def emit_body(self, stmts, depth: int, bound: set[str]):
        for s in stmts:
            try:
                self.emit_stmt(s, depth, bound)
            except CompileError as e:
                if getattr(e, "_located", False):
                    raise
                err = CompileError(f"block {self.block.name}: {e.message}",
                                   loc=getattr(s, "loc", None) or self.block.loc or e.loc, hint=e.hint)
                err._located = True
                raise err from None

    def emit_stmt(self, s, depth: int, bound: set[str]):
        pad = INDENT * depth
        if isinstance(s, Instr):
            if s.op in _GM_MOVES:
                self.emit_gm_check(s, pad)
            self.refresh_valid(s, pad, bound)
            self.emit_instr(s, pad)
        elif isinstance(s, For):
            self.emit_for(s, depth, bound)
        elif isinstance(s, If):
            self._track(s.cond)
            self.lines.append(f"{pad}if ({self.expr.cond(s.cond)}) {{{_loc_comment(s.loc)}")
            before = set(self.fresh)
            self.emit_body(s.then_body, depth + 1, bound)
            after_then, self.fresh = self.fresh, before
            if s.else_body:
                self.lines.append(f"{pad}}} else {{")
                self.emit_body(s.else_body, depth + 1, bound)
            self.fresh &= after_then
            self.lines.append(f"{pad}}}")
        elif isinstance(s, (SetFlag, WaitFlag)):
            if not 0 <= s.event < MAX_EVENTS:
                raise CompileError(f"event id {s.event} is out of range 0..{MAX_EVENTS - 1}", loc=s.loc)
            fn = "set_flag" if isinstance(s, SetFlag) else "wait_flag"
            self.lines.append(f"{pad}{fn}({_pipe(s.src)}, {_pipe(s.dst)}, EVENT_ID{s.event});"
                              f"{_loc_comment(s.loc)}")
        elif isinstance(s, PipeBarrier):
            self.lines.append(f"{pad}pipe_barrier({_pipe(s.pipe)});{_loc_comment(s.loc)}")
        elif isinstance(s, (CrossCoreSetFlag, CrossCoreWaitFlag)):
            flags = self.machine.cross_core_flags          # the template argument: one fact, the machine file
            if not 0 <= s.flag < flags:
                raise CompileError(f"cross-core flag {s.flag} is out of range 0..{flags - 1} on {self.machine.name}",
                                   loc=s.loc)
            fn = "cross_core_set" if isinstance(s, CrossCoreSetFlag) else "cross_core_wait"
            self.lines.append(f"{pad}pypto::{fn}<{flags}>({_pipe(s.pipe)}, {s.flag});{_loc_comment(s.loc)}")
        else:
            raise CompileError(f"block {self.block.name}: cannot generate code for {type(s).__name__}",
                               loc=getattr(s, "loc", None))

    def emit_for(self, s: For, depth: int, bound: set[str]):
        pad = INDENT * depth
        var = self.names[s.var.name]
        bounds = []
        for part, value in (("begin", s.start), ("end", s.stop), ("step", s.step)):
            text = self.int_expr(value)
            if not (is_static(value) or isinstance(value, sympy.Symbol)):
                local = self.namer.fresh(f"{var}_{part}")
                self.lines.append(f"{pad}const int64_t {local} = {text};")
                text = local
            bounds.append(text)
        start, stop, step = bounds
        negative = is_static(s.step) and int(s.step) < 0
        attrs = ", ".join(f"{k}={v}" for k, v in s.attrs.items() if not str(k).startswith("_"))
        note = ", ".join(x for x in (attrs, str(s.loc) if s.loc else "") if x)
        note = f"  {_comment(note)}" if note else ""
        self.lines.append(f"{pad}for (int64_t {var} = {start}; {var} {'>' if negative else '<'} {stop}; "
                          f"{var} += {step}) {{{note}")
        inner = bound | {s.var.name}
        # Valid shapes that depend on the loop variable are re-evaluated at their first use per iteration.
        self.fresh = {t for t in self.fresh if s.var.name not in self.valid_deps[t]}
        at_start = set(self.fresh)
        self.emit_body(s.body, depth + 1, inner)
        self.fresh = at_start
        self.lines.append(f"{pad}}}")

    def refresh_valid(self, ins: Instr, pad: str, bound: set[str]):
        """SetValid* for operand tiles whose valid shape depends on loop variables and is stale here."""
        for name in dict.fromkeys(o for o in ins.operands if isinstance(o, str)):
            deps = self.valid_deps.get(name)
            if (not deps and name not in self.valid_at_use) or name in self.fresh:
                continue
            if not deps <= bound:
                raise CompileError(f"{ins.op} uses tile {name} outside the loop(s) over {sorted(deps - bound)} "
                                   f"that its valid shape depends on", loc=ins.loc)
            self.lines.append(pad + self._set_valid(self.tiles[name]))
            self.fresh.add(name)

    def emit_instr(self, ins: Instr, pad: str):
        if ins.op not in ISA:
            raise CompileError(f"unknown instruction {ins.op}", loc=ins.loc)
        if ins.op in _GM_MOVES:
            return self.emit_move_gm(ins, pad, load=_GM_MOVES[ins.op])
        spec = ISA[ins.op]
        if spec.region in ("gather", "scatter"):
            return self.emit_indexed_gm(ins, pad)
        sp = spec.cpp
        tile_ops = [o for o in ins.operands if isinstance(o, str)]
        for o in tile_ops:
            self.tile_name(o, ins)                  # an undeclared tile raises here
        scalars = [o for o in ins.operands[1:] if not isinstance(o, (str, GMRegion))]
        views = self.row_major_views(ins, tile_ops, pad)
        check_instr(ins, spec, [self.tiles[o] for o in tile_ops], set(views))
        views.update(self.row_blocks(ins, tile_ops, pad))
        args = []
        for p in sp.pattern:
            if p == "d":
                args.append(views.get(ins.operands[0]) or self.tile_name(ins.operands[0], ins))
            elif p in ("a", "b", "c"):
                k = " abc".index(p)
                if k >= len(tile_ops):
                    raise CompileError(f"{ins.op} needs {k + 1} tile operands, found {ins.operands}", loc=ins.loc)
                args.append(views.get(tile_ops[k]) or self.tile_name(tile_ops[k], ins))
            elif p == "s":
                if not scalars:
                    raise CompileError(f"{ins.op} needs a scalar operand, found {ins.operands}", loc=ins.loc)
                args.append(self.scalar(scalars[0], ins, spec))
            elif p == "tmp":
                args.append(self.tmp_tile(ins, tile_ops[1] if len(tile_ops) > 1 else tile_ops[0]))
            elif p == "cmp":
                mode = ins.attrs.get("cmp")
                if mode not in CMP_MODES:
                    raise CompileError(f"{ins.op} needs attrs['cmp'] in {sorted(CMP_MODES)}, found {mode!r}",
                                       loc=ins.loc)
                args.append(CMP_MODES[mode])
            elif p == "round":
                mode = ins.attrs.get("round")
                if mode not in ROUND_MODES:
                    raise CompileError(f"TCVT: unknown rounding {mode!r}; known: "
                                       f"{sorted(k for k in ROUND_MODES if k)}", loc=ins.loc)
                args.append(ROUND_MODES[mode])
            elif p == "axis":
                args.append(str(int(ins.attrs.get("axis", 1))))
        self.lines.append(f"{pad}{sp.callee}({', '.join(args)});{_loc_comment(ins.loc)}")

    def row_major_views(self, ins: Instr, tile_ops: list[str], pad: str) -> dict[str, str]:
        """Tile -> the RowMajor view to emit it through, for an instruction pto-isa takes only on RowMajor
        tiles (spec.row_major) that works element by element (region "same") on ColMajor tiles only, e.g.
        TMULS / TADDS on the [rows, 1] column of a row reduction: on the transposed views of all its
        operands it computes the same elements. The views' valid shapes are set before the instruction."""
        spec = ISA[ins.op]
        decls = [self.tiles[o] for o in tile_ops]
        if not spec.row_major or spec.region != "same" or not all(tt.is_col_major(t) for t in decls):
            return {}
        out = {}
        for t in {t.name: t for t in decls}.values():
            if t.name not in self.views:
                self.views[t.name] = self._declare_view(t)
            view = out[t.name] = self.views[t.name]
            dyn_r, dyn_c = tt.dynamic_dims(t)
            vr, vc = t.valid_shape
            if dyn_r and dyn_c:
                self.lines.append(f"{pad}{view}.SetValidShape({self.int_expr(vc)}, {self.int_expr(vr)});")
            elif dyn_r:
                self.lines.append(f"{pad}{view}.SetValidCol({self.int_expr(vr)});")
            elif dyn_c:
                self.lines.append(f"{pad}{view}.SetValidRow({self.int_expr(vc)});")
        return out

    def row_blocks(self, ins: Instr, tile_ops: list[str], pad: str) -> dict[str, str]:
        """Column tile -> its one-block-per-row view, for a TROWEXPAND<op> (region "rowexpand") whose column
        operand (valid cols 1) is RowMajor: one row, or rows not a 32-byte multiple, which pto-isa's Tile does
        not allow ColMajor. pto-isa's TROWEXPAND<op> reads a RowMajor column as one 32-byte block per row
        (valid cols 32 / sizeof, every lane the row's value), so the row's value is first copied across its
        block (TROWEXPAND in place; the lanes are the tile's own padding), then the vector barrier that read
        needs. pypto's headers read lane 0 either way."""
        if ISA[ins.op].region != "rowexpand":
            return {}
        out = {}
        for name in dict.fromkeys(tile_ops[1:]):
            t = self.tiles[name]
            vc = t.valid_shape[1]
            if tt.is_col_major(t) or not is_static(vc) or int(vc) != 1:
                continue
            block = tt.ALIGN_BYTES // t.dtype.itemsize
            if t.shape[1] < block:
                raise CompileError(f"{ins.op}: column tile {t.name} {list(t.shape)} is narrower than one "
                                   f"{tt.ALIGN_BYTES}-byte block per row", loc=ins.loc)
            if ("block", name) not in self.views:
                self.views[("block", name)] = self._declare_block_view(t, block)
            view = out[name] = self.views[("block", name)]
            if tt.dynamic_dims(t)[0]:
                self.lines.append(f"{pad}{view}.SetValidRow({self.int_expr(t.valid_shape[0])});")
            self.lines.append(f"{pad}TROWEXPAND({view}, {self.tile_name(name, ins)});  "
                              f"{_comment(f'{t.name}: its value across the 32-byte block of each row')}")
            self.lines.append(f"{pad}pipe_barrier(PIPE_V);")
        return out

    def _declare_block_view(self, t: TileDecl, block: int) -> str:
        name = self.namer.fresh(f"{self.names[('tile', t.name)]}_block")
        type_name = self.namer.fresh(f"{name}_t")
        rows, cols = t.shape
        vr, _ = tt.valid_args(t)
        ctor = f"{name}({rows})" if tt.dynamic_dims(t)[0] else name
        self.view_lines += [f"{INDENT}using {type_name} = Tile<TileType::Vec, {t.dtype.cpp}, {rows}, {cols}, "
                            f"BLayout::RowMajor, {vr}, {block}>;  "
                            f"{_comment(f'{t.name} as one {tt.ALIGN_BYTES}-byte block per row')}",
                            f"{INDENT}{type_name} {ctor};",
                            f"{INDENT}TASSIGN({name}, 0x{self.addresses[t.name]:05x});"]
        return name

    def _declare_view(self, t: TileDecl) -> str:
        name = self.namer.fresh(f"{self.names[('tile', t.name)]}_transposed")
        type_name = self.namer.fresh(f"{name}_t")
        dyn_r, dyn_c = tt.dynamic_dims(t)
        args = [str(d) for d, dyn in ((t.shape[1], dyn_c), (t.shape[0], dyn_r)) if dyn]
        ctor = f"{name}({', '.join(args)})" if args else name
        self.view_lines += [f"{INDENT}using {type_name} = {tt.transposed_view_type(t)};  "
                            f"{_comment(f'{t.name} transposed: a RowMajor view of its bytes')}",
                            f"{INDENT}{type_name} {ctor};",
                            f"{INDENT}TASSIGN({name}, 0x{self.addresses[t.name]:05x});"]
        return name

    def scalar(self, value, ins: Instr, spec) -> str:
        """The scalar operand as a value of the instruction's element type: its source tile's ("t,t,s":
        a compare's mask destination says nothing of it) or its destination's (a fill), an integer where the
        instruction table's domain says so (a triangle's diagonal). Never index math: -1.0 compared with
        a float tile is a float."""
        tiles = [o for o in ins.operands if isinstance(o, str)]
        like = self.tiles.get(tiles[1] if spec.n_tiles > 1 and len(tiles) > 1 else tiles[0]) if tiles else None
        scalar_domain = spec.domain[spec.n_tiles - 1] if len(spec.domain) >= spec.n_tiles else "any"
        floating = like is not None and like.dtype.is_floating and scalar_domain != "int"
        if isinstance(value, (float,)) or (isinstance(value, sympy.Basic) and value.is_Float):
            floating = floating or not float(value).is_integer()
        if isinstance(value, sympy.Basic):
            self._track(value)
        if floating:
            if isinstance(value, (int, float)):
                return float_literal(float(value))
            return self.expr.real_expr(value)
        if isinstance(value, bool):
            return "1" if value else "0"
        return self.expr.int_expr(value)

    def tmp_tile(self, ins: Instr, like: str) -> str:
        planned = ins.attrs.get("tmp")
        if planned is not None:
            return self.tile_name(planned, ins)
        src = self.tiles[like]
        key = (src.dtype, tuple(src.shape))
        if key not in self.scratch:
            self.scratch[key] = self.namer.fresh(f"tmp{len(self.scratch)}")
        return self.scratch[key]

    def _gm_operands(self, ins: Instr, load: bool) -> tuple[GMRegion, str, bool]:
        """(region, tile, transposed?) of a TLOAD / TSTORE, checked."""
        region = ins.operands[1] if load else ins.operands[0]
        tile = ins.operands[0] if load else ins.operands[1]
        if not isinstance(region, GMRegion) or not isinstance(tile, str):
            raise CompileError(f"{ins.op} takes a tile and a GM region, found {ins.operands}", loc=ins.loc)
        try:
            gm = self.block.gm(region.param)
        except KeyError:
            raise CompileError(f"{ins.op}: '{region.param}' is not a GM param of block {self.block.name}",
                               loc=ins.loc) from None
        if len(region.offsets) != len(gm.shape):
            raise CompileError(f"{ins.op}: {region.param} has {len(gm.shape)} dims but the region gives "
                               f"{len(region.offsets)} offsets", loc=ins.loc)
        trans = bool(ins.attrs.get("trans", False))
        if trans and not load:
            raise CompileError("TSTORE does not transpose; transpose the tile first (TTRANS)", loc=ins.loc)
        return region, tile, trans

    def emit_gm_check(self, ins: Instr, pad: str):
        """The whole GM bounds rule over the tile's valid shape, before SetValid* (checked builds only)."""
        region, tile, trans = self._gm_operands(ins, _GM_MOVES[ins.op])
        self.tile_name(tile, ins)                   # an undeclared tile raises here
        rows, cols = self.tiles[tile].valid_shape
        offsets = ", ".join(self.int_expr(o) for o in region.offsets)
        self.lines.append(f"{pad}pypto::check_gm_access({self.names[('dims', region.param)]}, {{{offsets}}}, "
                          f"{self.int_expr(rows)}, {self.int_expr(cols)}, {'true' if trans else 'false'}, "
                          f"{gm_bounds.least_extent(region)}, {cpp_string(self.gm_sites[id(ins)])});")

    def emit_move_gm(self, ins: Instr, pad: str, load: bool):
        region, tile, trans = self._gm_operands(ins, load)
        self.used_gm.setdefault(region.param, set()).add(trans)
        gname = self.names[("gm", region.param)]
        view = self.names[("view_t" if trans else "view", region.param)]
        dims = self.names[("dims", region.param)]
        box = self.namer.fresh(f"{gname}_box")
        offsets = ", ".join(self.int_expr(o) for o in region.offsets)
        helper = "gm_box_t" if trans else "gm_box"
        tname = self.tile_name(tile, ins)
        self.lines.append(f"{pad}{view} {box} = pypto::{helper}<{view}>({gname}, {dims}, {{{offsets}}}, "
                          f"{tname}, {cpp_string(self.gm_sites[id(ins)])});")
        callee = ISA[ins.op].cpp.callee
        call = f"{callee}({tname}, {box});" if load else f"{callee}({box}, {tname});"
        self.lines.append(f"{pad}{call}{_loc_comment(ins.loc)}")

    def emit_indexed_gm(self, ins: Instr, pad: str):
        """MGATHER (rows tile, region, index tile) / MSCATTER (region, rows tile, index tile): pypto's
        kernel_support.hpp moves the rows, checking each index."""
        region = next((o for o in ins.operands if isinstance(o, GMRegion)), None)
        tiles = [o for o in ins.operands if isinstance(o, str)]
        if region is None or len(tiles) != 2:
            raise CompileError(f"{ins.op} takes a rows tile, a GM region and an index tile, found {ins.operands}",
                               loc=ins.loc)
        gm = self.block.gm(region.param)
        if len(gm.shape) != 2 or len(region.offsets) != 2:
            raise CompileError(f"{ins.op} moves rows of a 2-D GM tensor; {region.param} has shape {gm.shape}",
                               loc=ins.loc)
        self.used_gm.setdefault(region.param, set())            # the pointer and dims; no GlobalTensor view
        gname, dims = self.names[("gm", region.param)], self.names[("dims", region.param)]
        rows, idx = (self.tile_name(t, ins) for t in tiles)
        offsets = ", ".join(self.int_expr(o) for o in region.offsets)
        site = cpp_string(self.gm_sites[id(ins)])
        callee = ISA[ins.op].cpp.callee
        gm_args = f"{gname}, {dims}, {{{offsets}}}"
        args = f"{rows}, {gm_args}" if ins.op == "MGATHER" else f"{gm_args}, {rows}"
        self.lines.append(f"{pad}{callee}({args}, {idx}, {site});{_loc_comment(ins.loc)}")

    # ------------------------------------------------------------------ valid shapes
    def _valid_loop_deps(self, t: TileDecl) -> set[str]:
        if t.valid is None:
            return set()
        syms = set()
        for v in t.valid:
            if isinstance(v, sympy.Basic):
                syms |= {s.name for s in v.free_symbols}
        return syms & self.loop_vars

    def _set_valid(self, t: TileDecl) -> str:
        name = self.names[("tile", t.name)]
        dyn_r, dyn_c = tt.dynamic_dims(t)
        vr, vc = t.valid_shape
        if dyn_r and dyn_c:
            return f"{name}.SetValidShape({self.int_expr(vr)}, {self.int_expr(vc)});"
        if dyn_r:
            return f"{name}.SetValidRow({self.int_expr(vr)});"
        return f"{name}.SetValidCol({self.int_expr(vc)});"

    def _tile_decl(self, t: TileDecl, addr: int) -> list[str]:
        name = self.names[("tile", t.name)]
        type_name = self.names[("type", t.name)]
        if t.name in self.planned_scratch:
            return [f"using {type_name} = {tt.scratch_type(t.dtype, t.shape)};  "
                    f"{_comment(f'scratch of the reductions / select / transpose, {t.space}')}",
                    f"{type_name} {name};",
                    f"TASSIGN({name}, 0x{addr:05x});"]
        dyn_r, dyn_c = tt.dynamic_dims(t)
        vr, vc = t.valid_shape
        in_loop = bool(self._valid_loop_deps(t)) or t.name in self.valid_at_use
        args = []
        if dyn_r:
            args.append(str(t.shape[0]) if in_loop else self.int_expr(vr))
        if dyn_c:
            args.append(str(t.shape[1]) if in_loop else self.int_expr(vc))
        ctor = f"{name}({', '.join(args)})" if args else name
        valid = f" valid [{', '.join(str(v) for v in t.valid)}]" if t.valid is not None else ""
        what = f"{t.space} {t.dtype}[{t.shape[0]}, {t.shape[1]}]{valid}"
        return [f"using {type_name} = {tt.tile_type(t)};  {_comment(what)}",
                f"{type_name} {ctor};",
                f"TASSIGN({name}, 0x{addr:05x});"]

    def _placements(self) -> dict[str, int]:
        """Planned addresses; tiles without one are placed after the planned ones of their space."""
        align = self.machine.alignment
        end: dict[str, int] = {}
        for t in self.block.tiles:
            if t.addr is not None:
                end[t.space] = max(end.get(t.space, 0), t.addr + t.nbytes)
        out = {}
        for t in self.block.tiles:
            if t.addr is None:
                start = -(-end.get(t.space, 0) // align) * align
                out[t.name] = start
                end[t.space] = start + t.nbytes
            else:
                out[t.name] = t.addr
        self._space_end = end
        return out

    # ------------------------------------------------------------------ function
    def emit(self) -> list[str]:
        b = self.block
        placements = self.addresses = self._placements()
        tile_lines = []
        for t in b.tiles:
            tile_lines += [INDENT + x for x in self._tile_decl(t, placements[t.name])]
        self.emit_body(b.body, 1, set())
        body = self.lines
        tile_lines += self.view_lines

        head = [_comment(f"{b.core} program '{b.name}'" + (f" ({b.loc})" if b.loc else "")),
                f"AICORE inline void {self.abi.block_fns[b.core]}([[maybe_unused]] const Args& args, "
                f"[[maybe_unused]] const pypto::CoreIndex& core)",
                "{"]
        pre = []
        fields = {a.name: a.field for a in self.abi.ints + self.abi.reals}
        gm_fields = {g.name: g.field for g in self.abi.gm}
        gm_lines = []
        for pname in self.used_gm:
            g = b.gm(pname)
            dims = ", ".join(self.int_expr(d) for d in g.shape)
            gname = self.names[("gm", pname)]
            shape = ", ".join(str(d) for d in g.shape)
            gm_lines.append(f"{INDENT}__gm__ {g.dtype.cpp}* {gname} = args.{gm_fields[pname]};  "
                            f"{_comment(f'{g.dtype}[{shape}]')}")
            gm_lines.append(f"{INDENT}const int64_t {self.names[('dims', pname)]}[{len(g.shape)}] = {{{dims}}};")
            for trans in sorted(self.used_gm[pname]):
                view = self.names[("view_t" if trans else "view", pname)]
                gm_lines.append(f"{INDENT}using {view} = {tt.gm_view_type(g.dtype, trans)};")
        for sym, core_field in CORE_SYMBOLS.items():
            if sym in self.used_symbols:
                pre.append(f"{INDENT}const int64_t {self.names[sym]} = core.{core_field};")
        for a in self.abi.ints + self.abi.reals:
            if a.name in self.used_symbols:
                ctype = "double" if a in self.abi.reals else "int64_t"
                pre.append(f"{INDENT}const {ctype} {self.names[a.name]} = args.{fields[a.name]};")
        pre += gm_lines
        unknown = self.used_symbols - set(fields) - self.loop_vars - set(CORE_SYMBOLS)
        if unknown:
            raise CompileError(f"block {b.name} uses {sorted(unknown)}, which are neither scalar params, GM sizes, "
                               f"loop variables nor core indices", loc=b.loc)
        scratch = []
        if self.scratch:
            ub_end = self._space_end.get(MemSpace.UB, self._space_end.get("ub", 0))
            addr = -(-ub_end // self.machine.alignment) * self.machine.alignment
            biggest = max(dt.itemsize * s[0] * s[1] for (dt, s) in self.scratch)
            fits = addr + biggest <= self.machine.capacity["UB"]
            scratch.append(f"{INDENT}// scratch tile the device's reductions / select / transpose work in"
                           + (", placed after the planned UB tiles" if fits else
                              ": UB is full, so it is left to the toolchain (plan attrs['tmp'] for the device)"))
            for (dt, shape), name in self.scratch.items():
                type_name = self.namer.fresh(f"{name}_t")
                scratch.append(f"{INDENT}using {type_name} = {tt.scratch_type(dt, shape)};")
                scratch.append(f"{INDENT}{type_name} {name};")
                if fits:
                    scratch.append(f"{INDENT}TASSIGN({name}, 0x{addr:05x});")
        blank = [""] if pre else []
        return head + pre + blank + tile_lines + scratch + [""] + body + ["}"]


def _guard(core: CoreType) -> str:
    return "defined(__DAV_CUBE__)" if core == CoreType.AIC else "defined(__DAV_VEC__)"


def kernel_source(kernel: Kernel, machine=None) -> tuple[str, KernelABI]:
    """The kernel.cpp text of one Kernel and its calling convention."""
    machine = machine_spec(machine)
    abi = kernel_abi(kernel)
    ns = abi.namespace
    origin = f" from {kernel.loc}" if kernel.loc else ""
    out = [_comment(f"Kernel '{kernel.name}', generated by pypto{origin}."),
           "// PTO-ISA C++: builds with pypto's CPU tile header (backend \"cpu\", -D__CPU_SIM) or with the",
           "// public pto-isa headers (backend \"npu\"; pto-isa's own -D__CPU_SIM simulation).",
           "#include <cstdint>",
           "#include <pto/pto-inst.hpp>",
           "#include <pypto/kernel_support.hpp>",
           "",
           f"namespace {ns} {{",
           "",
           "using namespace pto;",
           "",
           "// Launch arguments: GM tensors, run-time sizes, scalar parameters.",
           "struct Args {"]
    for g in abi.gm:
        shape = ", ".join(str(d) for d in g.shape)
        out.append(f"{INDENT}__gm__ {g.dtype.cpp}* {g.field};  {_comment(f'{g.dtype}[{shape}]')}")
    for a in abi.ints:
        out.append(f"{INDENT}int64_t {a.field};  // {'size' if a.role == 'size' else 'scalar parameter'}")
    for a in abi.reals:
        out.append(f"{INDENT}double {a.field};  // scalar parameter")
    out += ["};", ""]
    for b in sorted(kernel.blocks, key=lambda b: b.core != CoreType.AIC):
        out.append(f"#if {_guard(b.core)} || defined(__CPU_SIM)")
        out += BlockEmitter(b, abi, machine).emit()
        out += ["#endif", ""]
    out += [f"}}  // namespace {ns}", ""]
    out += _device_entry(abi)
    return "\n".join(out) + "\n", abi


def _device_entry(abi: KernelABI) -> list[str]:
    params = [f"__gm__ void* {g.field}" for g in abi.gm] + [f"int64_t {a.field}" for a in abi.ints] + \
             [f"double {a.field}" for a in abi.reals]
    init = [f"(__gm__ {g.dtype.cpp}*){g.field}" for g in abi.gm] + [a.field for a in abi.ints + abi.reals]
    ns = abi.namespace
    lines = ["#if !defined(__CPU_SIM)",
             "// Device entry point: the NPU compiler builds it once per core type.",
             f"extern \"C\" __global__ AICORE void {abi.ident}({', '.join(params)})",
             "{",
             "#if defined(__DAV_CUBE__) || defined(__DAV_VEC__)",
             f"{INDENT}const {ns}::Args args{{{', '.join(init)}}};",
             f"{INDENT}const pypto::CoreIndex core{{(int64_t)get_block_idx(), (int64_t)get_block_num(), "
             f"(int64_t)get_subblockid(), {2 if abi.has_cube and abi.has_vector else 1}}};",
             "#endif"]
    if abi.has_cube:
        lines += ["#if defined(__DAV_CUBE__)", f"{INDENT}{ns}::{abi.block_fns[CoreType.AIC]}(args, core);", "#endif"]
    if abi.has_vector:
        lines += ["#if defined(__DAV_VEC__)", f"{INDENT}set_mask_norm();", f"{INDENT}set_vector_mask(-1, -1);",
                  f"{INDENT}{ns}::{abi.block_fns[CoreType.AIV]}(args, core);", "#endif"]
    lines += ["}", "#endif"]
    return lines

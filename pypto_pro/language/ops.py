"""Tile ops in destination-first form: ``pl.add(dst, a, b)`` -> ``TADD dst, a, b``.

Each op's meaning is one row of a table (its PTO instruction, its operand form, its scalar forms);
a handler per *form* checks the operands (kinds, memory spaces, dtypes, static shapes), chooses the
valid shape the destination receives, and emits the instruction into the current section.

Names: an op that computes an op of the op registry (``pypto/ops/registry.py``) is called by the registry's
name — ``pl.sum(dst, src, dim=1)``, ``pl.amax``, ``pl.full``, ``pl.where``, ``pl.eq`` ... (each checked
against the registry at import); ops the registry has no op for keep their instruction family's name
(``row_expand_mul``, ``move``, ``matmul_acc``). The older spellings (``row_sum``, ``fill``, ``select``,
``compare``, ``muls`` ...) still work and warn (DeprecationWarning, at the kernel's line) naming the new one.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import sympy

from pypto import dtypes
from pypto.ir.block import GMRegion, instr
from pypto.ir.isa import CMP_MODES
from pypto.ops.registry import REGISTRY as OP_REGISTRY

from .cross_core import handoff_attrs
from .dsl import dsl
from .parser import is_runtime, norm
from .tails import clip
from .types import MemorySpace
from .values import TensorValue, TileValue


@dataclass(frozen=True)
class OpRow:
    isa: str
    form: str
    scalar: str | None = None      # tile (op) scalar
    rscalar: str | None = None     # scalar (op) tile
    doc: str = ""


_BINARY = {
    "add": OpRow("TADD", "binary", "TADDS", "TADDS", "dst = a + b"),
    "sub": OpRow("TSUB", "binary", "TSUBS", "TRSUBS", "dst = a - b"),
    "mul": OpRow("TMUL", "binary", "TMULS", "TMULS", "dst = a * b"),
    "div": OpRow("TDIV", "binary", "TDIVS", "TRDIVS", "dst = a / b"),
    "maximum": OpRow("TMAX", "binary", "TMAXS", "TMAXS", "dst = max(a, b)"),
    "minimum": OpRow("TMIN", "binary", "TMINS", "TMINS", "dst = min(a, b)"),
    "pow": OpRow("TPOW", "binary", "TPOWS", "TRPOWS", "dst = a ** b"),
    "remainder": OpRow("TREM", "binary", None, None, "dst = a mod b"),
    "bitwise_and": OpRow("TAND", "binary", None, None, "dst = a & b"),
    "bitwise_or": OpRow("TOR", "binary", None, None, "dst = a | b"),
}
_SCALAR = {name: OpRow(isa, "scalar", doc=doc) for name, isa, doc in [
    ("adds", "TADDS", "dst = src + s"), ("subs", "TSUBS", "dst = src - s"), ("rsubs", "TRSUBS", "dst = s - src"),
    ("muls", "TMULS", "dst = src * s"), ("divs", "TDIVS", "dst = src / s"), ("rdivs", "TRDIVS", "dst = s / src"),
    ("maxs", "TMAXS", "dst = max(src, s)"), ("mins", "TMINS", "dst = min(src, s)"),
    ("pows", "TPOWS", "dst = src ** s"), ("rpows", "TRPOWS", "dst = s ** src")]}
_UNARY = {name: OpRow(isa, "unary", doc=f"dst = {name}(src)") for name, isa in [
    ("exp", "TEXP"), ("log", "TLOG"), ("sqrt", "TSQRT"), ("rsqrt", "TRSQRT"), ("reciprocal", "TRECIP"),
    ("abs", "TABS"), ("neg", "TNEG"), ("relu", "TRELU"), ("bitwise_not", "TNOT"), ("sin", "TSIN"),
    ("cos", "TCOS"), ("tanh", "TTANH"), ("sigmoid", "TSIGMOID"), ("erf", "TERF"), ("log1p", "TLOG1P"),
    ("expm1", "TEXPM1"), ("floor", "TFLOOR"), ("ceil", "TCEIL"), ("round", "TROUND"), ("sign", "TSIGN"),
    ("isfinite", "TISFINITE"), ("copy", "TMOV_V")]}
_REDUCE = {name: OpRow(isa, form, doc=doc) for name, isa, form, doc in [
    ("row_sum", "TROWSUM", "rowreduce", "dst[:, 0] = sum over columns"),
    ("row_max", "TROWMAX", "rowreduce", "dst[:, 0] = max over columns"),
    ("row_min", "TROWMIN", "rowreduce", "dst[:, 0] = min over columns"),
    ("row_prod", "TROWPROD", "rowreduce", "dst[:, 0] = product over columns"),
    ("row_argmax", "TROWARGMAX", "rowreduce", "dst[:, 0] = argmax over columns (int32)"),
    ("col_sum", "TCOLSUM", "colreduce", "dst[0, :] = sum over rows"),
    ("col_max", "TCOLMAX", "colreduce", "dst[0, :] = max over rows"),
    ("col_min", "TCOLMIN", "colreduce", "dst[0, :] = min over rows"),
    ("col_prod", "TCOLPROD", "colreduce", "dst[0, :] = product over rows"),
    ("col_argmax", "TCOLARGMAX", "colreduce", "dst[0, :] = argmax over rows (int32)"),
    ("row_cumsum", "TROWCUMSUM", "unary", "dst = cumulative sum along columns"),
    ("col_cumsum", "TCOLCUMSUM", "unary", "dst = cumulative sum along rows")]}
_EXPAND = {}
for _kind, _axis in (("row", "rowexpand_bin"), ("col", "colexpand_bin")):
    for _op in ("add", "sub", "mul", "div", "max", "min"):
        _EXPAND[f"{_kind}_expand_{_op}"] = OpRow(f"T{_kind.upper()}EXPAND{_op.upper()}", _axis,
                                                 doc=f"dst = a {_op} broadcast({_kind} vector b)")
_EXPAND["row_expand"] = OpRow("TROWEXPAND", "rowexpand", doc="dst[r, :] = src[r, 0]")
_EXPAND["col_expand"] = OpRow("TCOLEXPAND", "colexpand", doc="dst[:, c] = src[0, c]")
_MISC = {
    "cast": OpRow("TCVT", "cast", doc="dst = src converted to dst's dtype (round: rint by default)"),
    "fill": OpRow("TEXPANDS", "fill", doc="dst[valid] = scalar"),
    "arange": OpRow("TARANGE", "arange", doc="dst[r, c] = start + c (axis=1) or start + r (axis=0)"),
    "tril": OpRow("TTRIL", "mask", doc="dst = 1 where c <= r + diagonal else 0"),
    "triu": OpRow("TTRIU", "mask", doc="dst = 1 where c >= r + diagonal else 0"),
    "compare": OpRow("TCMP", "compare", "TCMPS", None, "dst = a <mode> b (0/1)"),
    "select": OpRow("TSEL", "select", doc="dst = where(mask, a, b)"),
    "move": OpRow("TMOV", "move", doc="dst = src between buffers (L1->L0A/L0B, L0C->UB/L1, UB->UB)"),
    "transpose": OpRow("TTRANS", "transpose", doc="dst = src transposed"),
    "matmul": OpRow("TMATMUL", "matmul", doc="dst(Acc) = a(Left) @ b(Right); acc=True adds into dst"),
    "matmul_acc": OpRow("TMATMUL_ACC", "matmul", doc="dst(Acc) += a(Left) @ b(Right)"),
}
OPS: dict[str, OpRow] = {**_BINARY, **_SCALAR, **_UNARY, **_REDUCE, **_EXPAND, **_MISC}
ALIASES = {"expands": "fill", "recip": "reciprocal", "max_": "maximum", "min_": "minimum"}


# --------------------------------------------------------------------------- operand checks
def _tile(call, v, what: str, at) -> TileValue:
    if not isinstance(v, TileValue):
        kind = "a tensor" if isinstance(v, TensorValue) else ("a tile group (call .next() or index it)"
                                                             if type(v).__name__ == "TileGroup" else
                                                             type(v).__name__)
        raise call.error(f"{call.name}: {what} must be a tile, found {kind}", at=at)
    sec = call.parser.section
    core = v.space.core
    if sec is not None and core is not None and core != sec.core:
        where = "section_vector" if sec.core.value == "AIV" else "section_cube"
        raise call.error(f"{call.name}: tile '{v.slot.name}' lives in {v.space} (the "
                         f"{'vector' if core.value == 'AIV' else 'cube'} core's buffer) but is used in {where}", at=at)
    return v


def _scalar(call, v, at):
    v = norm(v)
    if isinstance(v, bool) or not (isinstance(v, (int, float)) or is_runtime(v)):
        raise call.error(f"{call.name}: expected a scalar, found {type(v).__name__}", at=at)
    return v


def _same_dtype(call, tiles: list, ats: list):
    d0 = tiles[0].dtype
    for t, at in zip(tiles[1:], ats[1:]):
        if t.dtype != d0:
            raise call.error(f"{call.name}: dtype {t.dtype.name} of '{t.slot.name}' differs from {d0.name} of "
                             f"'{tiles[0].slot.name}'", at=at, hint="convert with pl.cast(dst, src) first")


def _space(call, t: TileValue, allowed: tuple, at):
    if t.space not in allowed:
        raise call.error(f"{call.name}: tile '{t.slot.name}' is in {t.space}; this op needs "
                         + " or ".join(str(a) for a in allowed), at=at)


def _covers(call, src: TileValue, valid, at, rows=True, cols=True):
    for i, (n, v) in enumerate(zip(src.shape, valid)):
        if (i == 0 and not rows) or (i == 1 and not cols):
            continue
        if isinstance(v, int) and v > n:
            raise call.error(f"{call.name}: '{src.slot.name}' has shape {list(src.shape)}, smaller than the "
                             f"{'rows' if i == 0 else 'cols'} ({v}) this op works on", at=at)


# --------------------------------------------------------------------------- emission
def emit(call, op: str, dst, srcs: list, attrs=None, dst_valid=None, src_valids=None):
    """Append one instruction; tiles are declared with the valid shape each operand is seen with."""
    p = call.parser
    sec = p.require_section(call.frame, call.node, f"{call.name}")
    operands = []
    dst_tile = dst if isinstance(dst, TileValue) else None
    if dst_tile is not None:
        operands.append(sec.decl(dst_tile.with_valid(dst_valid)))
    else:
        operands.append(dst)
    for s in srcs:
        if isinstance(s, TileValue):
            # a source is declared with the valid shape it holds (one declaration per slot wherever the
            # program allows it: the simulator treats two declarations of one buffer as two buffers)
            operands.append(sec.decl(s.with_valid(p.valid_of(s))))
        else:
            operands.append(s)
    try:
        ins = instr(op, operands, sec.tiles, attrs, call.span.loc)
    except ValueError as e:
        raise call.error(f"{call.name}: {e}") from None
    sec.emit(ins)
    if dst_tile is not None:
        p.set_valid_fact(dst_tile, dst_valid)
    return ins


def _dst_valid(call, dst: TileValue, src: TileValue | None):
    """What an op writes: the dst view's explicit valid shape, else what the first source holds."""
    if dst.valid is not None:
        return dst.valid
    if src is not None:
        v = call.parser.valid_of(src)
        if all(isinstance(a, int) and isinstance(b, int) and a <= b for a, b in zip(v, dst.shape)) or \
                not all(isinstance(a, int) for a in v):
            return v
    return call.parser.valid_of(dst)


# --------------------------------------------------------------------------- form handlers
def _binary(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "a", "b"], f"{call.name}(dst, a, b)")
        dst = _tile(call, b["dst"], "dst", 0)
        a, bb = norm(b["a"]), norm(b["b"])
        if isinstance(a, TileValue) and isinstance(bb, TileValue):
            a, bb = _tile(call, a, "a", 1), _tile(call, bb, "b", 2)
            _same_dtype(call, [dst, a, bb], [0, 1, 2])
            for t, at in ((dst, 0), (a, 1), (bb, 2)):
                _space(call, t, (MemorySpace.Vec,), at)
            valid = _dst_valid(call, dst, a)
            _covers(call, a, valid, 1)
            _covers(call, bb, valid, 2)
            return emit(call, row.isa, dst, [a, bb], dst_valid=valid, src_valids=[valid, valid])
        if isinstance(a, TileValue):
            if row.scalar is None:
                raise call.error(f"{call.name} has no scalar form", at=2)
            a = _tile(call, a, "a", 1)
            s = _scalar(call, bb, 2)
            op, src = row.scalar, a
        elif isinstance(bb, TileValue):
            if row.rscalar is None:
                raise call.error(f"{call.name} has no scalar form", at=1)
            bb = _tile(call, bb, "b", 2)
            s = _scalar(call, a, 1)
            op, src = row.rscalar, bb
        else:
            raise call.error(f"{call.name}: one of a, b must be a tile", at=1)
        _same_dtype(call, [dst, src], [0, 1])
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = _dst_valid(call, dst, src)
        return emit(call, op, dst, [src, s], dst_valid=valid, src_valids=[valid, None])
    return handler


def _scalar_form(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "src", "scalar"], f"{call.name}(dst, src, scalar)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        s = _scalar(call, b["scalar"], 2)
        _same_dtype(call, [dst, src], [0, 1])
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = _dst_valid(call, dst, src)
        return emit(call, row.isa, dst, [src, s], dst_valid=valid, src_valids=[valid, None])
    return handler


def _unary(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "src"], f"{call.name}(dst, src)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        _same_dtype(call, [dst, src], [0, 1])
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = _dst_valid(call, dst, src)
        _covers(call, src, valid, 1)
        return emit(call, row.isa, dst, [src], dst_valid=valid, src_valids=[valid])
    return handler


def _reduce(row: OpRow):
    by_row = row.form == "rowreduce"

    def handler(p, call):
        b = call.bind(["dst", "src"], f"{call.name}(dst, src)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        _space(call, dst, (MemorySpace.Vec,), 0)
        _space(call, src, (MemorySpace.Vec,), 1)
        if "ARGMAX" in row.isa:
            if dst.dtype != dtypes.int32:
                raise call.error(f"{call.name} writes int32 indices; dst is {dst.dtype.name}", at=0)
        else:
            _same_dtype(call, [dst, src], [0, 1])
        sv = p.valid_of(src)
        valid = (sv[0], 1) if by_row else (1, sv[1])
        _covers(call, dst, valid, 0)
        return emit(call, row.isa, dst, [src], dst_valid=valid, src_valids=[sv])
    return handler


def _expand_bin(row: OpRow):
    by_row = row.form == "rowexpand_bin"

    def handler(p, call):
        b = call.bind(["dst", "a", "b"], f"{call.name}(dst, a, b)")
        dst, a, v = (_tile(call, b["dst"], "dst", 0), _tile(call, b["a"], "a", 1), _tile(call, b["b"], "b", 2))
        _same_dtype(call, [dst, a, v], [0, 1, 2])
        for t, at in ((dst, 0), (a, 1), (v, 2)):
            _space(call, t, (MemorySpace.Vec,), at)
        valid = _dst_valid(call, dst, a)
        _covers(call, a, valid, 1)
        vec_valid = (valid[0], 1) if by_row else (1, valid[1])
        _covers(call, v, vec_valid, 2)
        return emit(call, row.isa, dst, [a, v], dst_valid=valid, src_valids=[valid, vec_valid])
    return handler


def _expand(row: OpRow):
    by_row = row.form == "rowexpand"

    def handler(p, call):
        b = call.bind(["dst", "src"], f"{call.name}(dst, src)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        _same_dtype(call, [dst, src], [0, 1])
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = p.valid_of(dst) if dst.valid is None else dst.valid
        vec_valid = (valid[0], 1) if by_row else (1, valid[1])
        return emit(call, row.isa, dst, [src], dst_valid=valid, src_valids=[vec_valid])
    return handler


def _cast(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "src", ("round", None)], f"{call.name}(dst, src, round=None)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = _dst_valid(call, dst, src)
        attrs = {"round": b["round"]} if b["round"] is not None else None
        return emit(call, row.isa, dst, [src], attrs, dst_valid=valid, src_valids=[valid])
    return handler


def _fill(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "scalar"], f"{call.name}(dst, scalar)")
        dst = _tile(call, b["dst"], "dst", 0)
        _space(call, dst, (MemorySpace.Vec,), 0)
        s = _scalar(call, b["scalar"], 1)
        return emit(call, row.isa, dst, [s], dst_valid=p.valid_of(dst))
    return handler


def _arange(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", ("start", 0), ("axis", 1)], f"{call.name}(dst, start=0, axis=1)")
        dst = _tile(call, b["dst"], "dst", 0)
        _space(call, dst, (MemorySpace.Vec,), 0)
        if b["axis"] not in (0, 1):
            raise call.error("axis is 0 (rows) or 1 (columns)", at=call.where("axis") or 2)
        attrs = {"axis": 0} if b["axis"] == 0 else None
        return emit(call, row.isa, dst, [_scalar(call, b["start"], 1)], attrs, dst_valid=p.valid_of(dst))
    return handler


def _mask(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", ("diagonal", 0)], f"{call.name}(dst, diagonal=0)")
        dst = _tile(call, b["dst"], "dst", 0)
        _space(call, dst, (MemorySpace.Vec,), 0)
        return emit(call, row.isa, dst, [_scalar(call, b["diagonal"], 1)], dst_valid=p.valid_of(dst))
    return handler


def _compare(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "a", "b", "mode"], f"{call.name}(dst, a, b, mode)  # mode in {CMP_MODES}")
        dst, a = _tile(call, b["dst"], "dst", 0), _tile(call, b["a"], "a", 1)
        mode = b["mode"]
        if mode not in CMP_MODES:
            raise call.error(f"compare mode must be one of {', '.join(CMP_MODES)}, found {mode!r}",
                             at=3 if len(call.args) > 3 else "mode")
        _space(call, dst, (MemorySpace.Vec,), 0)
        valid = _dst_valid(call, dst, a)
        other = norm(b["b"])
        if isinstance(other, TileValue):
            other = _tile(call, other, "b", 2)
            _same_dtype(call, [a, other], [1, 2])
            return emit(call, row.isa, dst, [a, other], {"cmp": mode}, dst_valid=valid, src_valids=[valid, valid])
        return emit(call, row.scalar, dst, [a, _scalar(call, other, 2)], {"cmp": mode}, dst_valid=valid,
                    src_valids=[valid, None])
    return handler


def _select(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "mask", "a", "b"], f"{call.name}(dst, mask, a, b)")
        dst, mask = _tile(call, b["dst"], "dst", 0), _tile(call, b["mask"], "mask", 1)
        a, bb = _tile(call, b["a"], "a", 2), _tile(call, b["b"], "b", 3)
        _same_dtype(call, [dst, a, bb], [0, 2, 3])
        valid = _dst_valid(call, dst, a)
        return emit(call, row.isa, dst, [mask, a, bb], dst_valid=valid, src_valids=[valid, valid, valid])
    return handler


def _move(row: OpRow):
    def handler(p, call):
        b = call.bind(["dst", "src"], f"{call.name}(dst, src)")
        dst, src = _tile(call, b["dst"], "dst", 0), _tile(call, b["src"], "src", 1)
        if row.isa == "TTRANS":
            sv = p.valid_of(src)
            valid = dst.valid if dst.valid is not None else (sv[1], sv[0])
            return emit(call, row.isa, dst, [src], dst_valid=valid, src_valids=[sv])
        if dst.dtype != src.dtype and not (src.space == MemorySpace.Acc):
            raise call.error(f"{call.name}: only moves out of Acc convert dtypes ({src.dtype.name} -> "
                             f"{dst.dtype.name}); use pl.cast on Vec tiles", at=0)
        valid = _dst_valid(call, dst, src)
        return emit(call, row.isa, dst, [src], dst_valid=valid, src_valids=[valid])
    return handler


def _matmul(row: OpRow):
    def handler(p, call):
        params = ["dst", "a", "b"] + ([("acc", False)] if row.isa == "TMATMUL" else [])
        b = call.bind(params, f"{call.name}(dst, a, b{', acc=False' if row.isa == 'TMATMUL' else ''})")
        dst, a, bb = _tile(call, b["dst"], "dst", 0), _tile(call, b["a"], "a", 1), _tile(call, b["b"], "b", 2)
        _space(call, dst, (MemorySpace.Acc,), 0)
        _space(call, a, (MemorySpace.Left,), 1)
        _space(call, bb, (MemorySpace.Right,), 2)
        if a.dtype != bb.dtype:
            raise call.error(f"{call.name}: a is {a.dtype.name}, b is {bb.dtype.name}", at=2)
        want = dtypes.int32 if a.dtype.is_integer else dtypes.float32
        if dst.dtype != want:
            raise call.error(f"{call.name}: the accumulator of {a.dtype.name} inputs is {want.name}, "
                             f"found {dst.dtype.name}", at=0)
        av, bv = p.valid_of(a), p.valid_of(bb)
        if a.shape[1] != bb.shape[0]:
            raise call.error(f"{call.name}: a is {list(a.shape)} and b is {list(bb.shape)}: inner dims differ", at=2)
        valid = dst.valid if dst.valid is not None else (av[0], bv[1])
        _covers(call, dst, valid, 0)
        acc = norm(b.get("acc", False)) if row.isa == "TMATMUL" else True
        if is_runtime(acc):
            # acc decided at run time (e.g. k > 0): both forms, selected by an If
            from pypto.ir.block import If
            sec = p.section
            sec.push()
            emit(call, "TMATMUL_ACC", dst, [a, bb], dst_valid=valid)
            then_body = sec.pop()
            sec.push()
            emit(call, "TMATMUL", dst, [a, bb], dst_valid=valid)
            else_body = sec.pop()
            cond = acc if isinstance(acc, sympy.logic.boolalg.Boolean) else sympy.Ne(acc, 0)
            sec.emit(If(cond, then_body, else_body, loc=call.span.loc))
            return None
        return emit(call, "TMATMUL_ACC" if acc else "TMATMUL", dst, [a, bb], dst_valid=valid)
    return handler


_FORMS = {"binary": _binary, "scalar": _scalar_form, "unary": _unary, "rowreduce": _reduce, "colreduce": _reduce,
          "rowexpand_bin": _expand_bin, "colexpand_bin": _expand_bin, "rowexpand": _expand, "colexpand": _expand,
          "cast": _cast, "fill": _fill, "arange": _arange, "mask": _mask, "compare": _compare, "select": _select,
          "move": _move, "transpose": _move, "matmul": _matmul}

# --------------------------------------------------------------------------- the registry's names
# registry op -> the rows computing it along the columns (dim=1 or -1) and along the rows (dim=0)
BY_DIM = {"sum": ("row_sum", "col_sum"), "prod": ("row_prod", "col_prod"), "amax": ("row_max", "col_max"),
          "amin": ("row_min", "col_min"), "argmax": ("row_argmax", "col_argmax"),
          "cumsum": ("row_cumsum", "col_cumsum")}
RENAMED = {"full": "fill", "where": "select"}          # registry op -> the row computing it
# the registry's comparisons: the ops whose one instruction is TCMP, each a compare mode
COMPARISONS = tuple(op.name for op in OP_REGISTRY.values() if op.pto == "TCMP")
# Kept by their own names although the registry's logical_and / logical_or are TAND / TOR: on integer tiles
# (pl's) the instructions are bitwise, so pl.logical_and would be a wrong answer for values other than 0/1.
BITWISE = ("bitwise_and", "bitwise_or", "bitwise_not")

# old spelling -> the call that replaces it (the deprecation warning's text)
DEPRECATED = {
    **{old: f"{new}(dst, src, dim={d})" for new, rows in BY_DIM.items() for d, old in zip((1, 0), rows)},
    **{old: new for new, old in RENAMED.items()},
    "compare": "eq / ne / lt / le / gt / ge (dst, a, b)", "expands": "full", "recip": "reciprocal",
    "max_": "maximum", "min_": "minimum",
    **{f"{op}s": f"{new}(dst, src, scalar)" for op, new in
       (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"), ("max", "maximum"), ("min", "minimum"),
        ("pow", "pow"))},
    "rsubs": "sub(dst, scalar, src)", "rdivs": "div(dst, scalar, src)", "rpows": "pow(dst, scalar, src)",
}


def _check_registry_names():
    """Every name pl takes from the registry is the registry's (a renamed registry op fails here, at import)."""
    missing = [n for n in (*BY_DIM, *RENAMED) if n not in OP_REGISTRY]
    if missing or set(COMPARISONS) != set(CMP_MODES):
        raise ImportError(f"pl's op names are out of step with pypto.ops.registry: {missing or COMPARISONS}")


def _by_dim(rows: tuple):
    along_cols, along_rows = (_FORMS[OPS[r].form](OPS[r]) for r in rows)

    def handler(p, call):
        b = call.bind(["dst", "src", "dim"], f"{call.name}(dst, src, dim)  # dim 1 (or -1): over columns, 0: rows")
        dim = norm(b["dim"])
        if isinstance(dim, bool) or dim not in (-1, 0, 1):
            raise call.error(f"{call.name}: dim is 1 or -1 (over the columns: one value per row) or 0 (over the "
                             f"rows: one value per column), found {dim!r}", at=call.where("dim") or 2)
        two = replace(call, args=call.args[:2], arg_nodes=call.arg_nodes[:2],
                      kwargs={k: v for k, v in call.kwargs.items() if k != "dim"},
                      kw_nodes={k: v for k, v in call.kw_nodes.items() if k != "dim"})
        return (along_rows if dim == 0 else along_cols)(p, two)
    return handler


def _comparison(mode: str):
    inner = _compare(OPS["compare"])

    def handler(p, call):
        b = call.bind(["dst", "a", "b"], f"{call.name}(dst, a, b)")
        return inner(p, replace(call, args=[b["dst"], b["a"], b["b"], mode], kwargs={},
                                arg_nodes=list(call.arg_nodes[:3]), kw_nodes={}))
    return handler


def _deprecated(old: str, handler):
    new = DEPRECATED[old]

    def warn_then(p, call):
        span = call.span
        warnings.warn_explicit(f"pl.{old} is deprecated: use pl.{new} (the op registry's name)",
                               DeprecationWarning, span.file, span.line,
                               module=call.frame.globals.get("__name__", "pypto_pro.kernel"))
        return handler(p, call)
    return warn_then


_check_registry_names()
for _name, _row in OPS.items():
    _handler = _FORMS[_row.form](_row)
    if _name in DEPRECATED:
        _handler = _deprecated(_name, _handler)
        _doc = f"pl.{_name}: deprecated, use pl.{DEPRECATED[_name]}  ({_row.isa})"
    else:
        _doc = f"pl.{_name}: {_row.doc}  ({_row.isa})"
    globals()[_name] = dsl(_name, _doc)(_handler)
for _alias, _target in ALIASES.items():
    globals()[_alias] = dsl(_alias, f"deprecated, use pl.{DEPRECATED[_alias]}")(
        _deprecated(_alias, _FORMS[OPS[_target].form](OPS[_target])))
# (registered in the DSL only: as module globals sum / where ... would shadow builtins inside this module)
for _name, _rows in BY_DIM.items():
    dsl(_name, f"pl.{_name}(dst, src, dim): the registry's {_name} over one axis of a tile "
                                  f"(dim 1: {OPS[_rows[0]].isa}, dim 0: {OPS[_rows[1]].isa})")(_by_dim(_rows))
for _name, _old in RENAMED.items():
    dsl(_name, f"pl.{_name}: {OPS[_old].doc}  ({OPS[_old].isa})")(_FORMS[OPS[_old].form](OPS[_old]))
for _mode in COMPARISONS:
    dsl(_mode, f"pl.{_mode}(dst, a, b): dst = a {_mode} b (0/1)  (TCMP / TCMPS)")(_comparison(_mode))


# --------------------------------------------------------------------------- GM <-> tile
def _tensor(call, v, at) -> TensorValue:
    if not isinstance(v, TensorValue):
        raise call.error(f"{call.name}: expected a tensor argument (or a workspace slot), found "
                         f"{type(v).__name__}", at=at)
    return v


def _coords(call, v, n: int, at, what: str) -> list:
    if v is None:
        return [0] * n
    if not isinstance(v, (list, tuple)):
        v = [v]
    v = [norm(x) for x in v]
    if len(v) != n:
        raise call.error(f"{call.name}: {n} {what} for a {n}-d tensor, found {len(v)}", at=at)
    for x in v:
        if isinstance(x, bool) or not (isinstance(x, int) or is_runtime(x)):
            raise call.error(f"{call.name}: {what} are integers, found {type(x).__name__}", at=at)
    return v


def _box_valid(call, tile: TileValue, src: TensorValue, rel: list, trans: bool):
    """The extent of the GM box: the tile's extent, clipped at the tensor's edge."""
    ranges = call.parser.loop_ranges
    rows, cols = tile.shape
    if trans:
        rows, cols = cols, rows
    if src.ndim == 1:
        return (1, clip(cols, src.shape[0] - rel[0], ranges))
    r = clip(rows, src.shape[-2] - rel[-2], ranges)
    c = clip(cols, src.shape[-1] - rel[-1], ranges)
    return (c, r) if trans else (r, c)


def _load(call, dst: TileValue, src: TensorValue, rel: list, valid, trans: bool):
    _space(call, dst, (MemorySpace.Vec, MemorySpace.Mat), 0)
    if dst.dtype != src.dtype:
        raise call.error(f"{call.name}: tile '{dst.slot.name}' is {dst.dtype.name} but tensor {src.param} is "
                         f"{src.dtype.name}; loads do not convert", at=0, hint="load, then pl.cast")
    clipped = valid is None and dst.valid is None
    if valid is None:
        valid = dst.valid if dst.valid is not None else _box_valid(call, dst, src, rel, trans)
    attrs = dict(handoff_attrs(src) or {})
    if trans:
        attrs["trans"] = True
    region = GMRegion(src.param, src.offsets(rel), clipped=clipped)
    return emit(call, "TLOAD", dst, [region], attrs or None, dst_valid=tuple(valid))


def _store(call, dst: TensorValue, src: TileValue, rel: list, valid):
    _space(call, src, (MemorySpace.Vec, MemorySpace.Acc), 1)
    if src.dtype != dst.dtype and src.space != MemorySpace.Acc:
        raise call.error(f"{call.name}: tile '{src.slot.name}' is {src.dtype.name} but tensor {dst.param} is "
                         f"{dst.dtype.name}; stores from Vec do not convert", at=1, hint="pl.cast first")
    clipped = valid is None
    if valid is None:
        # what the tile holds, clipped at the tensor's edge (a tail block writes only its rows)
        held = call.parser.valid_of(src)
        edge = _box_valid(call, src, dst, rel, False)
        valid = tuple(e if isinstance(h, int) and isinstance(e, int) and e <= h else
                      (h if e == src.shape[i] else _min(h, e)) for i, (h, e) in enumerate(zip(held, edge)))
    region = GMRegion(dst.param, dst.offsets(rel), clipped=clipped)
    p = call.parser
    sec = p.require_section(call.frame, call.node, call.name)
    name = sec.decl(src.with_valid(tuple(valid)))
    try:
        ins = instr("TSTORE", [region, name], sec.tiles, handoff_attrs(dst), call.span.loc)
    except ValueError as e:
        raise call.error(f"{call.name}: {e}") from None
    sec.emit(ins)
    return ins


def _min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if str(a) == str(b):
        return a
    return sympy.Min(a, b)


def _valid_arg(call, v, at):
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise call.error(f"{call.name}: valid_shape is [rows, cols]", at=at)
    return tuple(norm(x) for x in v)


@dsl("load", "load(dst, src, offsets=None, valid_shape=None, trans=False): GM box at element offsets -> tile")
def load(p, call):
    b = call.bind(["dst", "src", ("offsets", None), ("valid_shape", None), ("trans", False)],
                  "pl.load(dst_tile, src_tensor, offsets=[...], valid_shape=None, trans=False)")
    dst, src = _tile(call, b["dst"], "dst", 0), _tensor(call, b["src"], 1)
    rel = _coords(call, b["offsets"], src.ndim, call.where("offsets") or 2, "offsets")
    return _load(call, dst, src, rel, _valid_arg(call, b["valid_shape"], "valid_shape"), bool(b["trans"]))


@dsl("store", "store(dst, src, offsets=None, valid_shape=None): tile -> GM box at element offsets")
def store(p, call):
    b = call.bind(["dst", "src", ("offsets", None), ("valid_shape", None)],
                  "pl.store(dst_tensor, src_tile, offsets=[...], valid_shape=None)")
    dst, src = _tensor(call, b["dst"], 0), _tile(call, b["src"], "src", 1)
    rel = _coords(call, b["offsets"], dst.ndim, call.where("offsets") or 2, "offsets")
    return _store(call, dst, src, rel, _valid_arg(call, b["valid_shape"], "valid_shape"))


def _tile_offsets(call, tile: TileValue, t: TensorValue, coords: list, trans: bool = False) -> list:
    rows, cols = tile.shape
    if trans:
        rows, cols = cols, rows
    out = list(coords)
    out[-1] = norm(coords[-1] * cols)
    if t.ndim >= 2:
        out[-2] = norm(coords[-2] * rows)
    return out


@dsl("load_tile", "load_tile(dst, src, coords): the tile at tile coordinates coords of src (tails clipped)")
def load_tile(p, call):
    b = call.bind(["dst", "src", "coords", ("trans", False)], "pl.load_tile(dst_tile, src_tensor, [ti, tj])")
    dst, src = _tile(call, b["dst"], "dst", 0), _tensor(call, b["src"], 1)
    coords = _coords(call, b["coords"], src.ndim, 2, "tile coordinates")
    rel = _tile_offsets(call, dst, src, coords, bool(b["trans"]))
    return _load(call, dst, src, rel, None, bool(b["trans"]))


@dsl("store_tile", "store_tile(dst, src, coords): tile -> the tile at tile coordinates coords of dst")
def store_tile(p, call):
    b = call.bind(["dst", "src", "coords"], "pl.store_tile(dst_tensor, src_tile, [ti, tj])")
    dst, src = _tensor(call, b["dst"], 0), _tile(call, b["src"], "src", 1)
    coords = _coords(call, b["coords"], dst.ndim, 2, "tile coordinates")
    rel = _tile_offsets(call, src, dst, coords)
    return _store(call, dst, src, rel, None)


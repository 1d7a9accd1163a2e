"""How each vector op becomes tile instructions (the lowering table of the vector unit).

An elementwise op whose registry entry names its instruction (OpDef.pto: exp -> TEXP, add -> TADD,
lt -> TCMP) is lowered by the generic unary / binary rule from that entry alone; the other ops have
a rule of their own here (SPECIAL_RULES).

Operands reach a rule as ("tile", name) or ("scalar", value, dtype). Binary ops pick the PTO form
from the operands' shapes: tile-tile (TADD), tile-scalar (TADDS / TRSUBS ...), a column or a row
broadcast against a full tile (TROWEXPANDSUB / TCOLEXPANDMUL ...), otherwise the broadcast operand
is expanded first (TROWEXPAND / TCOLEXPAND). Sources of another dtype are converted (TCVT) to the
compute dtype first, as the hardware's vector instructions take one dtype. Ops without a single PTO
instruction (silu, gelu, softplus, clip...) expand into a short sequence computed in fp32 and
rounded once, like the reference.
"""
from __future__ import annotations

import math

from .. import dtypes
from ..errors import CompileError
from ..ir.isa import ISA
from ..ops.registry import REGISTRY
from .iterspace import op_class, reduce_dims

F32 = dtypes.float32

CMP_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
# reductions: row instr, col instr, combine instr (two-level), identity
REDUCE = {"sum": ("TROWSUM", "TCOLSUM", "TADD", 0.0), "prod": ("TROWPROD", "TCOLPROD", "TMUL", 1.0),
          "amax": ("TROWMAX", "TCOLMAX", "TMAX", -math.inf), "amin": ("TROWMIN", "TCOLMIN", "TMIN", math.inf),
          "argmax": ("TROWARGMAX", "TCOLARGMAX", None, None)}


# ---------------------------------------------------------------- operand helpers
def _tile(b, opnd, dtype, like=None):
    """A tile holding the operand in ``dtype`` (scalars become filled tiles shaped like ``like``)."""
    if opnd[0] == "scalar":
        r, c = b.presence[like] if like else (False, False)
        t = b.new_tile(dtype, r, c, "s")
        b.emit("TEXPANDS", [t, opnd[1]])
        return t
    t = opnd[1]
    return convert(b, t, dtype)


def convert(b, tile, dtype):
    if b.tiles[tile].dtype == dtype:
        return tile
    key = ("cvt", tile, dtype.name)
    if key in b.tile_of:
        return b.tile_of[key]
    r, c = b.presence[tile]
    t = b.new_tile(dtype, r, c, "c")
    attrs = {"round": "trunc"} if (b.tiles[tile].dtype.is_floating and not dtype.is_floating) else {}
    if dtype == dtypes.bool_:
        b.emit("TCMPS", [t, tile, 0], {"cmp": "ne"})
    else:
        b.emit("TCVT", [t, tile], attrs)
    b.tile_of[key] = t
    return t


def expand(b, tile, has_row, has_col):
    """Broadcast a tile to the given presence (row/col axes)."""
    r, c = b.presence[tile]
    if (r, c) == (has_row, has_col):
        return tile
    dt = b.tiles[tile].dtype
    if has_col and not c:
        t = b.new_tile(dt, r, True, "e")
        b.emit("TROWEXPAND", [t, tile])
        tile, c = t, True
    if has_row and not r:
        t = b.new_tile(dt, True, c, "e")
        b.emit("TCOLEXPAND", [t, tile])
        tile = t
    return tile


def _out_presence(b, *tiles):
    r = any(b.presence[t][0] for t in tiles)
    c = any(b.presence[t][1] for t in tiles)
    return r, c


def binary(b, instr, x, y, compute_dtype, out_dtype, attrs=None):
    """dst = x <instr> y with broadcasting; x, y operands; returns the result tile (out_dtype)."""
    attrs = dict(attrs or {})
    if x[0] == "scalar" and y[0] == "scalar":
        raise CompileError("internal: a binary op of two scalars reached the tiler")
    if y[0] == "scalar" or x[0] == "scalar":
        tile_first = y[0] == "scalar"
        t_op, s_op = (x, y) if tile_first else (y, x)
        t = convert(b, t_op[1], compute_dtype)
        form = None
        if instr == "TCMP":
            form = "TCMPS"
            if not tile_first:
                attrs["cmp"] = CMP_SWAP[attrs["cmp"]]
        elif ISA[instr].scalar_forms:
            form = ISA[instr].scalar_forms[0 if tile_first else 1]
        if form is not None:
            dst = b.like(t, out_dtype, "v")
            b.emit(form, [dst, t, s_op[1]], attrs)
            return dst
        s = _tile(b, s_op, compute_dtype, like=t)
        x, y = (("tile", t), ("tile", s)) if tile_first else (("tile", s), ("tile", t))
    a = convert(b, x[1], compute_dtype)
    c = convert(b, y[1], compute_dtype)
    r, col = _out_presence(b, a, c)
    pa, pc = b.presence[a], b.presence[c]
    full = (r, col)
    spec = ISA[instr]
    if pa != full and pc == full and spec.commutative:
        a, c, pa, pc = c, a, pc, pa
    dst = b.new_tile(out_dtype, r, col, "v")
    if pa == full and pc != full and spec.expand_forms and pc in ((r, False), (False, col)) and (r and col):
        row_expand, col_expand = spec.expand_forms
        b.emit(row_expand if pc == (True, False) else col_expand, [dst, a, c], attrs)
        return dst
    a, c = expand(b, a, r, col), expand(b, c, r, col)
    b.emit(instr, [dst, a, c], attrs)
    return dst


def _result(b, n, tile):
    b.tile_of[n] = tile


# ---------------------------------------------------------------- rules
def _rule_binary(b, n):
    op = REGISTRY[b.g.op(n)]
    x, y = b.operand(n, 0), b.operand(n, 1)
    out = b.g.info(n).dtype
    if op.pto == "TCMP":
        ins = [b.g.info(i).dtype for i in b.g.node(n)["inputs"]]
        _result(b, n, binary(b, "TCMP", x, y, dtypes.promote(ins[0], ins[1]), out, {"cmp": op.name}))
    elif op.form == "comparison":       # logical_and / logical_or: on bools
        _result(b, n, binary(b, op.pto, x, y, dtypes.bool_, out))
    else:
        _result(b, n, binary(b, op.pto, x, y, out, out))


def _rule_unary(b, n):
    op = REGISTRY[b.g.op(n)]
    x = b.operand(n, 0)
    out = b.g.info(n).dtype
    src = _tile(b, x, out if out != dtypes.bool_ else b.g.info(b.g.node(n)["inputs"][0]).dtype)
    dst = b.like(src, out, "v")
    b.emit(op.pto, [dst, src])
    _result(b, n, dst)


def _fp32_unary(b, n, body):
    """Run ``body(xf) -> fp32 tile`` on the fp32 form of the input, then round once to the result dtype."""
    x = b.operand(n, 0)
    out = b.g.info(n).dtype
    xf = _tile(b, x, F32)
    res = body(xf)
    _result(b, n, convert(b, res, out) if out != F32 else res)


def _u(b, instr, src, *scalars):
    dst = b.like(src, F32, "f")
    b.emit(instr, [dst, src, *scalars])
    return dst


def _silu(b, n):
    _fp32_unary(b, n, lambda x: _bin(b, "TMUL", x, _u(b, "TSIGMOID", x)))


def _bin(b, instr, x, y):
    dst = b.like(x, F32, "f")
    b.emit(instr, [dst, x, y])
    return dst


def _softplus(b, n):
    # torch: x > 20 ? x : log1p(exp(x)); computed stably as relu(x) + log1p(exp(-|x|))
    def body(x):
        t = _u(b, "TLOG1P", _u(b, "TEXP", _u(b, "TNEG", _u(b, "TABS", x))))
        return _bin(b, "TADD", _u(b, "TRELU", x), t)
    _fp32_unary(b, n, body)


def _gelu(b, n):
    approx = b.g.node(n)["attrs"].get("approximate", "none")

    def body(x):
        if approx == "tanh":
            x3 = _bin(b, "TMUL", _bin(b, "TMUL", x, x), x)
            inner = _bin(b, "TADD", x, _u(b, "TMULS", x3, 0.044715))
            t = _u(b, "TTANH", _u(b, "TMULS", inner, math.sqrt(2.0 / math.pi)))
        else:
            t = _u(b, "TERF", _u(b, "TMULS", x, 1.0 / math.sqrt(2.0)))
        return _u(b, "TMULS", _bin(b, "TMUL", x, _u(b, "TADDS", t, 1.0)), 0.5)
    _fp32_unary(b, n, body)


def _exp2(b, n):
    _fp32_unary(b, n, lambda x: _u(b, "TRPOWS", x, 2.0))


def _logical_not(b, n):
    x = b.operand(n, 0)
    src = x[1] if x[0] == "tile" else _tile(b, x, b.g.info(b.g.node(n)["inputs"][0]).dtype)
    dst = b.like(src, dtypes.bool_, "v")
    if b.tiles[src].dtype == dtypes.bool_:
        b.emit("TNOT", [dst, src])
    else:
        b.emit("TCMPS", [dst, src, 0], {"cmp": "eq"})
    _result(b, n, dst)


def _cast(b, n):
    x = b.operand(n, 0)
    _result(b, n, _tile(b, x, b.g.info(n).dtype))


def _clip(b, n):
    a = b.g.node(n)["attrs"]
    out = b.g.info(n).dtype
    t = _tile(b, b.operand(n, 0), out)
    for key, instr in (("min", "TMAXS"), ("max", "TMINS")):
        if a.get(key) is not None:
            dst = b.like(t, out, "v")
            b.emit(instr, [dst, t, a[key]])
            t = dst
    if t == b.operand(n, 0)[1]:
        dst = b.like(t, out, "v")
        b.emit("TMOV_V", [dst, t])
        t = dst
    _result(b, n, t)


def _where(b, n):
    out = b.g.info(n).dtype
    cond, x, y = (b.operand(n, k) for k in range(3))
    tiles = [o[1] for o in (cond, x, y) if o[0] == "tile"]
    r, c = _out_presence(b, *tiles) if tiles else (False, False)
    ref = b.new_tile(out, r, c, "w") if not tiles else None
    like = tiles[0] if tiles else ref

    def full(o, dt):
        t = _tile(b, o, dt, like=like)
        return expand(b, t, r, c)
    m = full(cond, dtypes.bool_)
    xa, ya = full(x, out), full(y, out)
    dst = b.new_tile(out, r, c, "v")
    b.emit("TSEL", [dst, m, xa, ya])
    _result(b, n, dst)


def _full(b, n):
    a = b.g.node(n)["attrs"]
    sp = b.plan.spaces[n]
    axes = {b.canon.axis_of[d.find()] for d in sp.out_map if d is not None}
    r = b.canon.row is not None and b.canon.row in axes
    c = bool(b.axes) and b.canon.col in axes
    dst = b.new_tile(b.g.info(n).dtype, r, c, "v")
    b.emit("TEXPANDS", [dst, b.scalar_value(a["value"])])
    _result(b, n, dst)


def _arange(b, n):
    a = b.g.node(n)["attrs"]
    dt = b.g.info(n).dtype
    start, step = a["start"], a["step"]
    (d,) = [d for d in b.plan.spaces[n].out_map if d is not None] or [None]
    if d is None:
        dst = b.new_tile(dt, False, False, "v")
        b.emit("TEXPANDS", [dst, b.scalar_value(start)])
        return _result(b, n, dst)
    k = b.canon.axis_of[d.find()]
    kind, axis = b.canon.kind(k), b.axes[k]
    base = axis.index * (1 if kind == "grid" else axis.tile)
    if kind == "grid":
        dst = b.new_tile(dt, False, False, "v")
        b.emit("TEXPANDS", [dst, b.scalar_value(start + base * step)])
        return _result(b, n, dst)
    row = kind == "row"
    attrs = {"axis": 0} if row else {}
    dst = b.new_tile(dt, row, not row, "v")
    if step == 1:
        b.emit("TARANGE", [dst, b.scalar_value(start + base)], attrs)
    else:
        t = b.new_tile(F32 if dt.is_floating else dt, row, not row, "f")
        b.emit("TARANGE", [t, b.scalar_value(base)], attrs)
        t2 = b.like(t, hint="f")
        b.emit("TMULS", [t2, t, b.scalar_value(step)])
        b.emit("TADDS", [dst, t2, b.scalar_value(start)])
    _result(b, n, dst)


def _mask(b, n):
    op = b.g.op(n)
    diag = b.g.node(n)["attrs"].get("diagonal", 0)
    x = b.operand(n, 0)
    out = b.g.info(n).dtype
    xt = _tile(b, x, out)
    canon = b.canon
    if canon.row is None:
        raise CompileError(f"{op} needs rows and columns in one tile", loc=b.g.node(n)["loc"])
    row, col = b.axes[canon.row], b.axes[canon.col]
    shift = row.index * row.tile - col.index * col.tile + diag
    mask = b.like(xt, dtypes.bool_, "m")
    b.emit("TTRIL" if op == "tril" else "TTRIU", [mask, b.scalar_value(shift)])
    zero = b.like(xt, out, "z")
    b.emit("TEXPANDS", [zero, 0])
    dst = b.like(xt, out, "v")
    b.emit("TSEL", [dst, mask, xt, zero])
    _result(b, n, dst)


def _copy(b, n):
    x = b.operand(n, 0)
    _result(b, n, _tile(b, x, b.g.info(n).dtype))


def _alias(b, n):
    x = b.operand(n, 0)
    _result(b, n, x[1] if x[0] == "tile" else _tile(b, x, b.g.info(n).dtype))


def _scan(b, n):
    sp = b.plan.spaces[n]
    if not sp.scans:                 # along a dim of size 1: the value itself
        return _copy(b, n)
    (d,) = sp.scans
    kind = b.canon.kind(b.canon.axis_of[d.find()])
    out = b.g.info(n).dtype
    x = _tile(b, b.operand(n, 0), out)
    r, c = b.presence[x]
    x = expand(b, x, r or kind == "row", c or kind == "col")     # an input broadcast along the scanned dim
    dst = b.like(x, out, "v")
    b.emit("TROWCUMSUM" if kind == "col" else "TCOLCUMSUM", [dst, x])
    _result(b, n, dst)


def _identity_as(identity: float, dt):
    """A reduction's identity as a value of its accumulator's dtype: an integer accumulator takes an
    integer (0.0 in an i64 tile's TEXPANDS failed at C++ generation), +-inf becomes the dtype's bound."""
    if dt.is_floating or identity is None:
        return identity
    if math.isinf(identity):
        import torch
        if dt.torch_dtype == torch.bool:
            return int(identity > 0)
        info = torch.iinfo(dt.torch_dtype)
        return info.max if identity > 0 else info.min
    return int(identity)


def _reduce(b, n):
    op = b.g.op(n)
    sp = b.plan.spaces[n]
    row_i, col_i, combine, identity = REDUCE[op]
    out = b.g.info(n).dtype
    src = _tile(b, b.operand(n, 0), b.g.info(b.g.node(n)["inputs"][0]).dtype)
    canon = b.canon
    kinds = {canon.kind(canon.axis_of[d.find()]) for d in sp.reduces}
    seq = any(canon.roles[canon.axis_of[d.find()]] == "seq" for d in sp.reduces)
    acc_dt = F32 if (out.is_floating and seq) else out
    if op == "argmax":
        acc_dt = dtypes.int32
    if op in ("sum", "prod"):        # an input broadcast along a reduced dim counts once per element
        src = expand(b, src, b.presence[src][0] or "row" in kinds, b.presence[src][1] or "col" in kinds)
    r, c = b.presence[src]
    t = src
    if "col" in kinds and c:
        dst = b.new_tile(acc_dt, r, False, "r")
        b.emit(row_i, [dst, t])
        t, c = dst, False
    if "row" in kinds and r:
        dst = b.new_tile(acc_dt, False, c, "r")
        b.emit(col_i, [dst, t])
        t, r = dst, False
    if "grid" in kinds and not seq:
        raise CompileError(f"{op} over a dim that is not one of the tile's two axes", loc=b.g.node(n)["loc"])
    if seq:
        if combine is None:
            raise CompileError(f"{op} over a dim too long for one tile is not supported", loc=b.g.node(n)["loc"])
        if t == src and b.tiles[t].dtype != acc_dt:
            t = convert(b, t, acc_dt)
        acc = b.new_tile(acc_dt, r, c, "acc", phase="pre")
        b.emit("TEXPANDS", [acc, _identity_as(identity, acc_dt)], phase="pre")
        b.emit(combine, [acc, acc, t], phase="step")
        res = acc
        if acc_dt != out:
            fin = b.new_tile(out, r, c, "v", phase="pre")
            b.emit("TCVT", [fin, acc], phase="post")
            res = fin
        _result(b, n, res)
        return
    if t == src and op == "argmax":      # along size-1 dims only: every index is 0
        t = b.new_tile(acc_dt, r, c, "v")
        b.emit("TEXPANDS", [t, 0])
    elif t == src:          # nothing to reduce along the tile (size-1 / grid-only dims)
        t = _tile(b, ("tile", src), acc_dt)
    if b.tiles[t].dtype != out:
        t = convert(b, t, out)
    _result(b, n, t)


# ops that are not one instruction of their registry entry (OpDef.pto is None for each)
SPECIAL_RULES = {"silu": _silu, "softplus": _softplus, "gelu": _gelu, "exp2": _exp2, "logical_not": _logical_not,
                 "cast": _cast, "clip": _clip, "where": _where, "full": _full, "arange": _arange,
                 "tril": _mask, "triu": _mask, "cumsum": _scan, "copy": _copy}
SPECIAL_RULES |= {op: _reduce for op in REDUCE}
_GENERIC_RULES = {"unary": _rule_unary, "binary": _rule_binary, "comparison": _rule_binary}


def rule_of(op: str):
    """The lowering rule of ``op``, or None when the vector unit has none."""
    if op in SPECIAL_RULES:
        return SPECIAL_RULES[op]
    od = REGISTRY.get(op)
    if od is not None and od.pto is not None and od.form in _GENERIC_RULES:
        return _GENERIC_RULES[od.form]
    return None


def lower_node(b, n):
    op = b.g.op(n)
    if op_class(b.g, n) == "alias":
        return _alias(b, n)
    rule = rule_of(op)
    if rule is None:
        raise CompileError(f"op '{op}' has no vector lowering yet", loc=b.g.node(n)["loc"])
    rule(b, n)


__all__ = ["lower_node", "rule_of", "SPECIAL_RULES", "reduce_dims"]

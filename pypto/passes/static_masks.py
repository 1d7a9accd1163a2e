"""Masks known at compile time: which elements of a TensorGraph value are zero because of an index mask.

A mask here is a conjunction of affine constraints ``a*i + b*j + c >= 0`` (integers) over a value's last two
dims, ``i`` the row and ``j`` the column: causal ``j <= i + d``, ``tril``/``triu`` with a diagonal, a sliding
window ``i - w < j <= i``. Two sources are recognised:
* ``where(cond, x, c)`` (or ``where(cond, c, x)``) whose ``cond`` is built from ``arange`` values reshaped to a
  column ``[L, 1]`` (the row index) or a row ``[1, S]`` (the column index), scaled or shifted by Python scalars,
  compared (``lt le gt ge``) and combined with ``logical_and``;
* ``tril(x, d)`` / ``triu(x, d)``.

``zero_mask(g, nid)`` is the contract the tiling reads: a ``StaticMask`` whose False elements of value ``nid``
are exactly 0, or None. Zeros are followed through the softmax (``where(..., -inf)``, a finite positive scale,
``sub`` of the row's ``amax``, ``exp``, ``div`` by the row's ``sum`` of those exps) and ``cast``; the softmax
step needs every row to keep at least one column (checked exactly, static sizes only), since a row with none
is NaN in torch, not 0. Anything else (a mask read from a tensor, a non-affine index expression) gives None:
the full computation stays.

``StaticMask.col_range(r0, r1)`` is the range of columns that may be kept by rows ``r0..r1`` (sympy, a
superset when several constraints bound the same side): cube_tiling runs the K loop of ``P @ V`` over it only,
and narrows the row tiles of the softmax making P to the columns that loop reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

_CMP = {"le", "lt", "ge", "gt"}


@dataclass(frozen=True)
class Affine:
    """``a*i + b*j + c``: i the row index, j the column index."""
    a: int
    b: int
    c: int

    def __add__(self, o):
        return Affine(self.a + o.a, self.b + o.b, self.c + o.c)

    def scale(self, k: int):
        return Affine(self.a * k, self.b * k, self.c * k)


@dataclass(frozen=True)
class StaticMask:
    """Elements with every ``a*i + b*j + c >= 0`` are kept, the others masked."""
    constraints: tuple

    def keeps(self, i: int, j: int) -> bool:
        return all(k.a * i + k.b * j + k.c >= 0 for k in self.constraints)

    def col_range(self, r0, r1):
        """(lo, hi): every column a row in ``r0..r1`` (inclusive, sympy) keeps lies in ``lo..hi``; None on a
        side no constraint bounds. Each constraint needs ``b`` = +-1 (no rounding)."""
        lo, hi = [], []
        for k in self.constraints:
            if k.b == 0:
                continue
            # b*j >= -(a*i + c): for b = 1 a lower bound, for b = -1 an upper bound; extreme row by a's sign
            if k.b == 1:
                lo.append(-k.c - k.a * (r1 if k.a > 0 else r0))
            else:
                hi.append(k.c + k.a * (r1 if k.a > 0 else r0))
        return (sympy.Max(*lo) if lo else None), (sympy.Min(*hi) if hi else None)

    def every_row_keeps_one(self, rows: int, cols: int) -> bool:
        """Exact: each row 0..rows-1 keeps at least one column of 0..cols-1."""
        for i in range(rows):
            lo, hi = 0, cols - 1
            for k in self.constraints:
                rest = k.a * i + k.c          # b*j + rest >= 0
                if k.b > 0:
                    lo = max(lo, -(rest // k.b))        # j >= ceil(-rest / b)
                elif k.b < 0:
                    hi = min(hi, rest // -k.b)          # j <= floor(rest / -b)
                elif rest < 0:
                    return False
            if lo > hi:
                return False
        return True

    def usable_for_ranges(self) -> bool:
        return all(k.b in (-1, 0, 1) for k in self.constraints)


def _scalar(g, nid):
    node = g.node(nid)
    if node["op"] != "scalar":
        return None
    return node["attrs"].get("value")


def _int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _index(g, nid):
    """The Affine form of an index value (shape [L, 1] or [1, S], leading 1s allowed), or None."""
    node = g.node(nid)
    op = node["op"]
    if op == "scalar":
        v = _int(node["attrs"].get("value"))
        return None if v is None else Affine(0, 0, v)
    shape = g.info(nid).shape
    if op == "reshape":
        src = node["inputs"][0]
        sn = g.node(src)
        if sn["op"] != "arange" or len(shape) < 2 or any(d != 1 for d in shape[:-2]):
            return None
        start, step = sn["attrs"]["start"], sn["attrs"]["step"]
        if _int(start) is None or _int(step) is None:
            return None
        if shape[-1] == 1:
            return Affine(step, 0, start)
        if shape[-2] == 1:
            return Affine(0, step, start)
        return None
    if op in ("add", "sub", "mul") and len(node["inputs"]) == 2:
        x, y = (_index(g, s) for s in node["inputs"])
        if x is None or y is None:
            return None
        if op == "add":
            return x + y
        if op == "sub":
            return x + y.scale(-1)
        for p, q in ((x, y), (y, x)):       # mul: one side a constant
            if p.a == 0 and p.b == 0:
                return q.scale(p.c)
    return None


def _condition(g, nid):
    """The constraints a bool mask value stands for, or None."""
    node = g.node(nid)
    op = node["op"]
    if op == "logical_and":
        parts = [_condition(g, s) for s in node["inputs"]]
        return None if any(p is None for p in parts) else parts[0] + parts[1]
    if op not in _CMP:
        return None
    x, y = (_index(g, s) for s in node["inputs"])
    if x is None or y is None:
        return None
    d = {"le": y + x.scale(-1), "ge": x + y.scale(-1),              # y - x >= 0, x - y >= 0
         "lt": y + x.scale(-1) + Affine(0, 0, -1), "gt": x + y.scale(-1) + Affine(0, 0, -1)}[op]
    if d.a == 0 and d.b == 0:
        return None                  # constant condition: nothing to skip by
    return (d,)


def _where_mask(g, nid):
    """(mask, fill) of ``where(cond, x, fill)`` / ``where(cond, fill, x)`` with an affine cond."""
    node = g.node(nid)
    if node["op"] != "where":
        return None
    cond, a, b = node["inputs"]
    cons = _condition(g, cond)
    if cons is None:
        return None
    fa, fb = _scalar(g, a), _scalar(g, b)
    if fb is not None:
        return StaticMask(cons), fb
    if fa is not None:
        if len(cons) != 1:
            return None                  # the negation of a conjunction is not a conjunction
        k = cons[0]
        return StaticMask((Affine(-k.a, -k.b, -k.c - 1),)), fa
    return None


def _triangle(g, nid):
    node = g.node(nid)
    d = node["attrs"].get("diagonal", 0)
    if node["op"] == "tril":                     # keep j <= i + d
        return StaticMask((Affine(1, -1, d),))
    return StaticMask((Affine(-1, 1, -d),))       # triu: keep j >= i + d


def _rows_cols(g, nid):
    shape = g.info(nid).shape
    return shape[-2], shape[-1]


def _static_rows_keep(g, nid, mask) -> bool:
    r, c = _rows_cols(g, nid)
    return isinstance(r, int) and isinstance(c, int) and mask.every_row_keeps_one(r, c)


def neg_inf_mask(g, nid):
    """A mask whose False elements of ``nid`` are exactly -inf (finite where kept is not claimed)."""
    node = g.node(nid)
    op = node["op"]
    wm = _where_mask(g, nid)
    if wm is not None:
        mask, fill = wm
        return mask if fill == float("-inf") else None
    if op in ("mul", "div", "add", "sub") and len(node["inputs"]) == 2:
        x, y = node["inputs"]
        s = _scalar(g, y)
        if s is None or not math.isfinite(s) or (op in ("mul", "div") and s <= 0):
            return None
        return neg_inf_mask(g, x)
    if op == "cast":
        return neg_inf_mask(g, node["inputs"][0])
    return None


def _row_reduce_of(g, nid, op, src) -> bool:
    node = g.node(nid)
    rank = len(g.info(src).shape)
    dims = tuple(d % rank for d in node["attrs"].get("dims", ()))
    return node["op"] == op and node["inputs"] == [src] and dims == (rank - 1,) \
        and node["attrs"].get("keepdim")


def _softmax_exp(g, nid):
    """``exp(w - amax(w))`` with w -inf where a mask is False and every row keeping a column: the mask."""
    node = g.node(nid)
    if node["op"] != "exp":
        return None
    s = g.node(node["inputs"][0])
    if s["op"] != "sub":
        return None
    w, m = s["inputs"]
    mask = neg_inf_mask(g, w)
    if mask is None or not _row_reduce_of(g, m, "amax", w) or not _static_rows_keep(g, w, mask):
        return None
    return mask


def zero_mask(g, nid):
    """A StaticMask whose False elements of value ``nid`` are exactly 0, or None."""
    node = g.node(nid)
    op = node["op"]
    if op in ("tril", "triu"):
        return _triangle(g, nid)
    wm = _where_mask(g, nid)
    if wm is not None:
        mask, fill = wm
        return mask if fill == 0 else None
    if op == "cast":
        return zero_mask(g, node["inputs"][0])
    if op == "exp":
        return _softmax_exp(g, nid)
    if op in ("mul", "div") and len(node["inputs"]) == 2:
        x, y = node["inputs"]
        s = _scalar(g, y)
        if s is not None:
            return zero_mask(g, x) if math.isfinite(s) and (op == "mul" or s != 0) else None
        if op == "div" and _row_reduce_of(g, y, "sum", x):
            # the softmax's normalisation: the row sum of exp(w - max) is >= 1 (or NaN with the whole row)
            return _softmax_exp(g, x)
    return None


def ignored_mask(g, nid):
    """A StaticMask whose False elements of value ``nid`` no result depends on, or None: every use of the
    value is, through elementwise ops with a scalar and casts (one use each, same shape), the kept operand of a
    ``where`` with an affine mask (the QK^T of masked attention). Such elements need not be computed."""
    shape = g.info(nid).shape
    users = g.users(nid)
    if len(users) != 1 or nid in g.output_nodes():
        return None
    u = users[0]
    node = g.node(u)
    info = g.info(u)
    if not hasattr(info, "shape") or tuple(info.shape) != tuple(shape):
        return None               # a user with several results (a loop), or a broadcast
    ins = node["inputs"]
    if node["op"] == "where" and ins.count(nid) == 1 and ins[0] != nid:
        wm = _where_mask(g, u)
        if wm is None or _scalar(g, ins[1 if ins[2] == nid else 2]) is None:
            return None
        return wm[0]
    if node["op"] == "cast" or (node["op"] in ("mul", "div", "add", "sub") and len(ins) == 2
                                and ins[0] == nid and _scalar(g, ins[1]) is not None):
        return ignored_mask(g, u)
    return None

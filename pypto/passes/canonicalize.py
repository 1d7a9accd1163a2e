"""Canonicalize: simplifications that make the graph easier to tile, each a small rewrite rule.

* a cast to the value's own dtype, or a round trip through an exact widening (f16 -> f32 -> f16),
  disappears;
* a reduction over several dims that are not neighbours, or that do not fit one tile, becomes
  single-dim reductions (from the innermost dim out, accumulating fp16/bf16 in fp32 as the single
  reduction would);
* ``argmax`` over the whole of a tensor of rank > 1 reduces its flattened form;
* ``cumsum`` and ``argmax`` along a dim too long for one tile run blockwise (``wide_scans``);
* ``index_select`` and ``index_copy`` along dim 0 and a 1-D ``scatter`` without reduce become row moves by indexed DMA
  (row_moves.py: MGATHER / MSCATTER, linear in the rows moved; each index checked by the move itself, so
  they get no count output);
* other ``index_select`` and ``gather`` become a select against a generated index and a sum over it
  (exact: one term is the value, the others zero), so they run on the vector unit without
  data-dependent addressing; where their indices are computed in the traced function (not an
  argument, which the host checks), an extra output counts those out of range (index_checks.py);
* ``scatter`` becomes the same one-hot compare, of every index against every position of its dim,
  then a reduction over the indices (any hit; the last hit's value; the sum or product of the hits for
  reduce='add' / 'multiply') and a select against the input; the index's extent is padded to the
  input's in the other dims (no hit there). The index checks are as for gather; an ``index_copy`` along
  another dim is that scatter of its index expanded over the slices;
* dead nodes drop out (rebuild keeps only what the outputs need).
"""
from __future__ import annotations

from .. import dtypes
from ..frontend import api as P
from ..ir.tensor_graph import TensorGraph
from .index_checks import INDEX_OPS, add_check_outputs, index_position, out_of_range_count
from .iterspace import is_one
from .rewrite import rebuild
from .row_moves import gather_rows, row_form, scatter_rows
from .wide_scans import argmax_rule, blocked_argmax, cumsum_rule

EXACT_WIDENING = {(dtypes.float16, dtypes.float32), (dtypes.bfloat16, dtypes.float32),
                  (dtypes.int8, dtypes.int32), (dtypes.int16, dtypes.int32), (dtypes.int8, dtypes.int16),
                  (dtypes.int32, dtypes.int64), (dtypes.int8, dtypes.int64), (dtypes.int16, dtypes.int64)}
SPLITTABLE = ("sum", "prod", "amax", "amin")
WHOLE_LIMIT = 8192          # elements a reduction keeps in one tile without splitting


def _fold_cast(g, nid, ins):
    x = ins[0]
    to = g.node(nid)["attrs"]["dtype"]
    if x.dtype == to:
        return x
    src = g.node(g.node(nid)["inputs"][0])
    if src["op"] == "cast":
        inner = g.info(src["inputs"][0]).dtype
        if inner == to and (inner, x.dtype) in EXACT_WIDENING:
            # the cast's input value, rebuilt: reach it through the cast node's rebuilt input
            return _rebuilt_input(x)
    return None


def _rebuilt_input(t):
    """The input Tensor of a rebuilt cast node ``t``."""
    from ..frontend.tensor import Tensor
    g = t._graph
    node = g.node(t._node)
    if node["op"] == "cast":
        return Tensor._wrap(g, node["inputs"][0])
    return None


def _split_reduce(g, nid, ins):
    a = g.node(nid)["attrs"]
    dims = tuple(a["dims"])
    shape = g.info(g.node(nid)["inputs"][0]).shape
    real = [d for d in dims if not is_one(shape[d])]
    if len(real) <= 1:
        return None
    total = 1
    for d in real:
        total = total * shape[d] if isinstance(shape[d], int) and isinstance(total, int) else None
        if total is None:
            break
    contiguous = all(b - a == 1 or all(is_one(shape[k]) for k in range(a + 1, b)) for a, b in zip(real, real[1:]))
    if total is not None and total <= WHOLE_LIMIT and contiguous:
        return None
    op = g.op(nid)
    x = ins[0]
    out_dt = g.info(nid).dtype
    acc = dtypes.float32 if (op in ("sum", "prod") and out_dt in (dtypes.float16, dtypes.bfloat16)) else None
    t = x
    for d in sorted(dims, reverse=True):
        extra = {"dtype": acc} if acc is not None else {}
        t = P.emit(op, [t], {"dims": (d,), "keepdim": True, **extra})
    if t.dtype != out_dt:
        t = P.cast(t, out_dt)
    if not a.get("keepdim", False):
        t = P.reshape(t, tuple(s for k, s in enumerate(t.shape) if k not in dims))
    return t


def _flatten_argmax(g, nid, ins):
    a = g.node(nid)["attrs"]
    x = ins[0]
    if a.get("dim") is not None:
        return argmax_rule(g, nid, ins)
    if x.ndim <= 1:
        return blocked_argmax(x, 0, False) if x.ndim == 1 else None
    n = 1
    for d in x.shape:
        n = n * d
    flat = P.reshape(x, (n,))
    out = blocked_argmax(flat, 0, False)
    if out is None:
        out = P.emit("argmax", [flat], {"dim": 0, "keepdim": False})
    if a.get("keepdim"):
        out = P.reshape(out, (1,) * x.ndim)
    return out


def _onehot_sum(sel, dim, out_dt):
    t = P.sum(sel, dim)
    return t if t.dtype == out_dt else P.cast(t, out_dt)


def _index_select(g, nid, ins):
    rows = gather_rows(g, nid, ins)
    if rows is not None:
        return rows
    x, idx = ins
    d = g.node(nid)["attrs"]["dim"]
    v = x.shape[d]
    r = x.ndim
    mask = P.eq(P.reshape(P.arange(0, v, 1, dtype=idx.dtype), (1, v)), P.reshape(idx, (idx.shape[0], 1)))
    mask = P.reshape(mask, (1,) * d + (idx.shape[0], v) + (1,) * (r - d - 1))
    xb = P.reshape(x, tuple(x.shape[:d]) + (1,) + tuple(x.shape[d:]))
    return _onehot_sum(P.where(mask, xb, 0), d + 1, x.dtype)


def _gather(g, nid, ins):
    x, idx = ins
    d = g.node(nid)["attrs"]["dim"]
    k = x.shape[d]
    r = x.ndim
    # x narrowed to the index's extent in the other dims, the gathered dim moved last
    box = tuple(idx.shape[j] if j != d else x.shape[j] for j in range(r))
    if box != tuple(x.shape):
        x = P.view(x, box, (0,) * r)
    if d != r - 1:
        x = P.permute(x, *[j for j in range(r) if j != d], d)
        idx = P.permute(idx, *[j for j in range(r) if j != d], d)
    mask = P.eq(P.reshape(P.arange(0, k, 1, dtype=idx.dtype), (1,) * r + (k,)),
                P.reshape(idx, tuple(idx.shape) + (1,)))
    xb = P.reshape(x, tuple(x.shape[:-1]) + (1, k))
    out = _onehot_sum(P.where(mask, xb, 0), r, x.dtype)
    if d != r - 1:
        inv = list(range(r - 1))
        inv.insert(d, r - 1)
        out = P.permute(out, *inv)
    return out


def _scatter(g, nid, ins):
    rows = scatter_rows(g, nid, ins)
    return rows if rows is not None else _scatter_onehot(g, nid, ins)


def _scatter_onehot(g, nid, ins):
    a = g.node(nid)["attrs"]
    x, idx = ins[0], ins[1]
    src = ins[2] if len(ins) == 3 else None
    d, r, reduce = a["dim"], x.ndim, a.get("reduce")
    n, m = x.shape[d], idx.shape[d]
    if src is not None and tuple(src.shape) != tuple(idx.shape):
        src = P.view(src, tuple(idx.shape), (0,) * r)
    # the scattered dim moved last: x [..., n], idx and src [..., m]
    perm = [j for j in range(r) if j != d] + [d]
    if d != r - 1:
        x, idx = P.permute(x, *perm), P.permute(idx, *perm)
        src = P.permute(src, *perm) if src is not None else None
    box = tuple(idx.shape[:-1]) + (n,)           # idx's extent in the other dims
    # hit[..., m, n]: index [.., m] names position n of the dim
    hit = P.eq(P.reshape(idx, tuple(idx.shape) + (1,)), P.reshape(P.arange(0, n, 1, dtype=idx.dtype), (1,) * r + (n,)))
    f32 = dtypes.float32
    vals = P.reshape(src, tuple(src.shape) + (1,)) if src is not None else None     # [..., m, 1]

    def padded(t, fill):
        return t if tuple(box) == tuple(x.shape) else P.fillpad(t, shape=tuple(x.shape), value=fill)

    if reduce is None:
        if src is None:
            out_val = None
            any_hit = P.sum(P.cast(hit, f32), r - 1)                                  # [..., n]
        else:
            pos = P.reshape(P.arange(0, m, 1, dtype=f32), (1,) * (r - 1) + (m, 1))
            last = P.amax(P.where(hit, pos, -1.0), r - 1, keepdim=True)               # [..., 1, n]: the last hit
            out_val = P.sum(P.where(P.eq(pos, last), vals, 0), r - 1)                  # exact: one term
            any_hit = P.reshape(last, box) + 1.0
        take = P.gt(padded(any_hit, 0.0), 0.5)
        if out_val is None:
            out = P.masked_fill(x, take, a["value"])
        else:
            out = P.cast(P.where(take, padded(P.cast(out_val, x.dtype), 0.0), x), x.dtype)
    elif reduce == "add":
        term = vals if vals is not None else a["value"]
        delta = P.sum(P.where(hit, term, 0), r - 1)
        out = P.cast(x + padded(P.cast(delta, x.dtype), 0.0), x.dtype)
    else:
        term = vals if vals is not None else a["value"]
        factor = P.prod(P.where(hit, term, 1), r - 1)
        out = P.cast(x * padded(P.cast(factor, x.dtype), 1.0), x.dtype)
    if d != r - 1:
        inv = list(range(r - 1))
        inv.insert(d, r - 1)
        out = P.permute(out, *inv)
    return out


def _index_copy(g, nid, ins):
    """index_copy: a row scatter along dim 0, else the scatter of its index expanded over the slices."""
    rows = scatter_rows(g, nid, ins)
    if rows is not None:
        return rows
    x, idx, src = ins
    d = g.node(nid)["attrs"]["dim"]
    shape = [1] * x.ndim
    shape[d] = idx.shape[0]
    return _scatter_onehot(g, nid, [x, P.expand(P.reshape(idx, tuple(shape)), tuple(src.shape)), src])


RULES = {"cast": _fold_cast, "argmax": _flatten_argmax, "index_select": _index_select, "gather": _gather,
         "scatter": _scatter, "index_copy": _index_copy,
         "cumsum": cumsum_rule}
RULES |= {op: _split_reduce for op in SPLITTABLE}


def _rewrite(g, nid, ins):
    rule = RULES.get(g.op(nid))
    return rule(g, nid, ins) if rule else None


def canonicalize(g: TensorGraph) -> TensorGraph:
    checks = []

    def rewrite(old, nid, ins):
        # only the top-level graph gets check outputs: a loop body's outputs are its carried values
        if old is g and old.op(nid) in INDEX_OPS and not row_form(old, nid):   # a row move checks its own
            check = out_of_range_count(old, nid, ins[index_position(old.op(nid))])
            if check is not None:
                checks.append(check)
        return _rewrite(old, nid, ins)

    new = rebuild(g, rewrite)
    add_check_outputs(new, checks)
    return new

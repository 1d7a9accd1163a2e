"""Selection and ordering ops: topk (its indices, or its values) and argsort (the indices; sort's values
are a gather of them, see frontend/api_sort.py).

Ties: among equal values the lower index comes first (torch.sort's ``stable=True`` order; torch.topk
leaves it unspecified). The result is always in sorted order, so ``sorted=False`` gives the same.
NaN inputs are not supported (their place in the result is undefined).
"""
from __future__ import annotations

import torch

from .. import dtypes
from ..errors import ShapeError, SymbolicError, TypeMismatchError
from ..ir.tensor_graph import ValueInfo
from .reduce import check_dims
from .registry import OpDef, register
from .shape_rules import fmt_shape


def _static_dim(x: ValueInfo, d: int, op: str) -> int:
    n = x.shape[d]
    if not isinstance(n, int):
        raise SymbolicError(f"{op}: dim {d} of {fmt_shape(x.shape)} has the dynamic size {n}; {op} needs the "
                            "size of the dim it orders at trace time",
                            hint="order along a static dim (the experts of a router); other dims may be dynamic")
    return n


def _check_orderable(x: ValueInfo, op: str) -> None:
    if x.dtype == dtypes.bool_:
        raise TypeMismatchError(f"{op}: expected a numeric tensor, found bool", hint="cast it to int32 or float32")


def _topk_infer(ins, attrs):
    x = ins[0]
    _check_orderable(x, "topk")
    d = check_dims(x, (attrs["dim"],), "topk")[0]
    k = attrs["k"]
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeMismatchError(f"topk: k must be a static int, found {type(k).__name__} {k!r}")
    n = _static_dim(x, d, "topk") if x.rank else 1
    if not 1 <= k <= n:
        raise ShapeError(f"topk: k = {k} is out of range for dim {d} of size {n} (tensor {fmt_shape(x.shape)}); "
                         f"expected 1 <= k <= {n}")
    shape = list(x.shape)
    if shape:
        shape[d] = k
    return ValueInfo(tuple(shape), x.dtype if attrs.get("values") else dtypes.int64)


def _topk_ref(ins, attrs):
    x, d, k = ins[0], attrs["dim"], attrs["k"]
    s = torch.sort(x, dim=d, descending=attrs.get("largest", True), stable=True)
    order = s.values if attrs.get("values") else s.indices
    return order.narrow(d, 0, k) if order.dim() else order


def _fill_for(dt: dtypes.DataType, largest: bool):
    """A value that no element beats when looking for the largest (smallest) element."""
    if dt.is_floating:
        return -float("inf") if largest else float("inf")
    info = torch.iinfo(dt.torch_dtype)
    return info.min if largest else info.max


def _topk_decompose(P, ins, attrs):
    """k rounds of: the best value m of the elements not yet taken, the first untaken position holding m
    (argmax of the candidates: lowest index first), that position taken. k * n work per row, against
    n * n for ranking every element by how many beat it: the router's k (2..10) is far below its n
    (8..512 experts). Exact: only compares and selects, no arithmetic on the values. With attrs
    ``values`` the result is the rounds' best values instead of their positions: the frontend's values
    op repeats the rounds, which costs less than a gather at the indices (a [.., k, n] one-hot, whose
    fused group with the rounds did not fit UB at 4096 rows)."""
    x, d, k, largest = ins[0], attrs["dim"], attrs["k"], attrs.get("largest", True)
    if x.ndim == 0:
        return x if attrs.get("values") else P.full((), 0, dtypes.int64)
    n, r = x.shape[d], x.ndim
    pos = P.reshape(P.arange(0, n, 1, dtype=dtypes.int64), (1,) * d + (n,) + (1,) * (r - d - 1))
    best = P.amax if largest else P.amin
    fill = _fill_for(x.dtype, largest)
    taken, picks, tops = None, [], []
    for _ in range(k):
        rest = x if taken is None else P.masked_fill(x, taken, fill)
        top = best(rest, d, keepdim=True)
        tops.append(top)
        if attrs.get("values") and len(tops) == k:
            break
        cand = P.eq(x, top)
        if taken is not None:
            cand = P.logical_and(cand, P.logical_not(taken))
        i = P.argmax(P.cast(cand, dtypes.float32), d, keepdim=True)
        picks.append(i)
        if len(picks) < k:
            hit = P.eq(pos, i)
            taken = hit if taken is None else P.logical_or(taken, hit)
    out = tops if attrs.get("values") else picks
    return out[0] if k == 1 else P.concat(out, d)


register(OpDef("topk", "sort", _topk_infer, _topk_ref, num_inputs=1, decompose=_topk_decompose,
               flops_fn=lambda ins, attrs, out: 6 * attrs["k"] * _numel(ins[0].shape),
               doc="attrs: k (static int), dim (non-negative), largest, values. The int64 indices of the k "
                   "largest (smallest) elements along dim, best first, ties lowest index first (values=True: "
                   "those elements)"))


def _argsort_infer(ins, attrs):
    x = ins[0]
    _check_orderable(x, "sort")
    if x.rank == 0:
        return ValueInfo((), dtypes.int64)
    d = check_dims(x, (attrs["dim"],), "sort")[0]
    _static_dim(x, d, "sort")
    return ValueInfo(x.shape, dtypes.int64)


def _argsort_ref(ins, attrs):
    x = ins[0]
    if x.dim() == 0:
        return torch.zeros((), dtype=torch.int64)
    return torch.sort(x, dim=attrs["dim"], descending=attrs.get("descending", False), stable=True).indices


def _argsort_decompose(P, ins, attrs):
    """Each element's place is the number of elements that come before it (those that beat it, and the
    equal ones at lower indices: a stable order); position p then takes the element whose place is p.
    Two [..., n, n] compares and a one-hot sum, n * n per row: exact, with no data-dependent addressing.
    (A k-rounds selection as topk's would be n rounds for a full sort.)"""
    x, d, desc = ins[0], attrs["dim"], attrs.get("descending", False)
    if x.ndim == 0:
        return P.full((), 0, dtypes.int64)
    r, n = x.ndim, x.shape[d]
    if d != r - 1:
        x = P.transpose(x, d, r - 1)
    lead = tuple(x.shape[:-1])
    xi, xj = P.reshape(x, lead + (n, 1)), P.reshape(x, lead + (1, n))         # [..., i, j]
    ar = P.arange(0, n, 1, dtype=dtypes.float32)
    col, row = P.reshape(ar, (1, n)), P.reshape(ar, (n, 1))
    beats = P.gt(xj, xi) if desc else P.lt(xj, xi)
    first = P.logical_or(beats, P.logical_and(P.eq(xj, xi), P.lt(col, row)))
    place = P.sum(P.cast(first, dtypes.float32), r, keepdim=True)             # [..., i, 1], exact below 2**24
    hit = P.eq(place, P.reshape(ar, (1,) * (r - 1) + (1, n)))                  # [..., i, p]
    idx = P.sum(P.where(hit, P.reshape(ar, (1,) * (r - 1) + (n, 1)), 0.0), r - 1)   # [..., p]
    idx = P.cast(idx, dtypes.int64)
    return idx if d == r - 1 else P.transpose(idx, d, r - 1)


register(OpDef("argsort", "sort", _argsort_infer, _argsort_ref, num_inputs=1, decompose=_argsort_decompose,
               flops_fn=lambda ins, attrs, out: 6 * _numel(ins[0].shape) * (ins[0].shape[attrs["dim"]]
                                                                            if ins[0].rank else 1),
               doc="attrs: dim (non-negative), descending. The int64 indices that sort the input along dim, "
                   "stable (equal elements keep their order)"))


def _numel(shape):
    n = 1
    for s in shape:
        n = n * s
    return n

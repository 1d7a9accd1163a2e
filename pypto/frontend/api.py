"""The traced op functions (``pypto.add``, ``pypto.exp``, ``pypto.view`` ...): argument checking and
conversion, then one ``emit`` per op into the current graph. Meanings live in ``pypto/ops``."""
from __future__ import annotations

import builtins
import numbers

import sympy
import torch

from .. import dtypes, symbolic as sym
from ..errors import PyptoError, ShapeError, TypeMismatchError, user_location
from ..ops.registry import OpDef, get_op, ops_of_form
from . import context as ctx
from . import hints as _hints
from .hints import stamp as _stamp_hints
from .tensor import Alias, Tensor

# ops whose torch counterpart returns a view of its input: a later write into the input is seen
# through the result (see ``fresh``)
ALIAS_OPS = frozenset({"view", "reshape", "transpose", "permute", "expand"})


# ------------------------------------------------------------------ emission
def emit(op: str, inputs: list, attrs: dict | None = None) -> Tensor:
    inputs = [fresh(t) for t in inputs]
    frame = ctx.current()
    g = frame.graph
    # an assemble's destination is the tensor itself, not a branch side's simplified reading of it
    ids = [ctx.resolve(t._graph, t._node, refine=not (op == "assemble" and k == 0)) for k, t in enumerate(inputs)]
    infos = [g.info(i) for i in ids]
    attrs = dict(attrs or {})
    op_def = get_op(op)
    out = op_def.infer(infos, attrs)
    _stamp_hints(op_def, attrs, infos, out)      # the active tiling hints (frontend/hints.py)
    result = Tensor._wrap(g, g.add_node(op, ids, attrs, out, user_location()))
    if op in ALIAS_OPS:
        src = inputs[0]
        result._base = Alias(src, op, attrs, (src._graph, src._node),
                             attrs["offsets"] if op == "view" else None)
    return result


def fresh(t: Tensor) -> Tensor:
    """``t`` bound to its current value: an alias whose parent was written since it was derived is
    derived again from the parent (in place, so every holder of ``t`` sees it)."""
    alias = t._base
    if not isinstance(alias, Alias):
        return t
    parent = fresh(alias.parent)
    if (parent._graph, parent._node) != alias.seen:
        again = emit(alias.op, [parent], alias.attrs)
        t._graph, t._node, t._base = again._graph, again._node, again._base
    return t


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, sympy.Basic)) and not isinstance(x, Tensor)


def as_tensor(x, fn: str, arg: str = "input") -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, torch.Tensor):
        return constant(x)
    raise TypeMismatchError(f"pypto.{fn}: expected a pypto.Tensor for '{arg}', found {type(x).__name__} {x!r:.60}")


def scalar(value, dtype) -> Tensor:
    if isinstance(value, sympy.Basic):
        value = sym.simplify(value)
    return emit("scalar", [], {"value": value, "dtype": dtypes.to_dtype(dtype)})


def constant(value: torch.Tensor) -> Tensor:
    return emit("constant", [], {"value": value.detach().cpu()})


def _scalar_dtype(t: Tensor, s) -> dtypes.DataType:
    if isinstance(s, sympy.Basic):
        s = 1.0 if s.is_integer is False else 1
    return dtypes.promote_scalar(t.dtype, s)


def _binary(op: str, a, b) -> Tensor:
    if _is_scalar(a) and _is_scalar(b):
        raise TypeMismatchError(f"pypto.{op}: at least one operand must be a pypto.Tensor, found two scalars")
    if _is_scalar(b):
        a = as_tensor(a, op, "input")
        b = scalar(b, _scalar_dtype(a, b))
    elif _is_scalar(a):
        b = as_tensor(b, op, "other")
        a = scalar(a, _scalar_dtype(b, a))
    else:
        a, b = as_tensor(a, op, "input"), as_tensor(b, op, "other")
    return emit(op, [a, b])


def _unary(op: str, x) -> Tensor:
    return emit(op, [as_tensor(x, op)])


# ------------------------------------------------------------------ elementwise
def _make_unary(op: OpDef):
    name = op.name

    def fn(x):
        return _unary(name, x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = op.doc
    return fn


def _make_binary(op: OpDef):
    name = op.name

    def fn(input, other):
        return _binary(name, input, other)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = op.doc
    return fn


# one function per registered op that has a form (pypto/ops/registry.py FORMS): pypto.exp, pypto.add...
for _op in ops_of_form("unary"):
    globals()[_op.name] = _make_unary(_op)
for _op in ops_of_form("binary") + ops_of_form("comparison"):
    globals()[_op.name] = _make_binary(_op)


def gelu(x, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise PyptoError(f"gelu: approximate must be 'none' or 'tanh', found {approximate!r}")
    return emit("gelu", [as_tensor(x, "gelu")], {"approximate": approximate})


def where(condition, input, other) -> Tensor:
    cond = as_tensor(condition, "where", "condition")
    if _is_scalar(input) and _is_scalar(other):
        dt = dtypes.float32 if isinstance(input, float) or isinstance(other, float) else dtypes.int64
        input, other = scalar(input, dt), scalar(other, dt)
    elif _is_scalar(input):
        other = as_tensor(other, "where", "other")
        input = scalar(input, _scalar_dtype(other, input))
    elif _is_scalar(other):
        input = as_tensor(input, "where", "input")
        other = scalar(other, _scalar_dtype(input, other))
    return emit("where", [cond, as_tensor(input, "where"), as_tensor(other, "where", "other")])


def clip(input, min=None, max=None) -> Tensor:
    """torch.clamp: ``min`` / ``max`` are numbers or tensors (broadcast against ``input``, as torch's)."""
    if min is None and max is None:
        raise PyptoError("clip: at least one of min and max must be given")
    if isinstance(min, (Tensor, torch.Tensor)) or isinstance(max, (Tensor, torch.Tensor)):
        x = as_tensor(input, "clip")
        if min is not None:
            x = maximum(x, min)
        if max is not None:
            x = minimum(x, max)
        return x
    return emit("clip", [as_tensor(input, "clip")], {"min": min, "max": max})


def round(input, decimals: int = 0) -> Tensor:
    # torch.round: halves to even; ``decimals`` rounds to that many decimal places (as torch: the
    # value scaled by 10**decimals, rounded, scaled back). Its doc is the op's (tests/ops/test_registry.py)
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        raise TypeMismatchError(f"round: decimals must be an int, found {decimals!r}")
    x = as_tensor(input, "round")
    if decimals == 0:
        return _unary("round", x)
    scale = 10.0 ** decimals
    return div(_unary("round", mul(x, scale)), scale)


round.__doc__ = get_op("round").doc


clamp = clip


def cast(input, dtype) -> Tensor:
    x = as_tensor(input, "cast")
    dt = dtypes.to_dtype(dtype)
    return x if dt == x.dtype else emit("cast", [x], {"dtype": dt})


# ------------------------------------------------------------------ creation
def _shape_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    # inside a run-time branch side: simplified under its condition, as the values the side captures are
    return tuple(ctx.refine_size(sym.simplify(d)) for d in shape)


def full(shape=None, fill_value=None, dtype=None, *, size=None, valid_shape=None) -> Tensor:
    """``full(shape, fill_value, dtype)``; CANN spells the shape ``size=`` and may give ``valid_shape``
    (the run-time extent, e.g. a tail's): the result's shape is the valid shape, as a view's is."""
    if size is not None:
        if shape is not None:
            raise TypeMismatchError("full: give the shape once (shape or size=)")
        shape = size
    if shape is None or fill_value is None:
        raise TypeMismatchError("full: needs a shape (or size=) and a fill_value")
    if valid_shape is not None:
        shape = _valid_shape("full", shape, valid_shape)
    dt = dtypes.to_dtype(dtype) if dtype is not None else (
        dtypes.float32 if isinstance(fill_value, float) else dtypes.bool_ if isinstance(fill_value, bool)
        else dtypes.int64)
    return emit("full", [], {"shape": _shape_args([shape]), "value": fill_value, "dtype": dt})


def zeros(*shape, dtype=dtypes.float32) -> Tensor:
    return full(_shape_args(shape), 0, dtype)


def ones(*shape, dtype=dtypes.float32) -> Tensor:
    return full(_shape_args(shape), 1, dtype)


# ------------------------------------------------------------------ views and writes
def _index_value(i, fn="getitem"):
    if isinstance(i, bool):
        raise TypeMismatchError(f"{fn}: boolean indices are not supported")
    if isinstance(i, (int, sympy.Basic)):
        return sym.simplify(i)
    if hasattr(i, "__index__"):
        return int(i)
    raise TypeMismatchError(f"indexing: expected an int, a slice or a symbolic index, found {type(i).__name__}",
                            hint="tensor (gather) indexing is pypto.index_select / pypto.gather")


def _parse_index(x: Tensor, idx, requested: list | None = None):
    """-> (offsets, sizes, dims to squeeze, positions to unsqueeze) of a basic index expression.
    ``requested``, when given, receives each dim's extent as written (``stop - start``, before the
    clamp to the tensor)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    n_real = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise ShapeError(f"too many indices ({n_real}) for a tensor of rank {x.ndim}")
    if any(i is Ellipsis for i in idx):
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (x.ndim - n_real) + idx[k + 1:]
    offsets, sizes, squeeze, unsqueeze = [], [], [], []
    d = 0
    out_pos = 0
    for i in idx:
        if i is None:
            unsqueeze.append(out_pos)
            out_pos += 1
            continue
        size = x.shape[d]
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise ShapeError(f"slicing with step {i.step} is not supported (only contiguous boxes)")
            start = 0 if i.start is None else _index_value(i.start)
            stop = size if i.stop is None else _index_value(i.stop)
            if isinstance(start, int) and start < 0:
                start = start + size
            if isinstance(stop, int) and stop < 0:
                stop = stop + size
            if isinstance(start, int) and isinstance(size, int):
                start = builtins.min(start, size)
            offsets.append(start)
            # written as min(stop - start, size - start) so that x[i*64 : i*64 + 64] has the same
            # symbolic size as pypto.min(64, n - i*64)
            length = ctx.refine_size(sym.min_given_ranges(sym.simplify(stop - start), sym.simplify(size - start),
                                                          ctx.loop_ranges))
            sizes.append(builtins.max(length, 0) if isinstance(length, int) else length)
            if requested is not None:
                requested.append(sym.simplify(stop - start))
            out_pos += 1
        else:
            v = _index_value(i)
            if isinstance(v, int) and v < 0:
                v = v + size
            if isinstance(v, int) and isinstance(size, int) and not 0 <= v < size:
                raise ShapeError(f"index {i} is out of range for dimension {d} of size {size}")
            offsets.append(v)
            sizes.append(1)
            squeeze.append(d)
            if requested is not None:
                requested.append(1)
        d += 1
    for _ in range(d, x.ndim):
        offsets.append(0)
        sizes.append(x.shape[d])
        if requested is not None:
            requested.append(x.shape[d])
        d += 1
    return offsets, sizes, squeeze, unsqueeze


def getitem(x, idx) -> Tensor:
    x = as_tensor(x, "getitem")
    if isinstance(idx, Tensor) and idx.ndim == 1 and idx.dtype in (dtypes.int32, dtypes.int64):
        return emit("index_select", [x, idx], {"dim": 0})      # x[idx]: whole rows (a row gather)
    scalar_read = _data_scalar(x, idx)
    if scalar_read is not None:
        return scalar_read
    offsets, sizes, squeeze, unsqueeze = _parse_index(x, idx)
    out = x
    if any(not (isinstance(o, int) and o == 0) for o in offsets) or tuple(sizes) != tuple(x.shape):
        out = emit("view", [x], {"offsets": tuple(offsets), "shape": tuple(sizes)})
    if squeeze or unsqueeze:
        shape = [s for i, s in enumerate(sizes) if i not in squeeze]
        for p in unsqueeze:
            shape.insert(p, 1)
        out = reshape(out, shape)
    return out


def _data_scalar(x: Tensor, idx):
    """CANN PyPTO's ``lens[b + 1] - lens[b]``: one element of an integer argument the program does not
    write, indexed by ints or sizes in every dim, is a data scalar (``pypto.item``, read by the control
    program), not a 0-d tensor. None for every other index (a slice, a float tensor, a written or
    computed tensor: those stay tensors)."""
    if not x.dtype.is_integer or not x.ndim:
        return None
    idx = idx if isinstance(idx, tuple) else (idx,)
    if len(idx) != x.ndim or not all(isinstance(i, (int, sympy.Expr)) and not isinstance(i, bool) for i in idx):
        return None
    idx = tuple(i + d if isinstance(i, int) and i < 0 and isinstance(d, int) else i for i, d in zip(idx, x.shape))
    from . import scalars
    try:
        node, _ = scalars._element(x, idx)
    except PyptoError:
        return None
    frame = ctx._stack[0]
    if any(og is frame.graph and onode == node for _, og, onode in frame.mutated.values()):
        return None
    return scalars.item(x, *idx)


def view(x, shape, offsets, valid_shape=None) -> Tensor:
    """CANN-style view: a ``shape`` box at ``offsets``; ``valid_shape`` (e.g. pypto.min(64, n - i*64))
    gives the real extent for tail boxes. The result's shape is the valid shape; ``shape`` is kept as
    the tile-shape hint."""
    x = as_tensor(x, "view")
    shape = tuple(sym.simplify(d) for d in shape)
    # inside a run-time branch side, a tail's extent is simplified under the side's condition, as a slice's box
    valid = tuple(ctx.refine_size(_size_form(d)) for d in (valid_shape if valid_shape is not None else shape))
    offsets = tuple(sym.simplify(o) for o in offsets)
    return emit("view", [x], {"offsets": offsets, "shape": valid, "tile_shape": shape})


def assemble(src, offsets, dst) -> None:
    """CANN-style write: ``dst[offsets : offsets + src.shape] = src`` (dst is updated in place)."""
    dst = as_tensor(dst, "assemble", "dst")
    src = as_tensor(src, "assemble", "src")
    _write(dst, tuple(sym.simplify(o) for o in offsets), src)


def _write(dst: Tensor, offsets: tuple, src: Tensor) -> None:
    alias = dst._base
    if isinstance(alias, Alias) and alias.op == "reshape" and _unit_dims_only(alias.parent.shape, dst.shape):
        # a view that only drops or adds size-1 dims (x[b, h] of a 4-d x): the write goes through it
        # into its parent, as torch's does, at the same offsets with 0 in the size-1 dims
        keep = [k for k, d in enumerate(alias.parent.shape) if not (isinstance(d, int) and d == 1)]
        mine = [o for o, d in zip(offsets, dst.shape) if not (isinstance(d, int) and d == 1)]
        poffs = [0] * len(alias.parent.shape)
        for k, o in zip(keep, mine):
            poffs[k] = o
        with _hints.inserted():
            _write(alias.parent, tuple(poffs), reshape(src, *_unit_reshape(alias.parent.shape, src.shape)))
            fresh(dst)
        return
    if isinstance(alias, Alias) and alias.offsets is None:
        what = {"reshape": "reshaped/squeezed", "transpose": "transposed", "permute": "permuted",
                "expand": "expanded"}[alias.op]
        raise PyptoError(f"in-place write into a {what} view is not supported (torch would write "
                         "through it into the tensor it was taken of)",
                         hint="write into the original tensor with matching offsets")
    if isinstance(alias, Alias):
        # a write through a view writes the viewed tensor; the view is then derived from it again
        _write(alias.parent, tuple(sym.simplify(a + b) for a, b in zip(alias.offsets, offsets)), src)
        fresh(dst)
    elif _whole(dst, offsets, src):
        # the new value replaces every element: dst simply becomes src (no assemble, no copy); the
        # tiling pass stores src straight into dst's buffer when dst is an argument (an out-param)
        src = fresh(src)
        ctx.record_mutation(dst)
        dst._graph, dst._node = ctx.current().graph, ctx.resolve(src._graph, src._node, refine=False)
    else:
        _rebind(dst, emit("assemble", [dst, src], {"offsets": offsets}))


def _box_of(t: Tensor):
    """The box (``tile_shape``) of a CANN-style view or valid-shape reshape, else None."""
    t = fresh(t)
    if t._graph.op(t._node) not in ("view", "reshape"):
        return None
    return t._graph.node(t._node)["attrs"].get("tile_shape")


def _non_unit(shape) -> list:
    return [d for d in shape if not (isinstance(d, int) and d == 1)]


def _unit_dims_only(a, b) -> bool:
    """Whether shapes a and b differ only by size-1 dims."""
    na, nb = _non_unit(a), _non_unit(b)
    return len(na) == len(nb) and all(sym.equal(x, y) is True for x, y in zip(na, nb))


def _unit_reshape(parent_shape, src_shape) -> list:
    """src's shape (the squeezed view's box) with the parent's size-1 dims put back."""
    it = iter(_non_unit(src_shape))
    return [1 if isinstance(d, int) and d == 1 else next(it) for d in parent_shape]


def _whole(dst: Tensor, offsets: tuple, src: Tensor) -> bool:
    """True when a write of src at offsets covers all of dst (and needs no cast: assemble checks that)."""
    return (src.dtype == dst.dtype and len(src.shape) == len(dst.shape)
            and all(sym.equal(o, 0) is True for o in offsets)
            and all(sym.equal(a, b) is True for a, b in zip(src.shape, dst.shape)))


def _rebind(t: Tensor, new: Tensor) -> None:
    ctx.record_mutation(t)
    t._graph, t._node = new._graph, new._node


def setitem(x, idx, value) -> None:
    x = as_tensor(x, "setitem")
    requested = []
    offsets, sizes, squeeze, unsqueeze = _parse_index(x, idx, requested)
    if not _is_scalar(value):
        sizes = _unclamped(sizes, requested, squeeze, value)
    if _is_scalar(value):
        value = full(tuple(sizes), value, x.dtype)
    value = as_tensor(value, "setitem", "value")
    if value.dtype != x.dtype:
        value = cast(value, x.dtype)
    box = _box_of(value)
    if tuple(value.shape) != tuple(sizes) and box is not None and len(box) == len(sizes) and \
            all(sym.equal(a, b) is True for a, b in zip(box, sizes)):
        # CANN: a view whose box is the target's, with a smaller valid shape, writes its valid region
        # (at the box's origin); the rest of the target keeps its values
        _write(x, tuple(offsets), value)
        return
    if tuple(value.shape) != tuple(sizes):
        with _hints.inserted():         # the front end's reshape / broadcast, not an op the user hinted
            if _unit_dims_only(value.shape, sizes):
                value = reshape(value, *sizes)
            else:
                value = _broadcast_to(value, tuple(sizes))
    _write(x, tuple(offsets), value)


def _unclamped(sizes, requested, squeeze, value) -> list:
    """The box of ``x[a:b] = value`` when its clamp to ``x`` is a run-time value (``min(b - a, n - a)``
    with ``n - a`` a data scalar's expression): ``b - a`` wherever the value has exactly that extent.
    torch writes it when ``b <= n`` and raises a shape mismatch otherwise; here the write's box is the
    one written, so the run's GM bounds check (sim, cpu) refuses it when ``b > n``. A box the trace
    can size stays as it is."""
    vshape = tuple(getattr(value, "shape", ()))
    dims = [d for d in range(len(sizes)) if d not in squeeze]
    if len(vshape) != len(dims):
        dims = list(range(len(sizes)))
        if len(vshape) != len(dims):
            return sizes
    out = list(sizes)
    for d, v in zip(dims, vshape):
        s, r = sizes[d], requested[d]
        # a value of 1 broadcasts into the clamped box, as torch's does (into 0 rows past the end)
        if isinstance(s, sympy.Min) and r in s.args and sym.equal(v, r) is True and sym.equal(s, r) is not True \
                and not (isinstance(v, int) and v == 1):
            out[d] = r
    return out


def _broadcast_to(v: Tensor, shape: tuple) -> Tensor:
    from ..ops.shape_rules import broadcast_shapes
    try:
        fits = len(v.shape) <= len(shape) and broadcast_shapes(v.shape, shape) == tuple(shape)
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"cannot write a value of shape {list(v.shape)} into a box of shape {list(shape)}",
                         hint="the value's sizes must equal the box's or be 1 (torch's broadcasting)")
    return add(v, zeros(*shape, dtype=v.dtype)) if tuple(v.shape) != tuple(shape) else v


def reshape(x, *shape, valid_shape=None, inplace: bool = False) -> Tensor:
    """``reshape(x, shape)`` (torch's; -1 is not supported). CANN's ``valid_shape=``: the run-time
    extent of the result (a tail's, e.g. ``[actual_l, d]`` of a ``[l, d]`` box), which is the
    result's shape in pypto (as ``view``'s valid shape is); ``inplace`` (CANN's storage sharing) is
    what every pypto reshape is: a view of its input."""
    x = as_tensor(x, "reshape")
    shape = _shape_args(shape)
    attrs = {}
    if valid_shape is not None:
        box, shape = shape, _valid_shape("reshape", shape, valid_shape)
        if box != shape:
            attrs["tile_shape"] = box          # the box a later fillpad fills, as a view's
    if tuple(shape) == tuple(x.shape) and not attrs:
        return x
    return emit("reshape", [x], {"shape": shape, **attrs})


def _size_form(d):
    """A size with the terms added to a min / max moved inside it: ``min(s + 64, n) - s`` (CANN's
    programs compute a tail's extent so) is ``min(64, n - s)``, the form pypto.min(64, n - s) and
    slicing give, so that the two are the same size."""
    d = sym.simplify(d)
    if isinstance(d, sympy.Add):
        picks = [a for a in d.args if isinstance(a, (sympy.Min, sympy.Max))]
        if len(picks) == 1:
            rest = d - picks[0]
            d = sym.simplify(picks[0].func(*(sym.simplify(a + rest) for a in picks[0].args)))
    return d


def _valid_shape(fn: str, shape, valid_shape) -> tuple:
    """CANN's valid shape of a ``shape`` box: one entry per dim, each at most the box's (when both are
    known); it is the shape pypto gives the result."""
    shape, valid = _shape_args([shape]), tuple(ctx.refine_size(_size_form(d)) for d in _shape_args([valid_shape]))
    if len(valid) != len(shape):
        raise ShapeError(f"{fn}: valid_shape {list(valid)} needs one entry per dim of the shape {list(shape)}")
    for v, d in zip(valid, shape):
        if isinstance(v, int) and isinstance(d, int) and not 0 <= v <= d:
            raise ShapeError(f"{fn}: valid_shape {list(valid)} is not within the shape {list(shape)}")
    return valid


# the op families, re-exported so that ``pypto.<name>`` and Tensor methods find them here
# (they shadow builtins sum/max/min in this module: code above spells those ``builtins.``)
from .api_reduce import *  # noqa: E402,F401,F403
from .api_matmul import *  # noqa: E402,F401,F403
from .api_shape import *  # noqa: E402,F401,F403
from .api_norm import *  # noqa: E402,F401,F403
from .api_sort import *  # noqa: E402,F401,F403
from .api_counting import *  # noqa: E402,F401,F403

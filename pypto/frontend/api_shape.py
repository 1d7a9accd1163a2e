"""Traced shape ops, torch-named: transpose t permute unsqueeze squeeze flatten expand expand_as
broadcast_to concat/cat stack split chunk tril triu arange pad fillpad gather index_select index_copy masked_fill
and the ``*_like`` fills.

unsqueeze/squeeze/flatten record a ``reshape``; split/chunk record ``view``s of the input (writes
into them reach the input, as with any view). Sizes that decide how many results there are (split,
chunk, squeeze of a dim) must be static; everything else may be symbolic."""
from __future__ import annotations

import builtins
import numbers

import sympy

from .. import dtypes, symbolic as sym
from ..errors import PyptoError, ShapeError, SymbolicError, TypeMismatchError
from ..ops.shape_rules import fmt_shape
from .api import _shape_args, as_tensor, cast, emit, fresh, full, getitem, reshape, where
from .api_reduce import normalize_dim
from .tensor import Tensor

__all__ = ["transpose", "t", "permute", "unsqueeze", "squeeze", "flatten", "expand", "expand_clone", "expand_as",
           "broadcast_to",
           "concat", "cat", "stack", "split", "chunk", "tril", "triu", "arange", "pad", "fillpad", "gather",
           "index_select", "index_copy", "index_copy_", "scatter", "scatter_", "masked_fill", "zeros_like", "ones_like", "full_like"]


def transpose(input, dim0: int, dim1: int) -> Tensor:
    x = as_tensor(input, "transpose")
    d0, d1 = normalize_dim(x, dim0, "transpose"), normalize_dim(x, dim1, "transpose")
    if d0 == d1:
        return x
    return emit("transpose", [x], {"dim0": builtins.min(d0, d1), "dim1": builtins.max(d0, d1)})


def t(input) -> Tensor:
    x = as_tensor(input, "t")
    if x.ndim > 2:
        raise ShapeError(f"t: expected a tensor of rank <= 2, found {fmt_shape(x.shape)}", hint="use transpose")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def permute(input, *dims) -> Tensor:
    x = as_tensor(input, "permute")
    dims = _shape_args(dims) if dims else ()
    if len(dims) != x.ndim:
        raise ShapeError(f"permute: expected {x.ndim} dims for a tensor of shape {fmt_shape(x.shape)}, "
                         f"found {list(dims)}")
    perm = tuple(normalize_dim(x, d, "permute") for d in dims)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: dims {list(dims)} are not a permutation of the {x.ndim} dims of "
                         f"a tensor of shape {fmt_shape(x.shape)}")
    moved = [i for i, d in enumerate(perm) if d != i]
    if not moved:
        return x
    if len(moved) == 2:
        return transpose(x, *moved)
    return emit("permute", [x], {"dims": perm})


def unsqueeze(input, dim: int) -> Tensor:
    x = as_tensor(input, "unsqueeze")
    d = normalize_dim(x, dim, "unsqueeze", extra=1)
    shape = list(x.shape)
    shape.insert(d, 1)
    return reshape(x, shape)


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


def squeeze(input, dim=None) -> Tensor:
    """Remove size-1 dims (all of them, or those in ``dim``). With ``dim=None`` a dynamic dim is kept
    (it is taken to be > 1); naming a dynamic dim in ``dim`` is an error (its size is unknown)."""
    x = as_tensor(input, "squeeze")
    if dim is None:
        dims = [i for i, d in enumerate(x.shape) if _is_one(d)]
    else:
        dims = [normalize_dim(x, d, "squeeze") for d in (dim if isinstance(dim, (list, tuple)) else (dim,))]
        for d in dims:
            if not isinstance(x.shape[d], int):
                raise SymbolicError(f"squeeze: dim {d} has the dynamic size {x.shape[d]}; whether it is 1 is "
                                    "unknown at trace time", hint="squeeze only static size-1 dims")
        dims = [d for d in dims if _is_one(x.shape[d])]
    return reshape(x, [s for i, s in enumerate(x.shape) if i not in dims]) if dims else x


def flatten(input, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    x = as_tensor(input, "flatten")
    if x.ndim == 0:
        return reshape(x, [1])
    s, e = normalize_dim(x, start_dim, "flatten"), normalize_dim(x, end_dim, "flatten")
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    n = 1
    for d in x.shape[s:e + 1]:
        n = sym.simplify(n * d)
    return reshape(x, [*x.shape[:s], n, *x.shape[e + 1:]])


def expand_clone(input, *sizes) -> Tensor:
    """CANN's ``expand_clone(x, shape)``: ``x`` broadcast to ``shape`` as a tensor of its own: unlike
    ``expand`` (torch's view), a later write into ``x`` is not seen through it, and it may be written."""
    out = expand(input, *sizes)
    if out is not input:
        out._base = None
    return out


def expand(input, *sizes) -> Tensor:
    """Broadcast size-1 dims (and new leading dims) to ``sizes``; -1 keeps a dim, as torch.expand."""
    x = as_tensor(input, "expand")
    sizes = list(_shape_args(sizes))
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ShapeError(f"expand: target {fmt_shape(sizes)} has fewer dims than the tensor {fmt_shape(x.shape)}")
    for i, s in enumerate(sizes):
        if isinstance(s, int) and s == -1:
            if i < lead:
                raise ShapeError(f"expand: -1 is not allowed for the new leading dim {i} of {fmt_shape(sizes)}")
            sizes[i] = x.shape[i - lead]
    if tuple(sizes) == tuple(x.shape):
        return x
    return emit("expand", [x], {"shape": tuple(sizes)})


def broadcast_to(input, shape) -> Tensor:
    return expand(input, *shape)


def expand_as(input, other) -> Tensor:
    return expand(input, *as_tensor(other, "expand_as", "other").shape)


def _tensor_list(tensors, op: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeMismatchError(f"{op}: expected a list or tuple of tensors, found {type(tensors).__name__}")
    if not tensors:
        raise ShapeError(f"{op}: expected at least one tensor, found an empty list")
    return [as_tensor(t, op, f"tensors[{i}]") for i, t in enumerate(tensors)]


def concat(tensors, dim: int = 0) -> Tensor:
    """Join tensors along ``dim`` (dtypes promote, as torch.cat)."""
    ts = _tensor_list(tensors, "concat")
    dt = ts[0].dtype
    for x in ts[1:]:
        dt = dtypes.promote(dt, x.dtype)
    ts = [cast(x, dt) for x in ts]
    if len(ts) == 1:
        return ts[0]
    return emit("concat", ts, {"dim": normalize_dim(ts[0], dim, "concat")})


cat = concat


def stack(tensors, dim: int = 0) -> Tensor:
    ts = _tensor_list(tensors, "stack")
    d = normalize_dim(ts[0], dim, "stack", extra=1)
    return concat([unsqueeze(x, d) for x in ts], d)


def _static_size(x: Tensor, d: int, op: str) -> int:
    n = x.shape[d]
    if not isinstance(n, int):
        raise SymbolicError(f"{op}: dim {d} has the dynamic size {n}; {op} needs a static size to know its pieces",
                            hint="slice with pypto.view / x[a:b] inside a pypto.loop instead")
    return n


def _pieces(x: Tensor, d: int, sizes) -> tuple:
    out, start = [], 0
    for s in sizes:
        idx = (slice(None),) * d + (slice(start, start + s),)
        out.append(getitem(x, idx))
        start += s
    return tuple(out)


def split(tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the listed sizes."""
    x = as_tensor(tensor, "split", "tensor")
    d = normalize_dim(x, dim, "split")
    n = _static_size(x, d, "split")
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = list(split_size_or_sections)
        for s in sizes:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise SymbolicError(f"split: section sizes must be static non-negative ints, found {sizes}")
        if builtins.sum(sizes) != n:
            raise ShapeError(f"split: sections {sizes} add up to {builtins.sum(sizes)}, but dim {d} of "
                             f"{fmt_shape(x.shape)} has size {n}")
    else:
        s = split_size_or_sections
        if not isinstance(s, int) or isinstance(s, bool) or s <= 0:
            raise SymbolicError(f"split: split_size must be a positive static int, found {s!r}")
        sizes = [s] * (n // s) + ([n % s] if n % s else [])
    return _pieces(x, d, sizes)


def chunk(input, chunks: int, dim: int = 0) -> tuple:
    """``chunks`` pieces (fewer when the size does not allow), as torch.chunk."""
    x = as_tensor(input, "chunk")
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks <= 0:
        raise PyptoError(f"chunk: chunks must be a positive int, found {chunks!r}")
    d = normalize_dim(x, dim, "chunk")
    n = _static_size(x, d, "chunk")
    return split(x, builtins.max(-(-n // chunks), 1), d)


def tril(input, diagonal: int = 0) -> Tensor:
    return emit("tril", [as_tensor(input, "tril")], {"diagonal": diagonal})


def triu(input, diagonal: int = 0) -> Tensor:
    return emit("triu", [as_tensor(input, "triu")], {"diagonal": diagonal})


def _number(v, what: str):
    if isinstance(v, Tensor):
        raise TypeMismatchError(f"arange: {what} must be a number or a size, found a Tensor",
                                hint="use a shape entry such as x.shape[0]")
    if isinstance(v, sympy.Basic):
        return sym.simplify(v)
    if isinstance(v, numbers.Number) and not isinstance(v, bool):
        return v
    raise TypeMismatchError(f"arange: {what} must be a number or a size, found {type(v).__name__} {v!r}")


def arange(start, end=None, step=1, *, dtype=None) -> Tensor:
    """[start, end) by step; ``end`` may be a dynamic size (``pypto.arange(x.shape[0])``). int64 unless a
    bound is a float (then float32) or ``dtype`` says otherwise, as torch.arange."""
    if end is None:
        start, end = 0, start
    start, end, step = _number(start, "start"), _number(end, "end"), _number(step, "step")
    if dtype is None:
        dtype = dtypes.float32 if any(isinstance(v, float) for v in (start, end, step)) else dtypes.int64
    return emit("arange", [], {"start": start, "end": end, "step": step, "dtype": dtypes.to_dtype(dtype)})


def pad(input, pad, mode: str = "constant", value=None) -> Tensor:
    """torch.nn.functional.pad in constant mode: ``pad`` = (left, right) pairs from the last dim."""
    x = as_tensor(input, "pad")
    if mode != "constant":
        raise PyptoError(f"pad: only mode='constant' is supported, found {mode!r}")
    if not isinstance(pad, (list, tuple)):
        raise TypeMismatchError(f"pad: expected a tuple of (left, right) sizes, found {type(pad).__name__}")
    return emit("pad", [x], {"pad": tuple(sym.simplify(p) for p in pad), "value": 0 if value is None else value})


def _tile_shape_of(x: Tensor):
    x = fresh(x)
    attrs = x._graph.node(x._node)["attrs"]
    return attrs.get("tile_shape") if x._graph.op(x._node) in ("view", "reshape") else None


def fillpad(input, mode: str = "constant", value=0.0, *, shape=None) -> Tensor:
    """CANN pypto.fillpad: the region of the tile beyond the valid data is set to ``value``. ``input``
    is a view made with ``pypto.view(t, shape, offsets, valid_shape)``: the result has the view's tile
    ``shape`` (or the ``shape`` given here), with ``input`` at the origin and ``value`` elsewhere."""
    x = as_tensor(input, "fillpad")
    if mode != "constant":
        raise PyptoError(f"fillpad: only mode='constant' is supported, found {mode!r}")
    target = shape if shape is not None else _tile_shape_of(x)
    if target is None:
        return x
    target = tuple(sym.simplify(d) for d in target)
    if target == tuple(x.shape):
        return x
    return emit("fillpad", [x], {"shape": target, "value": float(value)})


def gather(input, dim: int, index) -> Tensor:
    """out[i][j] = input[index[i][j]][j] for dim 0 (and so on), as torch.gather."""
    x = as_tensor(input, "gather")
    return emit("gather", [x, as_tensor(index, "gather", "index")], {"dim": normalize_dim(x, dim, "gather")})


def index_select(input, dim: int, index) -> Tensor:
    x = as_tensor(input, "index_select")
    return emit("index_select", [x, as_tensor(index, "index_select", "index")],
                {"dim": normalize_dim(x, dim, "index_select")})


def index_copy(input, dim: int, index, source) -> Tensor:
    """torch.index_copy: a copy of ``input`` with its slices ``index[i]`` along ``dim`` replaced by the slices
    ``i`` of ``source`` (along dim 0: whole rows, a row scatter)."""
    x = as_tensor(input, "index_copy")
    return emit("index_copy", [x, as_tensor(index, "index_copy", "index"), as_tensor(source, "index_copy", "source")],
                {"dim": normalize_dim(x, dim, "index_copy")})


def index_copy_(input, dim: int, index, source) -> Tensor:
    """In-place torch.index_copy_: ``input`` takes the result; returns ``input``."""
    input[...] = index_copy(input, dim, index, source)
    return input


def scatter(input, dim: int, index, src=None, *, value=None, reduce=None) -> Tensor:
    """torch.scatter: a copy of ``input`` with out[index[i][j]][j] = src[i][j] (dim 0, and so on), ``src`` a
    tensor or a Python number (torch's ``value=``); ``reduce`` 'add' / 'multiply' combines instead of writing.
    Where indices repeat without reduce, the last one along ``dim`` wins."""
    x = as_tensor(input, "scatter")
    if src is None:
        src = value
    if reduce not in (None, "add", "multiply"):
        raise PyptoError(f"pypto.scatter: reduce must be None, 'add' or 'multiply', found {reduce!r}")
    attrs = {"dim": normalize_dim(x, dim, "scatter"), "reduce": reduce}
    inputs = [x, as_tensor(index, "scatter", "index")]
    if isinstance(src, bool) or not isinstance(src, (int, float)):
        inputs.append(as_tensor(src, "scatter", "src"))
    else:
        attrs["value"] = float(src) if x.dtype.is_floating else int(src)
    return emit("scatter", inputs, attrs)


def scatter_(input, dim: int, index, src=None, *, value=None, reduce=None) -> Tensor:
    """In-place torch.scatter_: ``input`` takes the scattered value; returns ``input``."""
    out = scatter(input, dim, index, src, value=value, reduce=reduce)
    input[...] = out
    return input


def masked_fill(input, mask, value) -> Tensor:
    """``value`` where ``mask`` is True, ``input`` elsewhere; the result keeps ``input``'s dtype."""
    x = as_tensor(input, "masked_fill")
    return cast(where(as_tensor(mask, "masked_fill", "mask"), value, x), x.dtype)


def full_like(input, fill_value, *, dtype=None) -> Tensor:
    x = as_tensor(input, "full_like")
    return full(x.shape, fill_value, dtype or x.dtype)


def zeros_like(input, *, dtype=None) -> Tensor:
    return full_like(input, 0, dtype=dtype)


def ones_like(input, *, dtype=None) -> Tensor:
    return full_like(input, 1, dtype=dtype)

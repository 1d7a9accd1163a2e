"""Traced reductions and scans: ``pypto.sum``, ``mean``, ``amax``, ``amin``, ``prod``, ``var``,
``argmax``, ``argmin``, ``max``/``min`` (torch's overloads: all-reduce, (values, indices) over a dim,
elementwise with a tensor; on sizes they are ``pypto.min``/``pypto.max``) and ``cumsum``.

Dims follow torch: an int, a tuple, or None for all; negative dims count from the end."""
from __future__ import annotations

import builtins
import math

import torch

from .. import dtypes, symbolic as sym
from ..errors import ShapeError
from ..ops.shape_rules import fmt_shape
from ..ops.registry import get_op
from .api import as_tensor, emit, full, maximum, minimum
from .tensor import Tensor

__all__ = ["sum", "mean", "amax", "amin", "prod", "var", "argmax", "argmin", "max", "min", "cumsum",
           "normalize_dims", "normalize_dim"]


def normalize_dim(x: Tensor, dim, op: str, extra: int = 0) -> int:
    """One dim of ``x`` as a non-negative int (``extra`` = 1 allows the position after the last dim)."""
    rank = x.ndim + extra
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ShapeError(f"{op}: dim must be an int, found {type(dim).__name__} {dim!r}")
    lo, hi = -builtins.max(rank, 1), builtins.max(rank, 1)
    if not lo <= dim < hi:
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor of shape {fmt_shape(x.shape)} "
                         f"(expected {lo} <= dim < {hi})")
    return dim % builtins.max(rank, 1)


def normalize_dims(x: Tensor, dim, op: str) -> tuple:
    """None -> all dims; an int or a sequence of ints -> sorted non-negative dims (repeats rejected)."""
    if dim is None:
        return tuple(range(x.ndim))
    if isinstance(dim, (list, tuple)):
        dims = [normalize_dim(x, d, op) for d in dim]
        if len(set(dims)) != len(dims):
            raise ShapeError(f"{op}: dim {list(dim)} names the same dim twice")
        return tuple(sorted(dims)) if dims else tuple(range(x.ndim))
    return (normalize_dim(x, dim, op),)


def _reduce(op: str, input, dim, keepdim: bool, **attrs) -> Tensor:
    x = as_tensor(input, op)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    if "dtype" in attrs:
        attrs["dtype"] = dtypes.to_dtype(attrs["dtype"])
    attrs = {"dims": normalize_dims(x, dim, op), "keepdim": bool(keepdim), **attrs}
    empty = [d for d in attrs["dims"] if _is_zero(x.shape[d])]
    if empty:
        return _reduce_nothing(op, x, empty[0], attrs)
    return emit(op, [x], attrs)


def _is_zero(size) -> bool:
    return isinstance(size, int) and size == 0


# what torch gives for a reduction over a zero-length dim (amax / amin have no such value: torch raises)
_EMPTY_REDUCTION = {"sum": 0, "prod": 1, "mean": math.nan, "var": math.nan}


def _reduce_nothing(op: str, x: Tensor, dim: int, attrs: dict) -> Tensor:
    """A reduction over a zero-length dim, as torch: sum 0, prod 1, mean and var nan, amax/amin an error."""
    if op not in _EMPTY_REDUCTION:
        raise ShapeError(f"{op}: dim {dim} of {fmt_shape(x.shape)} has length 0 and {op} of no elements has no "
                         "value (torch raises too)")
    out = get_op(op).infer([x._info], attrs)
    return full(out.shape, _EMPTY_REDUCTION[op], out.dtype)


def sum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum over ``dim`` (fp16/bf16 accumulate in fp32; integers give int64), as torch.sum."""
    return _reduce("sum", input, dim, keepdim, dtype=dtype)


def prod(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    return _reduce("prod", input, dim, keepdim, dtype=dtype)


def mean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    return _reduce("mean", input, dim, keepdim, dtype=dtype)


def amax(input, dim=None, keepdim: bool = False) -> Tensor:
    return _reduce("amax", input, dim, keepdim)


def amin(input, dim=None, keepdim: bool = False) -> Tensor:
    return _reduce("amin", input, dim, keepdim)


def var(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance with Bessel's ``correction`` (default 1; ``unbiased=False`` means 0), as torch.var."""
    if correction is None:
        correction = 0 if unbiased is False else 1
    if isinstance(correction, bool) or not isinstance(correction, int):
        raise ShapeError(f"var: correction must be an int, found {correction!r}")
    return _reduce("var", input, dim, keepdim, correction=correction)


def _arg(op: str, input, dim, keepdim) -> Tensor:
    x = as_tensor(input, op)
    d = None if dim is None else normalize_dim(x, dim, op)
    if any(_is_zero(n) for n in (x.shape if d is None else x.shape[d:d + 1])):
        raise ShapeError(f"{op}: {fmt_shape(x.shape)} has no elements along {'its dims' if d is None else f'dim {d}'}, "
                         f"so it has no {op} (torch raises too)")
    return emit(op, [x], {"dim": d, "keepdim": bool(keepdim)})


def argmax(input, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum along ``dim`` (None: of the flattened tensor); int64, as torch."""
    return _arg("argmax", input, dim, keepdim)


def argmin(input, dim=None, keepdim: bool = False) -> Tensor:
    return _arg("argmin", input, dim, keepdim)


class MinMaxResult:
    """``(values, indices)`` of ``max``/``min`` over a dim, like torch.return_types.max. The indices
    are traced only when used."""

    __slots__ = ("values", "_indices", "_args")

    def __init__(self, values, args):
        self.values, self._indices, self._args = values, None, args

    @property
    def indices(self) -> Tensor:
        if self._indices is None:
            self._indices = _arg(*self._args)
        return self._indices

    def __getitem__(self, i):
        return self.values if i in (0, -2) else (self.values, self.indices)[i]

    def __iter__(self):
        yield self.values
        yield self.indices

    def __len__(self):
        return 2


def _tensor_minmax(reduce_op: str, arg_op: str, elementwise, input, dim=None, keepdim: bool = False):
    if isinstance(dim, Tensor):
        return elementwise(input, dim)
    if dim is None:
        return _reduce(reduce_op, input, None, False)
    return MinMaxResult(_reduce(reduce_op, input, dim, keepdim), (arg_op, input, dim, keepdim))


def max(input, *args, **kwargs):
    """torch.max: ``max(x)`` the maximum, ``max(x, dim, keepdim=False)`` (values, indices), ``max(x, y)``
    elementwise. On sizes (ints or symbolic) the largest: ``pypto.max(1, n - i * 64)``."""
    if not isinstance(input, (Tensor, torch.Tensor)):
        return sym.smax(input, *args)
    return _tensor_minmax("amax", "argmax", maximum, input, *args, **kwargs)


def min(input, *args, **kwargs):
    """torch.min, or on sizes the smallest: ``pypto.min(64, n - i * 64)``."""
    if not isinstance(input, (Tensor, torch.Tensor)):
        return sym.smin(input, *args)
    return _tensor_minmax("amin", "argmin", minimum, input, *args, **kwargs)


def cumsum(input, dim, *, dtype=None) -> Tensor:
    x = as_tensor(input, "cumsum")
    attrs = {"dim": normalize_dim(x, dim, "cumsum")}
    if dtype is not None:
        attrs["dtype"] = dtypes.to_dtype(dtype)
    return emit("cumsum", [x], attrs)

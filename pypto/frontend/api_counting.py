"""Traced counting ops, torch-named: ``pypto.bincount``, ``histc``, ``index_add`` / ``index_add_``
(and ``one_hot``, which pypto.nn.functional.one_hot calls). Output lengths are fixed at trace time:
``bincount`` needs ``minlength`` (its labels must lie below it), ``one_hot`` needs ``num_classes``."""
from __future__ import annotations

import numbers

from ..errors import PyptoError, TypeMismatchError
from .api import as_tensor, emit
from .api_reduce import normalize_dim
from .tensor import Tensor

__all__ = ["bincount", "histc", "index_add", "index_add_"]


def one_hot(input, num_classes: int = -1) -> Tensor:
    """int64 ``[..., num_classes]`` with 1 at each label, as torch.nn.functional.one_hot. ``num_classes``
    must be given (torch's -1, the data's max + 1, is not known at trace time); a label outside
    [0, num_classes) is an IndexOutOfRangeError at run time."""
    x = as_tensor(input, "one_hot")
    if isinstance(num_classes, int) and not isinstance(num_classes, bool) and num_classes == -1:
        raise PyptoError("one_hot: num_classes must be given (the result's length must be known at trace time; "
                         "torch's default -1 takes it from the data)", hint="one_hot(x, num_classes=E)")
    return emit("one_hot", [x], {"num_classes": num_classes})


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """Counts of each label of the 1-D ``input`` (the sum of ``weights`` at it, when given), length
    ``minlength``, as torch.bincount. ``minlength`` is required and static: torch's length max(input) + 1
    is not known at trace time, so a label >= minlength is an IndexOutOfRangeError at run time.
    Counts are int64; with weights fp32 (fp32 / fp16 / bf16 / integer weights; torch gives float64 for
    fp16 / bf16 and integers)."""
    x = as_tensor(input, "bincount")
    if isinstance(minlength, bool) or not isinstance(minlength, int) or minlength <= 0:
        raise PyptoError(f"bincount: minlength must be a positive static int, found {minlength!r} (the result's "
                         "length must be known at trace time; torch's max(input) + 1 is not)",
                         hint="bincount(x, minlength=E), with every label below E")
    ins = [x] if weights is None else [x, as_tensor(weights, "bincount", "weights")]
    return emit("bincount", ins, {"minlength": minlength})


def _number(v, fn: str, what: str):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeMismatchError(f"{fn}: {what} must be a number, found {type(v).__name__} {v!r}")
    return v


def histc(input, bins: int = 100, min=0, max=0) -> Tensor:
    """Histogram of ``input`` over ``bins`` equal bins of [min, max] (elements outside ignored), as
    torch.histc; ``min == max`` takes the data's min and max. The counts have the input's dtype."""
    x = as_tensor(input, "histc")
    return emit("histc", [x], {"bins": bins, "min": _number(min, "histc", "min"), "max": _number(max, "histc", "max")})


def index_add(input, dim: int, index, source, *, alpha=1) -> Tensor:
    """A copy of ``input`` with ``alpha * source[i]`` added at ``index[i]`` along ``dim`` (repeats add up), as
    torch.index_add. Floating inputs add through a one-hot matmul on the cube (fp32 accumulation)."""
    x = as_tensor(input, "index_add")
    _number(alpha, "index_add", "alpha")
    return emit("index_add", [x, as_tensor(index, "index_add", "index"), as_tensor(source, "index_add", "source")],
                {"dim": normalize_dim(x, dim, "index_add"), "alpha": alpha})


def index_add_(input, dim: int, index, source, *, alpha=1) -> Tensor:
    """In-place torch.index_add_: ``input`` takes the sum; returns ``input``."""
    out = index_add(input, dim, index, source, alpha=alpha)
    input[...] = out
    return input

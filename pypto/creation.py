"""Tensor creation that works both outside and inside a trace.

Outside a trace (building weights, test inputs) ``pypto.randn/rand/zeros/ones/full/from_torch``
return concrete torch tensors on the CPU. Inside a traced function ``zeros/ones/full`` record a
``full`` op (sizes may be symbolic) and ``from_torch`` records a constant; random tensors cannot be
traced (there is no random op on the device) and raise.
"""
from __future__ import annotations

import numbers

import torch

from . import dtypes, symbolic as sym
from .errors import PyptoError, SymbolicError, TypeMismatchError
from .frontend import api, context as ctx


def _static_shape(shape, fn: str) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        shape = tuple(shape[0])
    out = []
    for d in shape:
        if sym.is_symbolic(d):
            raise SymbolicError(f"pypto.{fn} outside a traced function needs static sizes: expected an int, "
                                f"found the symbolic size {d}",
                                hint="symbolic sizes exist only inside @pypto.jit / a Module's forward")
        if isinstance(d, bool) or not isinstance(d, (numbers.Integral, torch.SymInt)) and not sym.is_static(d):
            raise TypeMismatchError(f"pypto.{fn}: expected int sizes, found {type(d).__name__} {d!r}")
        if int(d) < 0:
            raise PyptoError(f"pypto.{fn}: expected non-negative sizes, found {int(d)}")
        out.append(int(d))
    return tuple(out)


def _torch_dtype(dtype, default=dtypes.float32) -> torch.dtype:
    return dtypes.to_dtype(default if dtype is None else dtype).torch_dtype


def _float_dtype(dtype, fn: str) -> torch.dtype:
    dt = dtypes.to_dtype(dtypes.float32 if dtype is None else dtype)
    if not dt.is_floating:
        from .errors import DTypeError
        raise DTypeError(f"pypto.{fn}: expected a floating dtype (float32, float16, bfloat16), found {dt.name}")
    return dt.torch_dtype


def _no_random_in_trace(fn: str) -> None:
    if ctx.is_tracing():
        raise PyptoError(f"pypto.{fn} cannot be used inside a traced function (there is no random op)",
                         hint="create the random tensor outside and pass it in as an argument")


def randn(*shape, dtype=None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Standard-normal samples (outside a trace only)."""
    _no_random_in_trace("randn")
    return torch.randn(_static_shape(shape, "randn"), dtype=_float_dtype(dtype, "randn"), generator=generator)


def rand(*shape, dtype=None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform [0, 1) samples (outside a trace only)."""
    _no_random_in_trace("rand")
    return torch.rand(_static_shape(shape, "rand"), dtype=_float_dtype(dtype, "rand"), generator=generator)


def full(shape=None, fill_value=None, dtype=None, **kwargs):
    if ctx.is_tracing():             # kwargs: CANN's size= and valid_shape= (frontend/api.full)
        return api.full(shape, fill_value, dtype, **kwargs)
    if "size" in kwargs and shape is None:
        shape = kwargs.pop("size")
    if kwargs:
        raise PyptoError(f"pypto.full outside a trace takes shape, fill_value and dtype, not {sorted(kwargs)}")
    shape = _static_shape((shape,) if isinstance(shape, (numbers.Integral,)) else tuple(shape), "full")
    if dtype is None:
        return torch.full(shape, fill_value)
    return torch.full(shape, fill_value, dtype=_torch_dtype(dtype))


def zeros(*shape, dtype=None):
    if ctx.is_tracing():
        return api.zeros(*shape, dtype=dtypes.float32 if dtype is None else dtype)
    return torch.zeros(_static_shape(shape, "zeros"), dtype=_torch_dtype(dtype))


def ones(*shape, dtype=None):
    if ctx.is_tracing():
        return api.ones(*shape, dtype=dtypes.float32 if dtype is None else dtype)
    return torch.ones(_static_shape(shape, "ones"), dtype=_torch_dtype(dtype))


def from_torch(tensor, dtype=None):
    """A torch tensor as pypto data: outside a trace the (contiguous, CPU) tensor itself, converted to
    ``dtype`` when given; inside a trace a constant node holding its current value."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeMismatchError(f"pypto.from_torch: expected a torch.Tensor, found {type(tensor).__name__}")
    dtypes.from_torch(tensor.dtype)          # raises for dtypes pypto has no equivalent of
    t = tensor.detach()
    if dtype is not None:
        t = t.to(_torch_dtype(dtype))
    if ctx.is_tracing():
        return api.constant(t)
    return t.cpu().contiguous()

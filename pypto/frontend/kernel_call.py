"""A pl / pt kernel called with traced tensors: one ``custom_kernel`` node (``ops/kernel_node.py``) and a
``kernel_result`` per written argument, which the caller's tensor is rebound to (the kernel writes it in
place, as on torch tensors). The front ends (pypto_pro/language/jit.py, pypto/tile/kernel.py) check the
arguments and make the ``KernelNode``; this module only records it."""
from __future__ import annotations

import sympy
import torch

from .. import symbolic as sym
from ..errors import ShapeError
from . import context as ctx
from .tensor import Tensor


def traced_call(args, kwargs) -> bool:
    """True when a kernel launch is part of a trace: called while tracing with a pypto Tensor argument."""
    return ctx.is_tracing() and any(isinstance(a, Tensor) for a in (*args, *kwargs.values()))


def static_dim(d):
    """d as an int when it is one (a sympy Integer included), else None."""
    if isinstance(d, int):
        return int(d)
    if isinstance(d, sympy.Basic) and d.is_Integer:
        return int(d)
    return None


def same_dim(a, b) -> bool:
    return sym.equal(a, b) is True


def emit_kernel_node(node, tensors: dict, scalars: dict):
    """Record the call. ``tensors``: param -> pypto Tensor or torch tensor (a constant of the trace), for
    every name of ``node.params``; ``scalars``: the kernel's run-time scalars (ints or size expressions).
    Returns the new values of ``node.outputs`` (one Tensor, or a tuple of them)."""
    from .api import _write, constant, emit
    inputs = []
    for p in node.params:
        t = tensors[p]
        if isinstance(t, torch.Tensor):
            t = constant(t.detach())
        inputs.append(t)
    call = emit("custom_kernel", inputs, {"kernel": node, "scalars": dict(scalars)})
    results = []
    for k, p in enumerate(node.outputs):
        res = emit("kernel_result", [call], {"index": k})
        arg = tensors[p]
        if isinstance(arg, Tensor):
            if tuple(arg.shape) != tuple(res.shape):
                raise ShapeError(f"kernel {node.name}: argument '{p}' changed shape during the call")
            _write(arg, (0,) * len(arg.shape), res)    # the caller's tensor now holds the written value
        results.append(res)
    return results[0] if len(results) == 1 else tuple(results)

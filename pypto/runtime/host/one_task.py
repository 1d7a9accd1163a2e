"""The ExecutionGraph of one kernel launch, behind every backend's ``run_kernel``: its buffers are
the kernel's GM params (shapes from the arguments), params the kernel stores to are the outputs."""
from __future__ import annotations

import torch

from ...errors import PyptoError
from ...ir.execution import Buffer, ExecutionGraph, Task
from .control import kernel_accesses


def one_task_graph(kernel, args: dict, scalars: dict | None, block_dim) -> tuple[ExecutionGraph, dict]:
    """(a one-task graph launching ``kernel`` over ``block_dim`` cores, the tensor arguments).
    ``args``: GM param name -> tensor, or a shape (a timing-only sim run needs no tensors)."""
    params = {}
    for b in kernel.blocks:
        for g in b.gm_params:
            params.setdefault(g.name, g)
    _, stores = kernel_accesses(kernel)
    buffers = {}
    for name, g in params.items():
        t = args.get(name)
        if t is None:
            raise PyptoError(f"run_kernel: no argument for GM param '{name}' of kernel {kernel.name}", loc=kernel.loc)
        shape = tuple(t.shape) if hasattr(t, "shape") else tuple(t)
        buffers[name] = Buffer(name, shape, g.dtype, "output" if name in stores else "input")
    task = Task(kernel.name, {n: n for n in params}, dict(scalars or {}), block_dim, loc=kernel.loc,
                name=kernel.name)
    graph = ExecutionGraph({kernel.name: kernel}, buffers, [n for n in params if n not in stores],
                           [n for n in params if n in stores], [task])
    return graph, {n: t for n, t in args.items() if isinstance(t, torch.Tensor)}

"""Running a compiled kernel: a one-task ExecutionGraph handed to the ``sim`` or ``cpu`` runtime."""
from __future__ import annotations

import importlib

import torch

from pypto.errors import BackendUnavailableError
from pypto.ir.execution import Buffer, ExecutionGraph, Task

from .compiler import workspace_rows_symbol
from .errors import LaunchError


def execution_graph(compiled, block_dim: int) -> ExecutionGraph:
    kernel = compiled.kernel
    gm = {g.name: g for b in kernel.blocks for g in b.gm_params}
    buffers = {}
    for p in compiled.tensor_params:
        g = gm[p]
        buffers[p] = Buffer(p, g.shape, g.dtype, "output" if p in compiled.outputs else "input")
    for ws in compiled.workspaces:
        buffers[ws.param] = Buffer(ws.param, (workspace_rows_symbol(ws), ws.cols), ws.dtype, "workspace")
    task = Task(kernel.name, {name: name for name in buffers}, {s.name: s for s in compiled.scalar_params},
                block_dim, loc=kernel.loc, name=kernel.name)
    inputs = [p for p in compiled.tensor_params if p not in compiled.outputs]
    import sympy
    symbols = sorted({d for b in buffers.values() for d in b.shape if isinstance(d, sympy.Symbol)}, key=str)
    return ExecutionGraph({kernel.name: kernel}, buffers, inputs, list(compiled.outputs), [task], symbols)


def run_compiled(compiled, tensor_args: dict, env: dict, block_dim: int, backend: str, *, machine=None,
                 timing_only=False, trace=None):
    graph = execution_graph(compiled, block_dim)
    env = dict(env)
    args = {}
    for name, t in tensor_args.items():
        if t.device.type != "cpu":
            raise LaunchError(f"argument '{name}' is on {t.device}; the {backend} backend takes CPU tensors")
        args[name] = t
    for ws in compiled.workspaces:
        rows = ws.rows_per_block * block_dim
        env[workspace_rows_symbol(ws).name] = rows
        args[ws.param] = torch.empty((rows, ws.cols), dtype=ws.dtype.torch_dtype)
    try:
        runtime = importlib.import_module(f"pypto.runtime.{backend}")
    except ModuleNotFoundError as e:
        raise BackendUnavailableError(f"backend '{backend}' is not available: {e}") from None
    options = {"machine": machine}
    if backend == "sim":
        options.update(timing_only=timing_only, trace=trace)
    outs, report = runtime.run(graph, args, env, **options)
    for name, value in outs.items():
        user = tensor_args.get(name)
        if user is not None and value is not user and value.device.type != "meta" and \
                value.data_ptr() != user.data_ptr():
            user.copy_(value)
    return report

"""Launching a compiled tile kernel: a one-task ExecutionGraph (the kernel over ``block_dim`` cores, or
clusters, each taking grid points round-robin) handed to the backend's runtime; the reference backend
interprets the tile program with torch instead."""
from __future__ import annotations

import importlib
import math

import sympy

from ..errors import BackendUnavailableError
from ..ir.execution import Buffer, ExecutionGraph, Task
from .kernel import bind_sizes


def block_dim(compiled, machine, total: int) -> int:
    cores = machine.num_aiv if compiled.kind == "vector" else machine.num_aic
    return max(1, min(total, cores))


def execution_graph(compiled, tensors: dict, grid: tuple, machine) -> tuple:
    prog, kernel = compiled.program, compiled.kernel
    total = math.prod(grid)
    bd = block_dim(compiled, machine, total)
    buffers = {}
    for p in prog.params:
        role = "output" if p.name in prog.outputs else "input"
        buffers[p.name] = Buffer(p.name, tuple(p.shape), p.dtype, role)
    for ws in compiled.workspaces:
        buffers[ws.param] = Buffer(ws.param, (ws.rows_per_block * bd, ws.cols), ws.dtype, "workspace")
    for base, r, c, view, r2, c2, dt in compiled.scratch:          # pt.reshape: one scratch, two shapes
        buffers[base] = Buffer(base, (r * bd, c), dt, "workspace")
        buffers[view] = Buffer(view, (r2 * bd, c2), dt, "workspace", view_of=base)
    scalars = {s.name: int(g) for s, g in zip(prog.grid_sizes, grid)}
    task = Task(kernel.name, {n: n for n in buffers}, scalars, bd, loc=prog.loc, name=kernel.name)
    inputs = [p.name for p in prog.params if p.name not in prog.outputs]
    outputs = [p.name for p in prog.params if p.name in prog.outputs]
    symbols = sorted({d for p in prog.params for d in p.shape if isinstance(d, sympy.Symbol)}, key=str)
    return ExecutionGraph({kernel.name: kernel}, buffers, inputs, outputs, [task], symbols), bd


def launch(compiled, tensors: dict, grid: tuple, backend: str, machine, options: dict, loc):
    prog = compiled.program
    env = bind_sizes(prog, tensors, loc)
    if math.prod(grid) == 0 or backend == "reference":
        from ..runtime.report import set_last_report
        set_last_report(None)           # nothing ran on a machine: last_report() says so, as for pypto.jit
        if math.prod(grid):
            from .interpret import run_program
            run_program(prog, tensors, grid, env)
        return None
    graph, _ = execution_graph(compiled, tensors, grid, machine)
    args = {}
    for name, t in tensors.items():
        args[name] = t if t.is_contiguous() else t.contiguous()
    try:
        runtime = importlib.import_module(f"pypto.runtime.{backend}")
    except ModuleNotFoundError as e:
        raise BackendUnavailableError(f"backend '{backend}' is not available: {e}", loc=loc) from None
    opts = {"machine": machine}
    if backend == "sim":
        opts.update(timing_only=options.get("timing_only", False), trace=options.get("trace"))
    outs, report = runtime.run(graph, args, env, **opts)
    for name in prog.outputs:
        user, value = tensors[name], outs.get(name)
        if value is None or value.device.type == "meta":
            continue
        if value.data_ptr() != user.data_ptr():
            user.copy_(value)
    return report

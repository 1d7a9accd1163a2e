"""A ``pt.kernel`` launched inside a traced pypto function: one node of the traced graph.

    @pypto.jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32]):
        z = pypto.zeros(x.shape[0], 128)
        scale[(pt.cdiv(x.shape[0], 64),)](pypto.exp(x), z)      # z now holds what the kernel stored
        return z + 1.0

Arguments are checked against the kernel's annotations as for torch tensors: a ``pypto.DYNAMIC`` dim may
be a run-time size of the trace (the kernel is traced with it symbolic; the host runtime binds it from
each launch's buffers), other dims must be ints there. Grid extents may be size expressions of the trace.
The kernel's stored params are the node's results (pypto/ir/kernel_node.py); its reference is the tile
interpreter (tile/interpret.py), the ``reference`` backend's meaning of a pt kernel.
"""
from __future__ import annotations

import math

import sympy
import torch

from .. import dtypes, symbolic as sym
from ..errors import DTypeError, ShapeError, TypeMismatchError
from ..frontend import context as ctx
from ..frontend.kernel_call import emit_kernel_node, static_dim
from ..frontend.tensor import Tensor, TensorSpec
from ..ir.kernel_node import KernelBuild, KernelNode
from ..machine import machine_spec


def traced_launch(k, grid, args, kwargs, loc):
    bound = k.bind(args, kwargs, loc)
    grid = _grid(grid(dict(bound.arguments)) if callable(grid) else grid, k.name, loc)
    key, tensors = _key(k, bound, loc)
    machine = machine_spec(k.machine)
    ckey = ("node", machine.name, len(grid), key)
    program = k.cache.get(ckey)
    if program is None:
        with ctx.compile_lock:
            program = k.cache.get(ckey)
            if program is None:
                program = k.cache[ckey] = k.trace(bound, key, len(grid), machine)
    node = TileNode(k, program, key, grid, loc, ckey)
    scalars = {s.name: g for s, g in zip(program.grid_sizes, grid)}
    return emit_kernel_node(node, dict(tensors), scalars)


def _grid(grid, name, loc) -> tuple:
    if isinstance(grid, (int, sympy.Basic)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not grid or \
            not all(isinstance(g, (int, sympy.Basic)) and not isinstance(g, bool) for g in grid):
        raise TypeMismatchError(f"{name}[grid]: the grid is an int or a tuple of ints or sizes (or a function of "
                                f"the arguments returning one), found {grid!r}", loc=loc)
    if any(isinstance(g, int) and g < 0 for g in grid):
        raise ShapeError(f"{name}[grid]: grid extents must be >= 0, found {tuple(grid)}", loc=loc)
    return tuple(grid)


def _key(k, bound, loc):
    """The signature key (as TileKernel.signature_key) of traced / torch tensor arguments."""
    key, tensors, dyn = [], [], {}
    for pname, v in bound.arguments.items():
        ann = k.signature.parameters[pname].annotation
        spec = ann if isinstance(ann, TensorSpec) else None
        if isinstance(v, (Tensor, torch.Tensor)):
            dt = v.dtype if isinstance(v, Tensor) else dtypes.from_torch(v.dtype)
            shape = tuple(v.shape)
            if spec is not None:
                if len(shape) != len(spec.shape):
                    raise ShapeError(f"{k.name}: argument '{pname}' must have rank {len(spec.shape)} (declared "
                                     f"{spec!r}), found shape {list(shape)}", loc=loc)
                if spec.dtype is not None and spec.dtype != dt:
                    raise DTypeError(f"{k.name}: argument '{pname}' must be {spec.dtype.name}, found {dt.name}",
                                     loc=loc)
            dims = []
            for i, n in enumerate(shape):
                d = spec.shape[i] if spec is not None else None
                if d is sym.DYNAMIC:
                    dims.append(("dyn", dyn.setdefault(n, f"{pname}_d{i}")))
                elif isinstance(d, sympy.Symbol):
                    dims.append(("dyn", d.name))
                else:
                    s = static_dim(n)
                    if s is None:
                        raise ShapeError(f"{k.name}: dim {i} of argument '{pname}' is the run-time size {n} in "
                                         "the traced graph, but the kernel takes it static", loc=loc,
                                         hint="annotate the parameter with pypto.DYNAMIC there")
                    if isinstance(d, int) and d != s:
                        raise ShapeError(f"{k.name}: argument '{pname}' dim {i} must be {d} (declared {spec!r}), "
                                         f"found shape {list(shape)}", loc=loc)
                    dims.append(s)
            key.append((pname, dt.name, tuple(dims)))
            tensors.append((pname, v))
        else:
            if spec is not None:
                raise TypeMismatchError(f"{k.name}: argument '{pname}' is declared {spec!r}; expected a tensor, "
                                        f"found {type(v).__name__} {v!r:.40}", loc=loc)
            try:
                hash(v)
            except TypeError:
                raise TypeMismatchError(f"{k.name}: argument '{pname}' is neither a tensor nor a hashable "
                                        f"constant ({type(v).__name__})", loc=loc) from None
            key.append((pname, "const", v))
    return tuple(key), tensors


class TileNode(KernelNode):
    level = "tile"

    def __init__(self, kernel, program, key, grid, loc, ckey):
        self.kernel, self.program, self.key, self.grid, self.loc = kernel, program, key, grid, loc
        self.ckey = ckey                # the traced program's key in kernel.cache
        self.name = program.name
        self.params = tuple(p.name for p in program.params)
        self.outputs = tuple(p.name for p in program.params if p.name in program.outputs)

    def build(self, machine) -> KernelBuild:
        # compiled once per program and machine in the kernel's cache: every call of it (in one graph or
        # in later traces) launches the same Block IR kernel, which the ExecutionGraph holds once
        bkey = ("node-build", machine.name, self.ckey)
        compiled = self.kernel.cache.get(bkey)
        if compiled is None:
            from .compile import compile_program
            with ctx.compile_lock:
                compiled = self.kernel.cache.get(bkey)
                if compiled is None:
                    compiled = self.kernel.cache[bkey] = compile_program(self.program, "sim", machine,
                                                                         self.kernel.compile_options(self.key))
        from .run import block_dim
        cores = machine.num_aiv if compiled.kind == "vector" else machine.num_aic
        total = math.prod(self.grid)
        if isinstance(total, int):
            bd = rows = block_dim(compiled, machine, total)
        else:                   # a run-time grid: workspaces sized for every core the launch may take
            bd, rows = sympy.Max(1, sympy.Min(total, cores)), cores
        workspaces = [(ws.param, (ws.rows_per_block * rows, ws.cols), ws.dtype) for ws in compiled.workspaces]
        views = []
        for base, r, c, view, r2, c2, dt in compiled.scratch:           # pt.reshape: one scratch, two shapes
            workspaces.append((base, (r * rows, c), dt))
            views.append((view, (r2 * rows, c2), dt, base))
        scalars = {s.name: g for s, g in zip(self.program.grid_sizes, self.grid)}
        return KernelBuild(compiled.kernel, workspaces, views, scalars, bd)

    def reference(self, tensors: dict, scalars: dict) -> dict:
        from .interpret import run_program
        from .kernel import bind_sizes
        grid = tuple(int(scalars[s.name]) for s in self.program.grid_sizes)
        env = bind_sizes(self.program, tensors, self.loc)
        if math.prod(grid):
            run_program(self.program, tensors, grid, env)
        return {p: tensors[p] for p in self.outputs}

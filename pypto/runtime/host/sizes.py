"""Run-time sizes: the size symbols of one run (``bind_sizes``: the caller's, plus those the
arguments' shapes give), and the sizes a kernel's GM params take from the buffers a task binds to
them (``kernel_sizes``), checked against the params' declared shapes."""
from __future__ import annotations

import sympy

from ...errors import ShapeError, SymbolicError
from ...symbolic import evaluate


def bind_sizes(graph, args: dict, env: dict | None) -> dict:
    """Size symbols by name: the caller's ``env``, plus any a bare-symbol dim of an argument's shape
    gives (an argument that disagrees with ``env`` or with another argument is a ShapeError)."""
    out = {str(getattr(k, "name", k)): int(v) for k, v in (env or {}).items()}
    for name, t in args.items():
        b = graph.buffers.get(name)
        if b is None or b.view_of is not None or not hasattr(t, "shape"):
            continue
        if len(t.shape) != len(b.shape):
            raise ShapeError(f"argument '{name}' has shape {list(t.shape)}, the program's buffer is "
                             f"{len(b.shape)}-d {list(b.shape)}")
        for d, a in zip(b.shape, t.shape):
            if isinstance(d, sympy.Symbol):
                if d.name in out and out[d.name] != a:
                    raise ShapeError(f"size {d.name} is {out[d.name]} but argument '{name}' has {a} there "
                                     f"(shape {list(t.shape)})")
                out.setdefault(d.name, int(a))
    return out


def kernel_sizes(kernel, task, shapes: dict, env: dict) -> dict:
    """Values of the size symbols of ``kernel``'s GM param shapes, read off the shapes (``shapes``:
    buffer name -> evaluated shape) of the buffers ``task`` binds to them. Ranks, static dims and
    dims that are expressions of known sizes must agree with the buffers: else a ShapeError at the
    task's line."""
    what = f"task {task.name or task.kernel}"
    sizes: dict = {}
    params = [(g, shapes[task.gm_args[g.name]]) for blk in kernel.blocks for g in blk.gm_params]
    for g, shape in params:
        if len(shape) != len(g.shape):
            raise ShapeError(f"{what}: kernel {kernel.name} param {g.name} is {len(g.shape)}-d but buffer "
                             f"'{task.gm_args[g.name]}' is {list(shape)}", loc=task.loc)
        for d, v in zip(g.shape, shape):
            if isinstance(d, sympy.Symbol):
                if sizes.setdefault(d.name, v) != v:
                    raise ShapeError(f"{what}: kernel {kernel.name}: size {d.name} is {sizes[d.name]} from one "
                                     f"GM param and {v} from {g.name}", loc=task.loc)
    known = {**env, **sizes}
    for g, shape in params:
        for d, v in zip(g.shape, shape):
            if isinstance(d, sympy.Symbol):
                continue
            if isinstance(d, sympy.Basic) and d.free_symbols:
                try:
                    want = evaluate(d, known)
                except SymbolicError:
                    continue            # a size nothing binds here: the kernel's own check
            else:
                want = int(d)
            if want != v:
                raise ShapeError(f"{what}: kernel {kernel.name} param {g.name} has shape {list(g.shape)} but "
                                 f"buffer '{task.gm_args[g.name]}' is {list(shape)}", loc=task.loc)
    return sizes

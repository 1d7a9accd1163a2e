"""The program's GM buffers for one run: shapes evaluated from the sizes, a torch tensor per base
buffer (the caller's argument, a constant's captured data, or allocated), and views
(``Buffer.view_of``) resolved into their base's bytes — once when the sizes fix a view's offset,
per task instance when it depends on a loop variable. In timing-only mode there are no tensors:
a buffer's "tensor" is its shape."""
from __future__ import annotations

import math

import sympy
import torch

from ...errors import DTypeError, PyptoError, ShapeError, SymbolicError
from ...symbolic import evaluate
from .exprs import compile_tuple


class GMBuffers:
    """Buffer name -> tensor for one run (``get``), and where each buffer lies in its base
    (``location``). ``poison``: allocated outputs and workspaces start as NaN (zero for integers),
    so that reading what no task wrote shows in the result; else they are uninitialised.
    ``workspaces``: tensors a previous run at the same sizes allocated, to use again; ``shapes``:
    the buffer shapes when already evaluated. ``copy_back``: (name, caller's tensor, the contiguous
    copy the run uses) for each non-contiguous argument."""

    def __init__(self, graph, args: dict, env: dict, *, timing_only: bool = False, poison: bool = True,
                 shapes: dict | None = None, workspaces: dict | None = None):
        self.graph, self.env, self.timing_only, self.poison = graph, env, timing_only, poison
        self.args = args                # the caller's tensors (data scalars are read from them: host/scalars.py)
        self.workspaces = workspaces or {}
        for name in args:
            if name not in graph.buffers:
                raise PyptoError(f"argument '{name}' is not a buffer of the program "
                                 f"(buffers: {', '.join(graph.buffers)})")
        self.shapes = shapes if shapes is not None else \
            {n: _shape(graph, n, b, env) for n, b in graph.buffers.items()}
        self.itemsize = {n: b.dtype.itemsize for n, b in graph.buffers.items()}
        self.tensors: dict = {}         # base buffers and views at a fixed offset
        self.copy_back: list = []
        self.views: dict = {}           # view name -> (base name, byte offset int, or evaluator(env) -> (int,))
        for name, b in graph.buffers.items():
            if b.view_of is None:
                self.tensors[name] = self._tensor(name, b, args.get(name))
        for name, b in graph.buffers.items():
            if b.view_of is not None:
                if name in args:
                    raise PyptoError(f"argument '{name}' names a view of '{b.view_of}'; pass the base buffer")
                self.views[name] = self._view_offset(name)
                if not self.is_dynamic(name):
                    self.tensors[name] = self._view(name, env)

    def _tensor(self, name, b, t):
        shape = self.shapes[name]
        if self.timing_only:
            return shape
        if t is None and b.role == "constant" and getattr(b, "data", None) is not None:
            t = b.data                  # a constant captured at trace time carries its value
        if t is None:
            if b.role in ("input", "constant"):
                raise PyptoError(f"input '{name}' ({b.dtype}{list(b.shape)}) has no argument")
            kept = self.workspaces.get(name) if b.role == "workspace" else None
            if kept is not None and tuple(kept.shape) == shape and kept.dtype == b.dtype.torch_dtype:
                return kept
            return _allocate(shape, b.dtype.torch_dtype, self.poison)
        if not isinstance(t, torch.Tensor):
            raise PyptoError(f"argument '{name}' is a {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != b.dtype.torch_dtype:
            raise DTypeError(f"argument '{name}' is {t.dtype}, the program expects {b.dtype.torch_dtype}")
        if tuple(t.shape) != shape:
            raise ShapeError(f"argument '{name}' has shape {list(t.shape)}, the program expects {list(shape)}")
        if t.device.type != "cpu":
            raise PyptoError(f"argument '{name}' is on {t.device}; runs take CPU tensors")
        if not t.is_contiguous():
            c = t.contiguous()
            self.copy_back.append((name, t, c))
            return c
        return t

    def _view_offset(self, name):
        """(base, byte offset): an int when the sizes fix it, else an evaluator over a task's loop variables."""
        bufs = self.graph.buffers
        b, off, seen = bufs[name], sympy.Integer(0), set()
        while b.view_of is not None:
            if b.name in seen:
                raise PyptoError(f"buffer '{name}' is a view of itself")
            seen.add(b.name)
            base = bufs[b.view_of]
            off += sympy.sympify(b.view_offset) * base.dtype.itemsize
            b = base
        off = sympy.sympify(off)
        try:
            return b.name, evaluate(off, self.env)
        except PyptoError:
            return b.name, compile_tuple([off], f"view {name} offset")

    def location(self, name: str, env: dict) -> tuple:
        """(base buffer, byte offset) of a buffer for a task instance's environment."""
        if name not in self.views:
            return name, 0
        base, off = self.views[name]
        return base, (off if isinstance(off, int) else off(env)[0])

    def base_of(self, name: str) -> str:
        return self.views[name][0] if name in self.views else name

    def is_dynamic(self, name: str) -> bool:
        return name in self.views and not isinstance(self.views[name][1], int)

    def get(self, name: str, env: dict):
        """The tensor (shape, in timing-only mode) of a buffer for a task instance's environment."""
        t = self.tensors.get(name)
        return t if t is not None else self._view(name, env)

    def _view(self, name: str, env: dict):
        shape = self.shapes[name]
        base, off = self.location(name, env)
        n = math.prod(shape) * self.itemsize[name]
        base_bytes = math.prod(self.shapes[base]) * self.itemsize[base]
        if off < 0 or off + n > base_bytes:
            raise ShapeError(f"view '{name}' ({list(shape)} at byte {off}) runs past its base '{base}' "
                             f"({base_bytes} bytes)")
        if self.timing_only:
            return shape
        raw = self.tensors[base].reshape(-1).view(torch.uint8)
        return raw[off:off + n].view(self.graph.buffers[name].dtype.torch_dtype).view(shape)


def _shape(graph, name, b, env) -> tuple:
    try:
        return tuple(evaluate(d, env) for d in b.shape)
    except SymbolicError:
        reads = getattr(graph, "scalar_reads", None) or {}
        names = {s.name for d in b.shape if isinstance(d, sympy.Basic) for s in d.free_symbols}
        hit = next((reads[n] for n in sorted(names) if n in reads), None)
        if hit is None:
            raise
        raise PyptoError(f"buffer '{name}' has shape {list(b.shape)}, which depends on a value read from "
                         f"'{hit.buffer}' while the program runs (pypto.item); GM buffers are allocated before "
                         "the control program runs", loc=hit.loc,
                         hint="size intermediate tensors by run-time sizes (a shape or a static bound) and use "
                              "the data scalar in loop bounds, view offsets and valid shapes") from None


def _allocate(shape, dtype, poison: bool) -> torch.Tensor:
    if not poison:
        return torch.empty(shape, dtype=dtype)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.zeros(shape, dtype=dtype)

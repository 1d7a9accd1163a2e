"""The program's GM buffers for one run: shapes evaluated from the sizes, torch tensors (the caller's
or allocated; shapes only in timing-only mode), and views (``Buffer.view_of``) resolved into their
base's bytes — per task instance when a view's offset depends on a loop variable."""
from __future__ import annotations

import math

import sympy
import torch

from ...errors import SimError
from ...symbolic import evaluate
from .exprs import compile_tuple


def bind_env(graph, args: dict, env: dict) -> dict:
    """Size symbols by name: the caller's, plus any a bare-symbol dim of an argument's shape gives."""
    out = {str(getattr(k, "name", k)): int(v) for k, v in (env or {}).items()}
    for name, t in args.items():
        b = graph.buffers.get(name)
        if b is None or not hasattr(t, "shape") or b.view_of is not None:
            continue
        if len(t.shape) != len(b.shape):
            raise SimError(f"argument '{name}' has shape {list(t.shape)}, the program's buffer is "
                           f"{len(b.shape)}-d {list(b.shape)}")
        for d, a in zip(b.shape, t.shape):
            if isinstance(d, sympy.Symbol):
                if d.name in out and out[d.name] != a:
                    raise SimError(f"size {d.name} is {out[d.name]} but argument '{name}' has {a} there "
                                   f"(shape {list(t.shape)})")
                out.setdefault(d.name, int(a))
    return out


def _poison(shape, dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.zeros(shape, dtype=dtype)


class GMBuffers:
    def __init__(self, graph, args: dict, env: dict, timing_only: bool):
        self.graph, self.env, self.timing_only = graph, env, timing_only
        for name in args:
            if name not in graph.buffers:
                raise SimError(f"argument '{name}' is not a buffer of the program "
                               f"(buffers: {', '.join(graph.buffers)})")
        self.shapes = {n: tuple(evaluate(d, env) for d in b.shape) for n, b in graph.buffers.items()}
        self.itemsize = {n: b.dtype.itemsize for n, b in graph.buffers.items()}
        self.tensors: dict = {}
        self.copy_back: list = []
        self.views: dict = {}           # view name -> (base name, byte offset int, or evaluator(env) -> (int,))
        for name, b in graph.buffers.items():
            if b.view_of is None:
                self.tensors[name] = self._tensor(name, b, args.get(name))
        for name, b in graph.buffers.items():
            if b.view_of is not None:
                self.views[name] = self._view_offset(name)
                if name in args:
                    raise SimError(f"argument '{name}' names a view of '{b.view_of}'; pass the base buffer")

    def _tensor(self, name, b, t):
        shape = self.shapes[name]
        if self.timing_only:
            return shape
        if t is None and b.role == "constant" and getattr(b, "data", None) is not None:
            t = b.data                  # a constant captured at trace time carries its value
            if isinstance(t, torch.Tensor) and t.dtype == b.dtype.torch_dtype and tuple(t.shape) == shape:
                return t.contiguous()
        if t is None:
            if b.role in ("input", "constant"):
                raise SimError(f"input '{name}' ({b.dtype}{list(b.shape)}) has no argument")
            return _poison(shape, b.dtype.torch_dtype)
        if not isinstance(t, torch.Tensor):
            raise SimError(f"argument '{name}' is a {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != b.dtype.torch_dtype:
            raise SimError(f"argument '{name}' is {t.dtype}, the program expects {b.dtype.torch_dtype}")
        if tuple(t.shape) != shape:
            raise SimError(f"argument '{name}' has shape {list(t.shape)}, the program expects {list(shape)}")
        if t.device.type != "cpu":
            raise SimError(f"argument '{name}' is on {t.device}; the simulator takes CPU tensors")
        if not t.is_contiguous():
            c = t.contiguous()
            if name in self.graph.outputs:      # an input only read (maybe expanded, stride 0) is not written back
                self.copy_back.append((t, c))
            return c
        return t

    def _view_offset(self, name):
        """(base, byte offset): an int when the sizes fix it, else an evaluator over a task's loop variables."""
        bufs = self.graph.buffers
        b, off = bufs[name], sympy.Integer(0)
        while b.view_of is not None:
            base = bufs[b.view_of]
            off += sympy.sympify(b.view_offset) * base.dtype.itemsize
            b = base
        off = sympy.sympify(off)
        try:
            return b.name, evaluate(off, self.env)
        except Exception:
            return b.name, compile_tuple([off], f"view {name} offset")

    def location(self, name: str, env: dict) -> tuple:
        """(base buffer, byte offset) of a buffer for a task instance's environment."""
        if name not in self.views:
            return name, 0
        base, off = self.views[name]
        return base, (off if isinstance(off, int) else off(env)[0])

    def is_dynamic(self, name: str) -> bool:
        return name in self.views and not isinstance(self.views[name][1], int)

    def get(self, name: str, env: dict):
        """The tensor (shape, in timing-only mode) of a buffer for a task instance's environment."""
        if name not in self.views:
            return self.tensors[name]
        shape = self.shapes[name]
        base, off = self.location(name, env)
        n = math.prod(shape) * self.itemsize[name]
        base_bytes = math.prod(self.shapes[base]) * self.itemsize[base]
        if off < 0 or off + n > base_bytes:
            raise SimError(f"view '{name}' ({list(shape)} at byte {off}) runs past its base '{base}' "
                           f"({base_bytes} bytes)")
        if self.timing_only:
            return shape
        raw = self.tensors[base].reshape(-1).view(torch.uint8)
        return raw[off:off + n].view(self.graph.buffers[name].dtype.torch_dtype).view(shape)

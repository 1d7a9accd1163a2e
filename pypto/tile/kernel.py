"""``@pt.kernel``: a Tile-level kernel, launched over a grid of programs.

    @pt.kernel
    def add(X, Y, Z, BM: int = 64):
        i = pt.program_id(0)
        pt.store(Z.tile((BM, 128))[i, 0], pt.load(X.tile((BM, 128))[i, 0]) + pt.load(Y.tile((BM, 128))[i, 0]))

    add[(pt.cdiv(M, 64),)](x, y, z)                 # grid: ints ...
    add[lambda meta: (pt.cdiv(meta["X"].shape[0], meta["BM"]),)](x, y, z, BM=64)   # ... or from the arguments

Tensor arguments are torch tensors (the kernel writes its outputs into them); every other argument is
a compile-time constant. The body is traced once per signature (dtypes, shapes, constants): a tensor
parameter annotated ``pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float16]`` keeps its DYNAMIC dims
symbolic (one compilation for every size), other dims are specialised. The grid's extents are
run-time values. Backends: ``pt.kernel(backend="sim" | "cpu" | "reference")``, else pypto's
current backend (``pypto.set_backend``); the reference backend interprets the traced tile program
with torch.
"""
from __future__ import annotations

import functools

import sympy
import torch

from .. import backends, dtypes, symbolic as sym
from ..errors import (DTypeError, PyptoError, ShapeError, SymbolicError, TypeMismatchError, raising_user_location,
                      user_entry, user_location)
from ..frontend import context as ctx
from ..frontend.signature import evaluated_signature
from ..frontend.jit import _fn_loc, _has_varargs, _positional, bind_sizes as _bind_declared
from ..frontend.tensor import TensorSpec
from ..machine import machine_spec
from ..sanitize import user_name
from ..symbolic import index_symbol
from . import trace
from .ir import GMTensor, KernelProgram
from .views import TensorArg

class TileKernel:
    def __init__(self, fn, *, backend: str | None = None, machine=None, dump: str | None = None,
                 timing_only: bool = False, trace: str | None = None, name: str | None = None):
        self.fn = fn
        self.name = user_name(name, "pt.kernel", default=getattr(fn, "__name__", "kernel"))
        self.signature = evaluated_signature(fn, self.name, TypeMismatchError)
        self.backend = backends.check_backend(backend) if backend else None
        self.machine = machine
        self.options = {"dump": dump, "timing_only": timing_only, "trace": trace}
        self.cache: dict = {}
        self.last_report = None
        self.trace_count = 0
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid) -> "Launch":
        return Launch(self, grid)

    def __call__(self, *args, **kwargs):
        raise PyptoError(f"launch the tile kernel {self.name} over a grid: {self.name}[grid](tensors...)")

    def report(self):
        return self.last_report

    def compile_options(self, key) -> dict:
        """The options of compiling one signature: the kernel's, and its constants (named in its dump)."""
        return {**self.options, "constants": [(p, v) for p, kind, v in key if kind == "const"]}

    # ------------------------------------------------------------------ signature
    def bind(self, args, kwargs, loc):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeMismatchError(f"{self.name}: {e}", loc=loc) from None
        bound.apply_defaults()
        return bound

    def signature_key(self, bound, loc):
        """-> (key, [(param, tensor)], {(param, dim): symbol name or None})"""
        key, tensors, dyn = [], [], {}
        for pname, v in bound.arguments.items():
            if isinstance(v, torch.Tensor):
                ann = self.signature.parameters[pname].annotation
                spec = ann if isinstance(ann, TensorSpec) else None
                _check_spec(self.name, pname, v, spec, loc)
                dims = []
                for i, n in enumerate(v.shape):
                    d = spec.shape[i] if spec is not None else n
                    if d is sym.DYNAMIC:
                        dims.append(("dyn", dyn.setdefault(int(n), f"{pname}_d{i}")))
                    elif isinstance(d, sympy.Symbol):
                        dims.append(("dyn", d.name))
                    else:
                        dims.append(int(n))
                key.append((pname, dtypes.from_torch(v.dtype).name, tuple(dims)))
                tensors.append((pname, v))
            else:
                ann = self.signature.parameters[pname].annotation
                if isinstance(ann, TensorSpec):
                    raise TypeMismatchError(f"{self.name}: argument '{pname}' is declared {ann!r}; expected a "
                                            f"torch tensor, found {type(v).__name__} {v!r:.40}", loc=loc)
                try:
                    hash(v)
                    key.append((pname, "const", v))
                except TypeError:
                    raise TypeMismatchError(f"{self.name}: argument '{pname}' is neither a torch tensor nor a "
                                            f"hashable constant ({type(v).__name__})", loc=loc) from None
        return tuple(key), tensors

    # ------------------------------------------------------------------ tracing
    def trace(self, bound, key, grid_rank: int, machine) -> KernelProgram:
        params, call = [], dict(bound.arguments)
        symbols: dict = {}
        for pname, dt, dims in (k for k in key if k[1] != "const"):
            shape = tuple(d if isinstance(d, int) else symbols.setdefault(d[1], sym.symbol(d[1])) for d in dims)
            gm = GMTensor(pname, dtypes.to_dtype(dt), shape)
            params.append(gm)
            call[pname] = TensorArg(gm)
        pids = [index_symbol(f"pid{k}") for k in range(grid_rank)]
        sizes = [sym.symbol(f"grid{k}") for k in range(grid_rank)]
        prog = KernelProgram(self.name, params, grid_rank, pids, sizes, [], set(), _fn_loc(self.fn))
        tr = trace.push(trace.Tracer(prog, machine))
        try:
            ret = self.fn(**call) if not _has_varargs(self.signature) else \
                self.fn(*_positional(self.signature, call))
        except AttributeError as e:
            self._constant_used_as_tensor(e, bound)
            raise
        finally:
            trace.pop()
        if tr.loops:
            raise PyptoError(f"{self.name}: a pt.range loop was left with break/return", loc=tr.loops[-1].loc)
        if ret is not None:
            raise PyptoError(f"{self.name}: a tile kernel returns nothing; write results with pt.store",
                             loc=prog.loc)
        if not prog.outputs:
            raise PyptoError(f"{self.name}: the kernel stores nothing (pt.store(view, tile) writes results)",
                             loc=prog.loc)
        self.trace_count += 1
        return prog

    def _constant_used_as_tensor(self, e: AttributeError, bound) -> None:
        """Raise a clear error when ``e`` comes from a constant argument (say a float passed for a
        tensor) used as a tensor in the kernel body (``X.tile(...)``, ``X.shape``)."""
        if getattr(e, "name", None) not in _TENSOR_ATTRS:
            return
        pname = next((p for p, v in bound.arguments.items()
                      if v is getattr(e, "obj", None) and not isinstance(v, torch.Tensor)), None)
        if pname is None:
            return
        v = bound.arguments[pname]
        raise TypeMismatchError(f"{self.name}: argument '{pname}' is a constant ({type(v).__name__} {v!r:.40}) "
                                f"but the kernel uses it as a tensor (.{e.name}); pass a torch tensor",
                                loc=raising_user_location(e)) from None


class Launch:
    """``kernel[grid]``: call it with the kernel's arguments."""

    def __init__(self, kernel: TileKernel, grid):
        self.kernel, self.grid = kernel, grid

    @user_entry
    def __call__(self, *args, **kwargs):
        loc = user_location()
        k = self.kernel
        from ..frontend.kernel_call import traced_call
        if traced_call(args, kwargs):
            from .node import traced_launch         # called inside a traced function: one graph node
            return traced_launch(k, self.grid, args, kwargs, loc)
        bound = k.bind(args, kwargs, loc)
        grid = _grid(self.grid, bound.arguments, k.name, loc)
        key, tensors = k.signature_key(bound, loc)
        backend = k.backend or backends.get_backend()
        machine = machine_spec(k.machine)
        ckey = (backend, machine.name, len(grid), key)
        compiled = k.cache.get(ckey)
        if compiled is None:
            with ctx.compile_lock:           # threads launching a new signature at once: one traces it
                compiled = k.cache.get(ckey)
                if compiled is None:
                    program = k.trace(bound, key, len(grid), machine)
                    from .compile import compile_program
                    compiled = compile_program(program, backend, machine, k.compile_options(key))
                    k.cache[ckey] = compiled
        from .run import launch
        report = launch(compiled, dict(tensors), grid, backend, machine, k.options, loc)
        k.last_report = report
        return report

    @user_entry
    def trace(self, *args, **kwargs) -> KernelProgram:
        """The traced tile program for these arguments (not compiled, not run)."""
        loc = user_location()
        k = self.kernel
        bound = k.bind(args, kwargs, loc)
        grid = _grid(self.grid, bound.arguments, k.name, loc)
        key, _ = k.signature_key(bound, loc)
        with ctx.compile_lock:
            return k.trace(bound, key, len(grid), machine_spec(k.machine))

    @user_entry
    def compile(self, *args, **kwargs):
        """The compiled form (Block IR kernel and launch plan) for these arguments."""
        loc = user_location()
        k = self.kernel
        bound = k.bind(args, kwargs, loc)
        grid = _grid(self.grid, bound.arguments, k.name, loc)
        key, _ = k.signature_key(bound, loc)
        backend = k.backend or backends.get_backend()
        machine = machine_spec(k.machine)
        from .compile import compile_program
        with ctx.compile_lock:
            return compile_program(k.trace(bound, key, len(grid), machine), backend, machine, k.compile_options(key))


# attributes of a tensor argument in a kernel body (views.TensorArg)
_TENSOR_ATTRS = {"tile", "shape", "dtype", "ndim", "size", "name"}


def _grid(grid, arguments: dict, name: str, loc) -> tuple:
    if callable(grid):
        grid = grid(dict(arguments))
    if isinstance(grid, int):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not grid or \
            not all(isinstance(g, int) and not isinstance(g, bool) for g in grid):
        raise TypeMismatchError(f"{name}[grid]: the grid is an int or a tuple of ints (or a function of the "
                                f"arguments returning one), found {grid!r}", loc=loc)
    if any(g < 0 for g in grid):
        raise ShapeError(f"{name}[grid]: grid extents must be >= 0, found {tuple(grid)}", loc=loc)
    return tuple(int(g) for g in grid)


def _check_spec(name, pname, t, spec, loc):
    if t.device.type != "cpu":
        raise TypeMismatchError(f"{name}: argument '{pname}' is on {t.device}; kernels take CPU tensors here",
                                loc=loc)
    if spec is None:
        return
    if t.dim() != len(spec.shape):
        raise ShapeError(f"{name}: argument '{pname}' must have rank {len(spec.shape)} (declared {spec!r}), "
                         f"found shape {list(t.shape)}", loc=loc)
    if spec.dtype is not None and dtypes.from_torch(t.dtype) != spec.dtype:
        raise DTypeError(f"{name}: argument '{pname}' must be {spec.dtype.name}, found {t.dtype}", loc=loc)
    for i, (d, n) in enumerate(zip(spec.shape, t.shape)):
        if isinstance(d, int) and d != n:
            raise ShapeError(f"{name}: argument '{pname}' dim {i} must be {d} (declared {spec!r}), found "
                             f"shape {list(t.shape)}", loc=loc)


def bind_sizes(program: KernelProgram, tensors: dict, loc) -> dict:
    return _bind_declared(((p.name, p.shape, tensors[p.name]) for p in program.params), loc)


def kernel(fn=None, **options):
    """``@pt.kernel`` or ``@pt.kernel(backend="cpu", machine="a2a3", dump=dir, timing_only=True)``.
    ``kernel[grid](...)`` with pypto Tensors inside a traced function is one node of its graph
    (pypto/tile/node.py)."""
    if fn is None:
        return lambda f: TileKernel(f, **options)
    return TileKernel(fn, **options)

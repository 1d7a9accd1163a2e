"""``@pl.jit``: a Professional-mode kernel, compiled per launch signature and run on a backend.

    @pl.jit                                  # or @pl.jit(backend="cpu", pipeline=pl.PipelineConfig(preload=1))
    def add_kernel(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16], ...): ...

    add_kernel[None, block_dim](x, y, z)              # stream (ignored on sim/cpu), block_dim
    add_kernel[None, block_dim, {"TILE_N": 128}](...)  # with a TilingKey

The signature of a compilation is: per tensor, its dtype and its static dims (``pl.DYNAMIC`` dims
are run-time sizes and do not cause recompilation); the values of compile-time arguments; the
TilingKey values. The Block IR, the pipelined loops as marked for the pass and kernel.cpp are written to the build dir.
"""
from __future__ import annotations

import functools

import sympy
import torch

from pypto import backends, dtypes, symbolic
from pypto.errors import user_entry
from pypto.frontend.context import compile_lock
from pypto.frontend.signature import evaluated_signature
from pypto.machine import machine_spec
from pypto.sanitize import user_name

from .errors import LaunchError
from .types import STATIC, ScalarAnnotation, TensorAnnotation, const_key


class ProKernel:
    def __init__(self, fn, *, backend: str | None = None, pipeline=None, tiling_key=None, machine=None,
                 auto_sync: bool = True, timing_only: bool = False, trace=None, dump=None, name=None,
                 reference=None):
        self.fn = fn
        self.reference = reference           # torch semantics of a launch, for traced calls (see _Launch)
        self.name = user_name(name, "pl.jit", default=getattr(fn, "__name__", "kernel"))
        self.signature = evaluated_signature(fn, self.name, LaunchError)
        self.backend = backends.check_backend(backend) if backend else None
        self.pipeline = pipeline
        self.tiling_key = tiling_key
        self.machine_name = machine
        self.auto_sync = auto_sync
        self.timing_only = timing_only
        self.trace = trace
        self.dump = dump
        self.cache: dict = {}
        self.compile_count = 0
        self.last_report = None
        self.last_build_dir = None
        functools.update_wrapper(self, fn)

    @property
    def machine(self):
        return machine_spec(self.machine_name)

    # ------------------------------------------------------------------ launch syntax
    def __getitem__(self, launch):
        if not isinstance(launch, tuple):
            launch = (None, launch)
        if len(launch) not in (2, 3):
            raise LaunchError("launch as kernel[stream, block_dim](...) or kernel[stream, block_dim, {key: value}]")
        stream, block_dim = launch[0], launch[1]
        key = launch[2] if len(launch) == 3 else None
        if not isinstance(block_dim, int) or isinstance(block_dim, bool) or block_dim < 1:
            raise LaunchError(f"block_dim must be a positive int, found {block_dim!r}")
        return _Launch(self, block_dim, key)

    def __call__(self, *args, **kwargs):
        raise LaunchError(f"launch {self.name} with a block dimension: {self.name}[stream, block_dim](...)",
                          hint=f"e.g. {self.name}[None, 8](x, y)")

    # ------------------------------------------------------------------ compilation
    @user_entry
    def compile(self, *args, block_dim: int = 1, key: dict | None = None, **kwargs):
        """Compile (or fetch from the cache) for these arguments; returns the CompiledKernel."""
        return self._prepare(args, kwargs, key)[0]

    def _key_values(self, key):
        if self.tiling_key is None:
            if key:
                raise LaunchError(f"{self.name} has no TilingKey but the launch gives {key}")
            return None
        return self.tiling_key.resolve(key or {})

    def _prepare(self, args, kwargs, key):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise LaunchError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        key_values = self._key_values(key)
        sig, tensors, scalars, consts, env, tensor_args = [], {}, {}, {}, {}, {}
        for pname, v in bound.arguments.items():
            ann = self.signature.parameters[pname].annotation
            if isinstance(v, torch.Tensor):
                dt = dtypes.from_torch(v.dtype)
                shape = []
                if isinstance(ann, TensorAnnotation):
                    if len(ann.shape) != v.dim():
                        raise LaunchError(f"{self.name}: argument '{pname}' must have rank {len(ann.shape)}, "
                                          f"found shape {list(v.shape)}")
                    if ann.dtype is not None and ann.dtype != dt:
                        raise LaunchError(f"{self.name}: argument '{pname}' must be {ann.dtype.name}, found {dt.name}")
                for i, n in enumerate(v.shape):
                    d = ann.shape[i] if isinstance(ann, TensorAnnotation) else int(n)
                    if d is symbolic.DYNAMIC:
                        s = symbolic.symbol(f"{pname}_d{i}")
                        shape.append(s)
                        env[s.name] = int(n)
                    elif isinstance(d, sympy.Symbol):
                        shape.append(d)
                        if env.setdefault(d.name, int(n)) != int(n):
                            raise LaunchError(f"{self.name}: size {d.name} is {env[d.name]} elsewhere but "
                                              f"{int(n)} in '{pname}'")
                    elif d is STATIC or d is None:
                        shape.append(int(n))
                    else:
                        if int(d) != int(n):
                            raise LaunchError(f"{self.name}: argument '{pname}' dim {i} must be {d}, found "
                                              f"shape {list(v.shape)}")
                        shape.append(int(n))
                tensors[pname] = (dt, tuple(shape))
                tensor_args[pname] = v
                sig.append((pname, dt.name, tuple(str(s) for s in shape)))
            elif isinstance(ann, ScalarAnnotation) or ann is int and isinstance(v, int):
                if not isinstance(v, int) or isinstance(v, bool):
                    raise LaunchError(f"{self.name}: argument '{pname}' is a run-time int, found {v!r}")
                s = sympy.Symbol(pname, integer=True)
                scalars[pname] = s
                env[pname] = int(v)
                sig.append((pname, "scalar"))
            else:
                consts[pname] = v
                sig.append((pname, "const", const_key(v)))
        cache_key = (tuple(sig), tuple(sorted(key_values.items())) if key_values is not None else None,
                     self.machine.name)
        compiled = self.cache.get(cache_key)
        if compiled is None:
            with compile_lock:               # threads launching a new signature at once: one compiles it
                compiled = self.cache.get(cache_key)
                if compiled is None:
                    compiled = self._compile(cache_key, key_values, tensors, scalars, consts)
        self.last_build_dir = getattr(compiled, "build_dir", None)
        return compiled, tensor_args, env

    def _compile(self, cache_key, key_values, tensors, scalars, consts, machine=None):
        from .compiler import compile_kernel
        variant = self.name + (key_values.suffix() if key_values is not None else "")
        compiled = compile_kernel(self.fn, variant, tensors, scalars, consts, machine=machine or self.machine,
                                  tiling_key=key_values, pipeline=self.pipeline, auto_sync=self.auto_sync)
        self.compile_count += 1
        from .build_dir import write_build_dir
        compiled.build_dir = write_build_dir(self, compiled, cache_key)
        self.cache[cache_key] = compiled
        return compiled


class _Launch:
    def __init__(self, kernel: ProKernel, block_dim: int, key):
        self.kernel, self.block_dim, self.key = kernel, block_dim, key

    @user_entry
    def __call__(self, *args, **kwargs):
        k = self.kernel
        from pypto.frontend.kernel_call import traced_call
        if traced_call(args, kwargs):
            from .node import traced_launch
            return traced_launch(k, self.block_dim, self.key, args, kwargs)
        compiled, tensor_args, env = k._prepare(args, kwargs, self.key)
        backend = k.backend or backends.get_backend()
        if backend == "reference":
            backend = "sim"
        from .launch import run_compiled
        report = run_compiled(compiled, tensor_args, env, self.block_dim, backend, machine=k.machine,
                              timing_only=k.timing_only, trace=k.trace)
        k.last_report = report
        return report



def jit(fn=None, **options):
    """Decorate a Professional-mode kernel. Options: backend ("sim" | "cpu"), pipeline
    (pl.PipelineConfig), tiling_key (pl.TilingKey), machine ("a2a3" | "a5"), auto_sync (default True),
    timing_only, trace (Chrome-trace path, sim), dump (build dir root), reference (a function of the
    kernel's arguments on torch tensors that writes its outputs in place: the kernel's meaning for the
    ``reference`` backend when it is called inside a traced pypto function; without it the reference
    backend runs the kernel on ``sim``).

    Called with pypto Tensors inside a ``pypto.jit`` function or a ``pypto.nn.Module`` forward,
    ``kernel[stream, block_dim](...)`` is one node of the traced graph (pypto_pro/language/node.py): the
    arguments it writes take their new values, which the launch also returns."""
    if fn is None:
        return lambda f: ProKernel(f, **options)
    return ProKernel(fn, **options)

"""``@pypto.jit``: trace on first call, cache per signature, run on a backend.

The cache key holds, per tensor argument, its dtype, its static dims and the equality pattern of its
dynamic dims (dynamic dims with equal values at trace time share one size symbol, as torch's
dynamic shapes do), plus every non-tensor argument. One trace serves every value of a dynamic dim.
"""
from __future__ import annotations

import functools
import sys
import types

import sympy
import torch

from .. import backends, dtypes, symbolic as sym
from ..errors import (PyptoError, ShapeError, DTypeError, SymbolicError, TypeMismatchError, user_entry,
                      user_location)
from ..ir.dump import open_tensor_dump
from ..ir.tensor_graph import OutputSpec, TensorGraph, ValueInfo
from ..sanitize import user_name
from . import cann, context as ctx, truth
from .api import fresh
from .conditions import traceable
from .scalars import finish_sources
from .signature import evaluated_signature
from .tensor import Tensor, TensorSpec

class JitFunction:
    def __init__(self, fn, *, backend: str | None = None, machine: str | None = None, dump: str | None = None,
                 timing_only: bool = False, trace: str | None = None, name: str | None = None,
                 lowering: dict | None = None):
        self.fn = fn
        self.name = user_name(name, "pypto.jit", default=getattr(fn, "__name__", "fn"))
        if lowering is not None and not (isinstance(lowering, dict) and all(isinstance(k, str) for k in lowering)):
            raise TypeMismatchError(f"{self.name}: lowering= takes a dict of lowering options "
                                    f"(e.g. {{'flash': False}}), found {type(lowering).__name__}")
        self.signature = evaluated_signature(fn, self.name, TypeMismatchError)
        self.backend = backends.check_backend(backend) if backend else None
        self.options = {"machine": machine, "dump": dump, "timing_only": timing_only, "trace": trace,
                         "lowering": dict(lowering or {})}
        self.cache: dict = {}
        self.last_report = None
        self.trace_count = 0
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------------ binding
    def _bind(self, args, kwargs, loc):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeMismatchError(f"{self.name}: {e}", loc=loc) from None
        bound.apply_defaults()
        return bound

    def _spec_of(self, pname) -> TensorSpec | None:
        ann = self.signature.parameters[pname].annotation
        return ann if isinstance(ann, TensorSpec) else None

    def arg_spec(self, pname, value: torch.Tensor) -> TensorSpec | None:
        """The spec that checks tensor argument ``pname`` and marks its dynamic dims: its annotation.
        (pypto.nn's module compiler overrides this to default batch/sequence dims to DYNAMIC.)"""
        return self._spec_of(pname)

    def _check_tensor(self, pname, t: torch.Tensor, spec: TensorSpec | None, loc):
        if spec is None:
            return
        if t.dim() != len(spec.shape):
            raise ShapeError(f"{self.name}: argument '{pname}' must have rank {len(spec.shape)} "
                             f"(declared {spec!r}), found shape {list(t.shape)}", loc=loc)
        if spec.dtype is not None and dtypes.from_torch(t.dtype) != spec.dtype:
            raise DTypeError(f"{self.name}: argument '{pname}' must be {spec.dtype.name}, found {t.dtype}", loc=loc)
        for i, (d, n) in enumerate(zip(spec.shape, t.shape)):
            if isinstance(d, int) and d != n:
                raise ShapeError(f"{self.name}: argument '{pname}' dim {i} must be {d} (declared {spec!r}), "
                                 f"found shape {list(t.shape)}", loc=loc)

    def _signature_key(self, bound, loc):
        """-> (key, tensor params [(name, tensor)], dim plan {(param, dim): symbol-or-None})"""
        key, tensors = [], []
        dyn_values: dict = {}
        for pname, v in bound.arguments.items():
            if isinstance(v, torch.Tensor):
                spec = self.arg_spec(pname, v)
                spec = spec.matching(v.shape) if spec is not None else None
                self._check_tensor(pname, v, spec, loc)
                dims = []
                for i, n in enumerate(v.shape):
                    d = spec.shape[i] if spec is not None else n
                    if d is sym.DYNAMIC:
                        cls = dyn_values.setdefault(("dyn", int(n)), len(dyn_values))
                        dims.append(("dyn", cls))
                    elif isinstance(d, sympy.Symbol):
                        dims.append(("named", d.name))
                    else:
                        dims.append(int(n))
                key.append((pname, dtypes.from_torch(v.dtype).name, tuple(dims)))
                tensors.append((pname, v))
            elif isinstance(v, Tensor):
                raise TypeMismatchError(f"{self.name}: argument '{pname}' is a traced pypto.Tensor; "
                                        "pass torch tensors to a compiled function", loc=loc)
            elif self._spec_of(pname) is not None:
                raise TypeMismatchError(f"{self.name}: argument '{pname}' is declared {self._spec_of(pname)!r}; "
                                        f"expected a torch tensor, found {type(v).__name__} {v!r:.40}", loc=loc)
            else:
                try:
                    hash(v)
                    key.append((pname, "const", v))
                except TypeError:
                    key.append((pname, "const", repr(v)))
        return tuple(key), tensors

    # ------------------------------------------------------------------ tracing
    def _trace(self, bound, key) -> TensorGraph:
        g = TensorGraph(self.name)
        symbols: dict = {}
        frame = ctx.push(g)
        call_args = dict(bound.arguments)
        try:
            for (pname, dt, dims) in (k for k in key if k[1] != "const"):
                shape = []
                for i, d in enumerate(dims):
                    if isinstance(d, int):
                        shape.append(d)
                    else:
                        sname = d[1] if d[0] == "named" else f"{pname}_d{i}"
                        symbols.setdefault(d, sym.symbol(sname))
                        shape.append(symbols[d])
                nid = g.add_input(ValueInfo(tuple(shape), dtypes.to_dtype(dt), pname))
                call_args[pname] = Tensor._wrap(g, nid)
            inputs_by_param = {p: call_args[p] for p, dt, _ in key if dt != "const"}
            with cann.size_builtins(), truth.guarded():     # truth.py: Python's tests of run-time values
                fn = traceable(self.fn)          # run-time conditions in its body (frontend/conditions.py)
                result = fn(**call_args) if not _has_varargs(self.signature) else \
                    fn(*_positional(self.signature, call_args))
        finally:
            ctx.pop()
        g.symbols = list(dict.fromkeys(symbols.values()))
        self._set_outputs(g, frame, result, list(inputs_by_param))
        self.trace_count += 1
        return g

    def _set_outputs(self, g, frame, result, input_names):
        if result is None:
            items, g.returns_tuple = [], False
        elif isinstance(result, Tensor):
            items, g.returns_tuple = [result], False
        elif isinstance(result, (tuple, list)):
            items, g.returns_tuple = list(result), True
        else:
            raise TypeMismatchError(f"{self.name} must return a pypto.Tensor, a tuple of them or None, "
                                    f"found {type(result).__name__}", loc=_fn_loc(self.fn))
        for i, t in enumerate(items):
            if isinstance(t, Tensor):
                fresh(t)
            if not isinstance(t, Tensor):
                raise TypeMismatchError(f"{self.name}: returned value {i} is {type(t).__name__}, not a pypto.Tensor",
                                        loc=_fn_loc(self.fn))
            if t._graph is not g:
                raise PyptoError(f"{self.name}: returned value {i} was created inside a pypto.loop body",
                                 loc=_fn_loc(self.fn))
            g.outputs.append(OutputSpec(t._node, "return", i))
        for t, og, onode in frame.mutated.values():
            if og is g and g.op(onode) == "input" and t._graph is g:
                g.outputs.append(OutputSpec(t._node, "inplace", g.inputs.index(onode)))
        if not g.outputs:
            raise PyptoError(f"{self.name} neither returns a tensor nor writes into an argument",
                             loc=_fn_loc(self.fn))
        finish_sources(g)                   # computed tensors the control program reads (pypto.item)

    # ------------------------------------------------------------------ public
    def _prepare(self, args, kwargs, loc):
        bound = self._bind(args, kwargs, loc)
        key, tensors = self._signature_key(bound, loc)
        backend = self.backend or backends.get_backend()
        compiled = self.cache.get((backend, key))
        if compiled is None:
            with ctx.compile_lock:           # threads calling a new signature at once: one traces it
                compiled = self.cache.get((backend, key))
                if compiled is None:
                    graph = self._trace(bound, key)
                    dump = open_tensor_dump(graph, self.options.get("dump"), _fn_loc(self.fn),
                                            [(p, v) for p, kind, v in key if kind == "const"])
                    compiled = backends.compile_graph(graph, backend, {**self.options, "dump": dump})
                    self.cache[(backend, key)] = compiled
        env = _bind_sizes(compiled.graph, [t for _, t in tensors], loc)
        return compiled, tensors, env

    @user_entry
    def __call__(self, *args, **kwargs):
        loc = user_location()
        compiled, tensors, env = self._prepare(args, kwargs, loc)
        g = compiled.graph
        inputs = _separate_out_params(g, [t.detach() for _, t in tensors])
        outs, report = compiled.run(inputs, env)
        self.last_report = report
        returned = []
        for spec, value in zip(g.outputs, outs):
            if spec.kind == "inplace":
                target = tensors[spec.index][1]
                # timing-only runs produce no data; an out-param built in the caller's tensor is there already
                if value.device.type != "meta" and not _same_tensor(value, target):
                    target.data.copy_(value)
            elif spec.kind == "return":         # (not a scalar_source: frontend/scalars.py)
                returned.append(value)
        if not returned:
            return None
        return tuple(returned) if g.returns_tuple else returned[0]

    @user_entry
    def trace(self, *args, **kwargs) -> TensorGraph:
        """The TensorGraph for these arguments (traced, or taken from the cache)."""
        compiled, _, _ = self._prepare(args, kwargs, user_location())
        return compiled.graph

    graph = trace

    def report(self):
        return self.last_report


def _separate_out_params(g: TensorGraph, inputs: list) -> list:
    """The programs write an out-param straight into the caller's tensor (passes/out_params.py), which
    assumes it shares no memory with another argument; one that does runs on a copy, written back after."""
    for spec in g.outputs:
        if spec.kind == "inplace":
            t = inputs[spec.index]
            ptr = t.untyped_storage().data_ptr()
            if any(j != spec.index and u.untyped_storage().data_ptr() == ptr for j, u in enumerate(inputs)):
                inputs[spec.index] = t.clone()
    return inputs


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def _has_varargs(sig) -> bool:
    return any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values())


def _positional(sig, call_args):
    out = []
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.extend(call_args.get(p.name, ()))
        elif p.kind != p.VAR_KEYWORD:
            out.append(call_args[p.name])
    return out


def _fn_loc(fn):
    from ..errors import SourceLoc
    code = getattr(fn, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None


def _bind_sizes(g: TensorGraph, tensors, loc) -> dict:
    return bind_sizes(((g.info(nid).name, g.info(nid).shape, t) for nid, t in zip(g.inputs, tensors)), loc)


def bind_sizes(declared, loc) -> dict:
    """{size symbol name: int} from (argument name, declared shape, torch tensor) triples; one symbol
    bound to two different sizes is the user's error."""
    env: dict = {}
    for name, shape, t in declared:
        for d, n in zip(shape, t.shape):
            if isinstance(d, sympy.Symbol) and env.setdefault(d.name, int(n)) != int(n):
                raise SymbolicError(f"size '{d.name}' is {env[d.name]} in one argument and {int(n)} in "
                                    f"'{name}'", loc=loc)
    return env


_CANN_JIT_OPTIONS = ("host_options", "codegen_options", "pass_options", "runtime_options", "verify_options",
                     "debug_options", "new_ir", "create_new_logical_tensor")


def jit(fn=None, **options):
    """Decorator: ``@pypto.jit`` or ``@pypto.jit(backend="cpu", machine="a2a3", dump=dir)``;
    ``lowering={"flash": False, "row_chunks": 4}`` overrides the compiler's choices (the keyword options of
    pypto.passes.pipeline.lower: fuse, multibuffer, static_masks, flash, row_chunks); also spelt
    ``@pypto.frontend.jit(...)`` as in CANN PyPTO, whose keyword arguments (``runtime_options=``,
    ``pass_options=`` ...) are accepted and recorded as ignored (frontend/cann.py)."""
    cann_options = {k: options.pop(k) for k in _CANN_JIT_OPTIONS if k in options}
    if cann_options:
        cann.jit_options(getattr(fn, "__name__", "fn"), **cann_options)
    if fn is None:
        return lambda f: JitFunction(f, **options)
    return JitFunction(fn, **options)


class _JitModule(types.ModuleType):
    """This module, callable: ``pypto.frontend.jit`` is CANN PyPTO's decorator while the package's
    modules keep importing ``pypto.frontend.jit`` as a module."""

    def __call__(self, fn=None, **options):
        return jit(fn, **options)


sys.modules[__name__].__class__ = _JitModule


def trace_callable(fn, specs, name: str = "graph", symbols=()) -> TensorGraph:
    """Trace ``fn(*inputs)`` into a TensorGraph outside ``@pypto.jit`` (used by torch.compile).

    One graph input per ``TensorSpec`` in ``specs`` (dims are ints or sympy size expressions; the
    spec's name names the input). ``fn`` returns a pypto Tensor or a tuple/list of them; each becomes
    a returned output. ``symbols`` adds run-time sizes that appear in no input shape (bound by the
    caller's env)."""
    g = TensorGraph(name)
    ctx.push(g)
    try:
        inputs = [Tensor._wrap(g, g.add_input(ValueInfo(tuple(sym.simplify(d) for d in s.shape), s.dtype,
                                                        s.name or f"in{i}")))
                  for i, s in enumerate(specs)]
        result = fn(*inputs)
    finally:
        ctx.pop()
    g.returns_tuple = isinstance(result, (tuple, list))
    for i, t in enumerate(result if g.returns_tuple else [result]):
        if isinstance(t, Tensor):
            fresh(t)
        if not isinstance(t, Tensor) or t._graph is not g:
            raise PyptoError(f"{name}: traced value {i} is not a pypto.Tensor of this graph ({type(t).__name__})")
        g.outputs.append(OutputSpec(t._node, "return", i))
    finish_sources(g)
    in_syms = sorted(sym.free_symbols(*[s.shape for s in specs]), key=lambda s: s.name)
    g.symbols = list(dict.fromkeys([*in_syms, *symbols]))
    return g

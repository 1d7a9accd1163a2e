"""A ``pl.jit`` kernel launched inside a traced pypto function: one node of the traced graph.

    @pypto.jit
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32]):
        y = pypto.exp(x)
        out = pypto.zeros(x.shape[0], 128)
        add_one[None, 8](y, out, x.shape[0])          # out now holds what the kernel wrote
        return out * 2.0

The arguments are checked against the kernel's annotations as a launch checks torch tensors: a
``pl.DYNAMIC`` dim may be a run-time size of the trace, a static one must be an int there; run-time
int arguments may be size expressions of the trace. The kernel is compiled at trace time (its
``pl.DYNAMIC`` dims stay symbolic: the host runtime binds them from the buffers of each launch), its
written params are the node's results (``pypto/ir/kernel_node.py``). On the ``reference`` backend the
node runs ``pl.jit(reference=...)``, else the kernel on ``sim``.
"""
from __future__ import annotations

import sympy
import torch

from pypto import dtypes, symbolic
from pypto.errors import DTypeError, ShapeError, TypeMismatchError, user_location
from pypto.frontend.context import compile_lock
from pypto.frontend.kernel_call import emit_kernel_node, same_dim, static_dim
from pypto.frontend.tensor import Tensor
from pypto.ir.kernel_node import KernelBuild, KernelNode

from .types import STATIC, ScalarAnnotation, TensorAnnotation, const_key


def traced_launch(k, block_dim: int, key, args, kwargs):
    loc = user_location()
    try:
        bound = k.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeMismatchError(f"{k.name}: {e}", loc=loc) from None
    bound.apply_defaults()
    key_values = k._key_values(key)
    sig, tensors, scalars, consts, named = [], {}, {}, {}, {}
    arg_values, scalar_values = {}, {}
    for pname, v in bound.arguments.items():
        ann = k.signature.parameters[pname].annotation
        if isinstance(v, (Tensor, torch.Tensor)):
            dt = v.dtype if isinstance(v, Tensor) else dtypes.from_torch(v.dtype)
            dims = tuple(v.shape)
            shape = _shape(k.name, pname, ann, dt, dims, named, loc)
            tensors[pname] = (dt, shape)
            arg_values[pname] = v
            sig.append((pname, dt.name, tuple(str(s) for s in shape)))
        elif isinstance(ann, ScalarAnnotation) or ann is int and isinstance(v, (int, sympy.Basic)):
            if isinstance(v, bool) or not isinstance(v, (int, sympy.Basic)):
                raise TypeMismatchError(f"{k.name}: argument '{pname}' is a run-time int, found {v!r}", loc=loc)
            scalars[pname] = sympy.Symbol(pname, integer=True)
            scalar_values[pname] = v
            sig.append((pname, "scalar"))
        else:
            consts[pname] = v
            sig.append((pname, "const", const_key(v)))
    cache_key = (tuple(sig), tuple(sorted(key_values.items())) if key_values is not None else None, k.machine.name)
    compiled = _compiled(k, cache_key, key_values, tensors, scalars, consts, k.machine)
    node = ProNode(k, compiled, cache_key, key_values, tensors, scalars, consts, block_dim, scalar_values, loc)
    return emit_kernel_node(node, arg_values, scalar_values)


def _shape(name, pname, ann, dt, dims, named, loc) -> tuple:
    if isinstance(ann, TensorAnnotation):
        if len(ann.shape) != len(dims):
            raise ShapeError(f"{name}: argument '{pname}' must have rank {len(ann.shape)}, found shape "
                             f"{list(dims)}", loc=loc)
        if ann.dtype is not None and ann.dtype != dt:
            raise DTypeError(f"{name}: argument '{pname}' must be {ann.dtype.name}, found {dt.name}", loc=loc)
    shape = []
    for i, n in enumerate(dims):
        d = ann.shape[i] if isinstance(ann, TensorAnnotation) else None
        if d is symbolic.DYNAMIC:
            shape.append(symbolic.symbol(f"{pname}_d{i}"))
        elif isinstance(d, sympy.Symbol):
            if d.name in named and not same_dim(named[d.name], n):
                raise ShapeError(f"{name}: size {d.name} is {named[d.name]} elsewhere but {n} in '{pname}'", loc=loc)
            named.setdefault(d.name, n)
            shape.append(d)
        else:
            s = static_dim(n)
            if s is None:
                raise ShapeError(f"{name}: dim {i} of argument '{pname}' is the run-time size {n} in the traced "
                                 f"graph, but the kernel takes it static", loc=loc,
                                 hint="declare the dim pl.DYNAMIC in the kernel's annotation")
            if d is not STATIC and d is not None and int(d) != s:
                raise ShapeError(f"{name}: argument '{pname}' dim {i} must be {d}, found shape {list(dims)}", loc=loc)
            shape.append(s)
    return tuple(shape)


def _compiled(k, cache_key, key_values, tensors, scalars, consts, machine):
    compiled = k.cache.get(cache_key)
    if compiled is None:
        with compile_lock:
            compiled = k.cache.get(cache_key)
            if compiled is None:
                compiled = k._compile(cache_key, key_values, tensors, scalars, consts, machine=machine)
    return compiled


class ProNode(KernelNode):
    level = "pro"

    def __init__(self, kernel, compiled, cache_key, key_values, tensors, scalars, consts, block_dim, scalar_values,
                 loc):
        self.kernel, self.compiled, self.cache_key = kernel, compiled, cache_key
        self.key_values, self.tensors, self.scalars, self.consts = key_values, tensors, scalars, consts
        self.block_dim, self.scalar_values, self.loc = block_dim, dict(scalar_values), loc
        self.name = compiled.kernel.name
        self.params = tuple(compiled.tensor_params)
        self.outputs = tuple(compiled.outputs)

    def build(self, machine) -> KernelBuild:
        compiled = self.compiled
        if machine.name != self.cache_key[-1]:
            compiled = _compiled(self.kernel, self.cache_key[:-1] + (machine.name,), self.key_values, self.tensors,
                                 self.scalars, self.consts, machine)
        bd = self.block_dim
        workspaces = [(ws.param, (ws.rows_per_block * bd, ws.cols), ws.dtype) for ws in compiled.workspaces]
        scalars = {s.name: self.scalar_values[s.name] for s in compiled.scalar_params}
        return KernelBuild(compiled.kernel, workspaces, [], scalars, bd)

    def reference(self, tensors: dict, scalars: dict) -> dict:
        k = self.kernel
        call = {**{p: t.contiguous() for p, t in tensors.items()}, **scalars, **self.consts}
        if k.reference is not None:
            k.reference(**call)
            return {p: call[p] for p in self.outputs}
        from .launch import run_compiled
        key = dict(self.key_values.items()) if self.key_values is not None else None
        compiled, tensor_args, env = k._prepare((), call, key)
        run_compiled(compiled, tensor_args, env, self.block_dim, "sim", machine=k.machine)
        return {p: tensor_args[p] for p in self.outputs}


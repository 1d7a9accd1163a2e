"""Views and writes: view (a box of a tensor), assemble (write a tensor into a box of another),
reshape, constant (a captured torch tensor), full (a filled tensor). Offsets and shapes may be
symbolic; the reference evaluates them at run time."""
from __future__ import annotations

import math

import torch

from .. import symbolic as sym
from ..errors import ShapeError
from ..ir.tensor_graph import ValueInfo
from .registry import OpDef, numel, register
from .shape_rules import fmt_shape


def _view_infer(ins, attrs):
    src = ins[0]
    offsets, shape = attrs["offsets"], attrs["shape"]
    if len(offsets) != src.rank or len(shape) != src.rank:
        raise ShapeError(f"view of a rank-{src.rank} tensor needs {src.rank} offsets and sizes, "
                         f"found {len(offsets)} offsets and {len(shape)} sizes")
    for o, s, d in zip(offsets, shape, src.shape):
        if isinstance(o, int) and o < 0:
            raise ShapeError(f"view offset {o} is negative")
        if isinstance(o, int) and isinstance(s, int) and isinstance(d, int) and o + s > d:
            raise ShapeError(f"view [{o}:{o + s}] is out of range for a dimension of size {d} "
                             f"(tensor {fmt_shape(src.shape)})")
    return ValueInfo(tuple(shape), src.dtype)


def _view_ref(ins, attrs):
    x = ins[0]
    for d, (o, s) in enumerate(zip(attrs["offsets"], attrs["shape"])):
        if o < 0 or s < 0 or o + s > x.shape[d]:
            raise ShapeError(f"view [{o}:{o + s}] is out of range for dimension {d} of size {x.shape[d]}",
                             loc=attrs.get("_loc"))
        x = x.narrow(d, o, s)
    return x


register(OpDef("view", "views", _view_infer, _view_ref, unit="none", flops=0, num_inputs=1,
               doc="attrs: offsets, shape (the valid shape), tile_shape (optional hint)"))


def _assemble_infer(ins, attrs):
    dst, src = ins
    if src.rank != dst.rank:
        raise ShapeError(f"assemble: source rank {src.rank} differs from destination rank {dst.rank}")
    if src.dtype != dst.dtype:
        from ..errors import DTypeError
        raise DTypeError(f"assemble: source dtype {src.dtype} differs from destination dtype {dst.dtype}")
    for o, s, d in zip(attrs["offsets"], src.shape, dst.shape):
        if isinstance(o, int) and isinstance(s, int) and isinstance(d, int) and o + s > d:
            raise ShapeError(f"assemble: box [{o}:{o + s}] is out of range for a dimension of size {d}")
    return ValueInfo(dst.shape, dst.dtype)


def _assemble_ref(ins, attrs):
    dst, src = ins
    out = dst.clone()
    box = out
    for d, o in enumerate(attrs["offsets"]):
        if o < 0 or o + src.shape[d] > dst.shape[d]:
            raise ShapeError(f"assemble: box [{o}:{o + src.shape[d]}] is out of range for dimension {d} "
                             f"of size {dst.shape[d]}", loc=attrs.get("_loc"))
        box = box.narrow(d, o, src.shape[d])
    box.copy_(src)
    return out


register(OpDef("assemble", "views", _assemble_infer, _assemble_ref, unit="vector", flops=0, num_inputs=2,
               doc="inputs: (dst, src); attrs: offsets. Result: dst with the box at offsets replaced by src"))


def _reshape_infer(ins, attrs):
    src = ins[0]
    shape = list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError("reshape: at most one size may be -1")
    total = numel(src.shape)
    if -1 in shape:
        rest = numel([d for d in shape if not (isinstance(d, int) and d == -1)])
        shape[shape.index(-1)] = sym.floordiv(total, rest) if not isinstance(total, int) or not isinstance(rest, int) \
            else total // rest
    if sym.equal(numel(shape), total) is False:
        raise ShapeError(f"reshape: cannot view {fmt_shape(src.shape)} ({total} elements) as {fmt_shape(shape)}")
    return ValueInfo(tuple(sym.simplify(d) for d in shape), src.dtype)


def _reshape_ref(ins, attrs):
    return ins[0].reshape(tuple(attrs["shape"]))


register(OpDef("reshape", "views", _reshape_infer, _reshape_ref, unit="none", flops=0, num_inputs=1,
               doc="attrs: shape (-1 allowed once, resolved at trace time)"))


def _constant_infer(ins, attrs):
    from .. import dtypes
    t = attrs["value"]
    return ValueInfo(tuple(t.shape), dtypes.from_torch(t.dtype))


register(OpDef("constant", "views", _constant_infer, lambda ins, attrs: attrs["value"], unit="none", flops=0,
               num_inputs=0, doc="a torch tensor captured at trace time; attrs: value"))


def _full_infer(ins, attrs):
    for d in attrs["shape"]:
        if isinstance(d, int) and d < 0:
            raise ShapeError(f"full: negative size {d} in {fmt_shape(attrs['shape'])}")
    return ValueInfo(tuple(attrs["shape"]), attrs["dtype"])


def _full_ref(ins, attrs):
    return torch.full(tuple(attrs["shape"]), attrs["value"], dtype=attrs["dtype"].torch_dtype)


register(OpDef("full", "views", _full_infer, _full_ref, unit="vector", flops=0, num_inputs=0,
               doc="attrs: shape, value, dtype"))

_ = math

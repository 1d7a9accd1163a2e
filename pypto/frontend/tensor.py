"""``pypto.Tensor``: the traced value. Operators and torch-like methods record ops in the current graph.

``pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float16]`` (and, outside a trace, the CANN style
``pypto.Tensor((d0, d1), dtype)``) is a ``TensorSpec`` used to annotate jit parameters. Inside a
trace, ``pypto.Tensor(shape, dtype)`` creates a new zero-filled tensor to assemble into.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

import sympy
import torch

from .. import dtypes, symbolic
from ..errors import NoSuchMethodError, PyptoError, TypeMismatchError, UnsupportedOpError
from ..ops.registry import REGISTRY, numel      # importing pypto.ops registers every op (ops/__init__.py)
from . import context as ctx
from .scalars import item as _item


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple
    dtype: dtypes.DataType | None
    name: str | None = None

    def __repr__(self) -> str:
        dims = ", ".join("DYNAMIC" if d is symbolic.DYNAMIC else "..." if d is Ellipsis else str(d)
                         for d in self.shape)
        return f"pypto.Tensor[[{dims}], {self.dtype!r}]"

    def matching(self, shape) -> "TensorSpec":
        """This spec with its ``...`` (any number of dims, each static: CANN's ``Tensor([], dtype)``,
        ``Tensor()``, ``Tensor([DYNAMIC, ...], dtype)``) replaced by the dims of ``shape`` it stands
        for; unchanged when it has none, or when ``shape`` has too few dims (the rank check says so)."""
        if Ellipsis not in self.shape:
            return self
        k = self.shape.index(Ellipsis)
        head, tail = self.shape[:k], self.shape[k + 1:]
        if len(shape) < len(head) + len(tail):
            return self
        middle = tuple(int(n) for n in shape[len(head):len(shape) - len(tail)])
        return TensorSpec(head + middle + tail, self.dtype, self.name)


def _spec(shape, dtype=None, name=None) -> TensorSpec:
    if isinstance(shape, (int, sympy.Basic)) or shape is symbolic.DYNAMIC or shape is Ellipsis:
        shape = (shape,)
    shape = tuple(shape)
    if not shape:                   # CANN's Tensor([], dtype): any shape (each dim static), not rank 0
        shape = (Ellipsis,)
    if shape.count(Ellipsis) > 1:
        raise TypeMismatchError(f"a tensor annotation has at most one '...', found {list(shape)}")
    return TensorSpec(shape, dtypes.to_dtype(dtype) if dtype is not None else None, name)


@dataclass
class Alias:
    """How a view-like tensor (slice, view, reshape, transpose, permute, expand) derives from the
    tensor it was taken of. Like torch, a later write into ``parent`` is seen through the alias:
    ``fresh`` derives it again from the parent's current value (``seen`` is the parent's binding
    when it was last derived). Only a slice/view (``offsets`` set) can be written through."""

    parent: "Tensor"
    op: str
    attrs: dict
    seen: tuple
    offsets: tuple | None = None


class Tensor:
    """A traced tensor value: (graph, node). Use it like a torch.Tensor inside @pypto.jit."""

    __slots__ = ("_graph", "_node", "_base", "__weakref__")
    __array_priority__ = 1000

    def __new__(cls, shape=None, dtype=None, name=None, **kwargs):
        # CANN's Tensor(shape, dtype, name, format, data_ptr, device, ori_shape): format, data_ptr,
        # device and ori_shape describe CANN's device memory; a traced value has none of them
        if shape is None:           # CANN's Tensor(): an annotation of any shape and dtype
            return _spec(Ellipsis, kwargs.get("dtype", dtype), name or None)
        if ctx.is_tracing():
            from .api import zeros
            return zeros(*(shape if isinstance(shape, (list, tuple)) else [shape]),
                         dtype=kwargs.get("dtype", dtype) or dtypes.float32)
        return _spec(shape, kwargs.get("dtype", dtype), name or None)

    def __class_getitem__(cls, item):
        """``Tensor[[dims...], dtype]``; also CANN's ``Tensor[...]`` (any shape and dtype) and
        ``Tensor[[...], dtype]`` / ``Tensor[[DYNAMIC, ...], dtype]``."""
        if item is Ellipsis:
            return _spec(Ellipsis)
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeMismatchError("annotate as pypto.Tensor[[dims...], dtype]")
        return _spec(item[0], item[1])

    @classmethod
    def _wrap(cls, graph, node, base=None) -> "Tensor":
        t = super().__new__(cls)
        t._graph, t._node, t._base = graph, node, base
        return t

    # ---------------------------------------------------------------- metadata
    @property
    def _info(self):
        return self._graph.info(self._node)

    @property
    def shape(self) -> tuple:
        return self._info.shape

    @property
    def dtype(self) -> dtypes.DataType:
        return self._info.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, d=None):
        return self.shape if d is None else self.shape[d]

    def contiguous(self) -> "Tensor":
        """As torch's: the same values. A traced tensor is a value, not a layout; where a strided view
        matters (a matmul operand), the compiler copies it contiguous itself."""
        return self

    def __len__(self):
        d = self.shape[0]
        if not isinstance(d, int):
            from ..errors import SymbolicError
            raise SymbolicError(f"len() of a tensor whose first dim is dynamic ({d})")
        return d

    def __repr__(self) -> str:
        return f"pypto.Tensor(%{self._node}, shape=[{', '.join(map(str, self.shape))}], dtype={self.dtype})"

    def __bool__(self):
        raise TypeMismatchError("a traced pypto.Tensor has no truth value at trace time",
                                hint="use pypto.where(cond, a, b) for data-dependent choices")

    def __iter__(self):
        raise TypeMismatchError("iterating over a traced pypto.Tensor is not supported",
                                hint="use pypto.loop(n) with indexing, or split()")

    __hash__ = object.__hash__

    def __getattr__(self, name):
        # reached only for a name Tensor lacks: a torch.Tensor method pypto does not trace, or a typo
        if name.startswith("_"):
            raise AttributeError(f"'pypto.Tensor' object has no attribute '{name}'")
        close = difflib.get_close_matches(name, [n for n in dir(Tensor) if not n.startswith("_")], n=3)
        raise NoSuchMethodError(f"pypto.Tensor has no method or attribute '{name}'"
                                + (" (torch.Tensor has one; pypto does not trace it)"
                                   if hasattr(torch.Tensor, name) else ""),
                                hint=f"did you mean {', '.join(close)}?" if close else None)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """A torch function given a traced tensor (``torch.erf(x)``): pypto does not trace torch's
        functions, so this names the call and pypto's own op where one exists."""
        name = getattr(func, "__name__", str(func))
        if name in _OPERATORS:
            return NotImplemented      # torch_tensor + x: Python then tries x's reflected operator
        qual = getattr(func, "__qualname__", name)
        module = getattr(func, "__module__", None) or "torch"
        if qual.split(".")[0] in ("Tensor", "TensorBase"):
            module = "torch.Tensor"
        module = _TORCH_C_MODULES.get(module, "torch" if module.startswith("torch._C") else module)
        called = f"{module}.{name}"
        from . import api
        own = getattr(api, name, None)
        if callable(own) and getattr(own, "__module__", "").startswith("pypto."):
            raise UnsupportedOpError(f"{called} was called on a traced pypto.Tensor; torch functions are not "
                                     f"traced: call pypto.{name}")
        raise UnsupportedOpError(f"{called} was called on a traced pypto.Tensor: pypto has no op '{name}'",
                                 hint="write it with pypto's ops (pypto.*, pypto.nn.functional.*)")


# the public module of torch functions implemented in C
_TORCH_C_MODULES = {"torch._C._nn": "torch.nn.functional", "torch._C._linalg": "torch.linalg",
                    "torch._C._special": "torch.special", "torch._C._fft": "torch.fft"}


def _binop(name, swap=False):
    def method(self, other):
        from . import api
        fn = getattr(api, name)
        return fn(other, self) if swap else fn(self, other)
    method.__name__ = name
    return method


def _method(api_name):
    def method(self, *args, **kwargs):
        from . import api
        return getattr(api, api_name)(self, *args, **kwargs)
    method.__name__ = api_name
    return method


# operator -> pypto function (swap: reflected operand order)
_OPERATORS = {
    "__add__": ("add", False), "__radd__": ("add", True), "__sub__": ("sub", False), "__rsub__": ("sub", True),
    "__mul__": ("mul", False), "__rmul__": ("mul", True), "__truediv__": ("div", False),
    "__rtruediv__": ("div", True), "__pow__": ("pow", False), "__rpow__": ("pow", True),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__lt__": ("lt", False), "__le__": ("le", False), "__gt__": ("gt", False), "__ge__": ("ge", False),
    "__eq__": ("eq", False), "__ne__": ("ne", False), "__and__": ("logical_and", False),
    "__or__": ("logical_or", False), "__rand__": ("logical_and", True), "__ror__": ("logical_or", True),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
}
for _op, (_fn, _swap) in _OPERATORS.items():
    setattr(Tensor, _op, _binop(_fn, _swap))

# methods that mirror torch.Tensor methods (torch name -> pypto function); every elementwise op with a
# form in the registry (exp, add, eq...) is also a method of its own name, added below
METHODS = {
    "clip": "clip", "clamp": "clip", "to": "cast", "cast": "cast", "view": "reshape", "reshape": "reshape",
    "gelu": "gelu",
    # reductions and scans
    "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "prod": "prod", "var": "var",
    "argmax": "argmax", "argmin": "argmin", "max": "max", "min": "min", "cumsum": "cumsum",
    "topk": "topk", "sort": "sort", "argsort": "argsort", "bincount": "bincount", "histc": "histc",
    "index_add": "index_add", "index_add_": "index_add_",
    # matmul and normalisations
    "matmul": "matmul", "mm": "mm", "bmm": "bmm", "softmax": "softmax", "log_softmax": "log_softmax",
    # shapes
    "transpose": "transpose", "t": "t", "permute": "permute", "unsqueeze": "unsqueeze", "squeeze": "squeeze",
    "flatten": "flatten", "expand": "expand", "expand_as": "expand_as", "broadcast_to": "broadcast_to",
    "split": "split", "chunk": "chunk", "tril": "tril", "triu": "triu", "gather": "gather",
    "index_select": "index_select", "index_copy": "index_copy", "index_copy_": "index_copy_", "scatter": "scatter", "scatter_": "scatter_", "masked_fill": "masked_fill",
}
METHODS |= {op.name: op.name for op in REGISTRY.values() if op.form is not None}
for _name, _fn in METHODS.items():
    setattr(Tensor, _name, _method(_fn))

Tensor.where = lambda self, condition, other: _method("where")(condition, self, other)   # as torch's
Tensor.__neg__ = _method("neg")
Tensor.__abs__ = _method("abs")
Tensor.__invert__ = _method("logical_not")
Tensor.__getitem__ = _method("getitem")
Tensor.item = _item          # t[i].item(): a data scalar read by the control program (frontend/scalars.py)
Tensor.__setitem__ = _method("setitem")
Tensor.T = property(lambda self: _method("permute")(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: _method("transpose")(self, -2, -1))
Tensor.contiguous = lambda self: self
Tensor.numel = lambda self: numel(self.shape)
Tensor.float = lambda self: _method("cast")(self, dtypes.float32)
Tensor.half = lambda self: _method("cast")(self, dtypes.float16)
Tensor.bfloat16 = lambda self: _method("cast")(self, dtypes.bfloat16)
Tensor.int = lambda self: _method("cast")(self, dtypes.int32)
Tensor.long = lambda self: _method("cast")(self, dtypes.int64)
Tensor.bool = lambda self: _method("cast")(self, dtypes.bool_)


def _move(self, other) -> None:
    """CANN's ``out.move(t)``: ``self`` takes ``t``'s value, all of it (``out[...] = t`` with equal
    shapes and dtypes; a shape or dtype that differs is an error, not a broadcast or a cast)."""
    if not isinstance(other, Tensor):
        raise TypeMismatchError(f"move: expected a pypto.Tensor, found {type(other).__name__}")
    if other.dtype != self.dtype or len(other.shape) != len(self.shape) or \
            any(symbolic.equal(a, b) is False for a, b in zip(other.shape, self.shape)):
        from ..errors import ShapeError
        raise ShapeError(f"move: the tensor moved in ({list(other.shape)}, {other.dtype}) must have the shape and "
                         f"dtype of the target ({list(self.shape)}, {self.dtype})")
    _method("setitem")(self, Ellipsis, other)


def _view(self, *args, **kwargs):
    """torch's ``t.view(*shape)`` (a reshape), or CANN's ``t.view(shape, offsets, valid_shape=)`` (a box
    of ``t``: pypto.view): two lists, or an ``offsets`` keyword, are CANN's."""
    from . import api
    cann_form = "offsets" in kwargs or "valid_shape" in kwargs or (
        len(args) >= 2 and all(isinstance(a, (list, tuple)) for a in args[:2]))
    if cann_form:
        return api.view(self, *args, **kwargs)
    return api.reshape(self, *args, **kwargs)


Tensor.move = _move
# CANN's valid shape of a view (its run-time extent): in pypto a tensor's shape is its valid shape
Tensor.valid_shape = property(lambda self: self.shape)
Tensor.view = _view
tensor = Tensor          # CANN's pypto.tensor(shape, dtype, name): the same constructor


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def check_no_tracer_leak(x):
    if isinstance(x, Tensor):
        raise PyptoError("a traced pypto.Tensor escaped its trace")

"""``pypto.Module``: parameters, buffers and submodules registered by attribute assignment, torch-style
state dicts, dtype conversion, train/eval flags, and compilation of ``forward`` on call.

Calling a module outside a trace compiles its ``forward`` (see ``compiler.py``: parameters and
buffers become graph inputs) and runs it on the chosen backend; calling it inside a trace (a
submodule called from a parent's forward, or a module used in a ``@pypto.jit`` function) inlines its
forward into the enclosing graph.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import torch

from .. import dtypes
from ..errors import PyptoError, TypeMismatchError, user_entry
from ..frontend import context as ctx
from ..frontend.tensor import Tensor
from .parameter import Parameter


class StateDictError(PyptoError):
    """A state dict does not match the module: missing or unexpected keys, or a shape mismatch."""


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])

# While a module's forward is traced: {id(parameter or buffer): the traced pypto.Tensor standing for it}
_bindings: list[dict] = []


def _bound(obj):
    if obj is not None and _bindings:
        return _bindings[-1].get(id(obj))
    return None


class bind_state:
    """Context manager: inside it, reading a bound parameter/buffer attribute yields its traced value."""

    def __init__(self, binding: dict):
        self.binding = binding

    def __enter__(self):
        _bindings.append(self.binding)

    def __exit__(self, *exc):
        _bindings.pop()


def _is_dtype_name(name: str) -> bool:
    try:
        dtypes.to_dtype(name)
        return True
    except PyptoError:
        return False


class Module:
    """Base class of pypto layers and models, used like ``torch.nn.Module``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_compiler", None)
        object.__setattr__(self, "_compile_options", {})

    def forward(self, *args, **kwargs):
        raise PyptoError(f"{type(self).__name__} does not define forward()")

    # ------------------------------------------------------------------ registration
    def _stores(self) -> dict:
        d = self.__dict__
        if "_parameters" not in d:
            raise PyptoError(f"{type(self).__name__}: call super().__init__() in __init__ before assigning "
                             "parameters, buffers or submodules")
        return d

    def _forget(self, name: str) -> None:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            d[store].pop(name, None)
        d["_non_persistent"].discard(name)
        d.pop(name, None)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._stores()
            self._forget(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._stores()
            self._forget(name)
            self._modules[name] = value
        elif name in self.__dict__.get("_parameters", ()):
            if value is not None:
                raise TypeMismatchError(f"cannot assign {type(value).__name__} to parameter '{name}' of "
                                        f"{type(self).__name__}: expected a pypto.Parameter or None",
                                        hint="wrap the tensor: pypto.Parameter(t), or copy into it: "
                                             f"self.{name}.data.copy_(t) outside forward")
            self._parameters[name] = None
        elif name in self.__dict__.get("_modules", ()):
            if value is not None:
                raise TypeMismatchError(f"cannot assign {type(value).__name__} to submodule '{name}': expected "
                                        "a pypto.Module or None")
            self._modules[name] = None
        elif name in self.__dict__.get("_buffers", ()):
            self._set_buffer(name, value)
        else:
            object.__setattr__(self, name, value)

    def _set_buffer(self, name, value):
        if isinstance(value, Tensor):
            # inside forward: `self.buf = new_value` writes the buffer (written back after the run)
            bound = _bound(self._buffers[name])
            if bound is None:
                raise PyptoError(f"buffer '{name}' of {type(self).__name__} is not an input of this trace, so a "
                                 "traced value cannot be stored into it",
                                 hint="call the module itself (module(x)) instead of using it inside another "
                                      "@pypto.jit function")
            bound[...] = value
        elif value is None or isinstance(value, torch.Tensor):
            self._buffers[name] = value
        else:
            raise TypeMismatchError(f"cannot assign {type(value).__name__} to buffer '{name}': expected a "
                                    "torch tensor or None")

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers"):
            if name in d.get(store, ()):
                v = d[store][name]
                bound = _bound(v)
                return v if bound is None else bound
        if name in d.get("_modules", ()):
            return d["_modules"][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        d = self.__dict__
        if any(name in d.get(s, ()) for s in ("_parameters", "_buffers", "_modules")):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_compiler"] = None          # the compiled cache refers to this very object
        return state

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeMismatchError(f"register_parameter('{name}'): expected a pypto.Parameter or None, "
                                    f"found {type(param).__name__}")
        self._stores()
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: torch.Tensor | None, persistent: bool = True) -> None:
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise TypeMismatchError(f"register_buffer('{name}'): expected a torch tensor or None, "
                                    f"found {type(tensor).__name__}")
        self._stores()
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeMismatchError(f"add_module('{name}'): expected a pypto.Module, found {type(module).__name__}")
        self._stores()
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # ------------------------------------------------------------------ iteration
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool = True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in m.__dict__[store].items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{mprefix}.{name}" if mprefix else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ state dicts
    def _state_entries(self, prefix: str = ""):
        """(key, module, attribute, tensor) for every entry of the state dict, in torch's order:
        a module's parameters, then its persistent buffers, then each child's entries."""
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, self, name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                yield prefix + name, self, name, b
        for name, m in self._modules.items():
            if m is not None:
                yield from m._state_entries(f"{prefix}{name}.")

    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        return OrderedDict((k, v if keep_vars else v.detach()) for k, _, _, v in self._state_entries(prefix))

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> IncompatibleKeys:
        """Copy tensors (e.g. a torch module's ``state_dict()``) into this module's parameters and buffers,
        converting to each parameter's dtype. Shape mismatches always raise; with ``strict`` missing and
        unexpected keys raise too. Nothing is copied when an error is raised."""
        if not hasattr(state_dict, "items"):
            raise TypeMismatchError(f"load_state_dict: expected a mapping of names to tensors, "
                                    f"found {type(state_dict).__name__}")
        entries = {k: (m, attr, t) for k, m, attr, t in self._state_entries()}
        missing = [k for k in entries if k not in state_dict]
        unexpected = [k for k in state_dict if k not in entries]
        problems = []
        for k, v in state_dict.items():
            if k not in entries:
                continue
            if not isinstance(v, torch.Tensor):
                problems.append(f"'{k}': expected a torch tensor, found {type(v).__name__}")
            elif tuple(v.shape) != tuple(entries[k][2].shape):
                problems.append(f"'{k}': expected shape {list(entries[k][2].shape)} (the module's), "
                                f"found {list(v.shape)} (the state dict's)")
        if strict:
            problems = [f"missing key '{k}'" for k in missing] + [f"unexpected key '{k}'" for k in unexpected] \
                + problems
        if problems:
            raise StateDictError(f"error(s) loading the state dict into {type(self).__name__}:\n    "
                                 + "\n    ".join(problems),
                                 hint=None if strict else "load_state_dict(strict=False) skips only missing and "
                                                          "unexpected keys, never shape mismatches")
        with torch.no_grad():
            for k, v in state_dict.items():
                if k not in entries:
                    continue
                m, attr, target = entries[k]
                if assign:
                    src = v.detach().to(target.dtype)
                    if attr in m._parameters:
                        m._parameters[attr] = Parameter(src)
                    else:
                        m._buffers[attr] = src
                else:
                    target.copy_(v.detach())
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ dtype, mode
    def to(self, *args, **kwargs):
        """``.to(dtype)`` converts floating-point parameters and buffers (as torch's); devices other
        than the CPU are not used by pypto (it moves data to the backend itself)."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        if kwargs:
            raise TypeMismatchError(f"Module.to: unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, (dtypes.DataType, torch.dtype)) or (isinstance(a, str) and _is_dtype_name(a)):
                dtype = a
            elif isinstance(a, (str, torch.device)):
                device = a
            else:
                raise TypeMismatchError(f"Module.to: expected a dtype or a device, found {type(a).__name__}")
        if device is not None and torch.device(device).type != "cpu":
            raise PyptoError(f"Module.to: pypto keeps module state on the CPU (the backend moves data); "
                             f"expected 'cpu', found {device!r}")
        if dtype is not None:
            dt = dtypes.to_dtype(dtype)
            if not dt.is_floating:
                raise TypeMismatchError(f"Module.to: expected a floating dtype, found {dt.name}")
            self._cast_floating(dt.torch_dtype)
        return self

    def _cast_floating(self, tdt: torch.dtype) -> None:
        for m in self.modules():
            for p in m._parameters.values():
                if p is not None and p.is_floating_point():
                    p.data = p.data.to(tdt)
            for k, b in m._buffers.items():
                if b is not None and b.is_floating_point():
                    m._buffers[k] = b.to(tdt)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def float(self):
        return self.to(dtypes.float32)

    def cpu(self):
        return self

    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise TypeMismatchError(f"train(mode): expected a bool, found {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        return self          # nothing to do: pypto compiles inference only

    # ------------------------------------------------------------------ compilation
    def compile(self, *, backend: str | None = None, machine: str | None = None, dump: str | None = None,
                dynamic=None, timing_only: bool = False, trace: str | None = None, lowering: dict | None = None):
        """Set how calling this module compiles and runs ``forward``; returns the module.

        ``dynamic`` says which dims of forward's tensor arguments are run-time sizes:
        ``None`` (default) asks the module (``default_dynamic_dims``: every dim but the last, for
        [batch, seq, hidden] inputs; Conv1d: batch and time; Embedding: all); ``False`` all static;
        ``True`` all dynamic; or ``{arg: dims}`` with dims an iterable of dim indices or a
        ``{dim: name}`` dict (equal names share one size across arguments). Unlisted arguments keep
        the default. Dynamic dims are duck-sized (equal values at trace time share a size).
        Annotations on forward (``x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float16]``) win.
        ``lowering`` overrides the compiler's choices, as pypto.jit's (e.g. ``{"row_chunks": False}``)."""
        from .. import backends
        if backend is not None:
            backends.check_backend(backend)
        self._compile_options = {"backend": backend, "machine": machine, "dump": dump, "dynamic": dynamic,
                                 "timing_only": timing_only, "trace": trace, "lowering": lowering}
        self._compiler = None
        return self

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        """Dims of forward argument ``arg`` that are dynamic unless ``compile(dynamic=...)`` says otherwise:
        all but the last (feature) dim."""
        return tuple(range(rank - 1))

    @property
    def compiled(self):
        """The compiled forward (a JitFunction over forward plus the module's state)."""
        from .compiler import ModuleCompiler
        names = ModuleCompiler.state_names(self)
        if self._compiler is None or self._compiler.names != names:
            object.__setattr__(self, "_compiler", ModuleCompiler(self, self._compile_options, names))
        return self._compiler

    @user_entry
    def __call__(self, *args, **kwargs):
        if ctx.is_tracing():
            return self.forward(*args, **kwargs)
        return self.compiled(*args, **kwargs)

    def trace(self, *args, **kwargs):
        """The TensorGraph of forward for these arguments (parameters and buffers are its last inputs)."""
        return self.compiled.trace(*args, **kwargs)

    def report(self):
        return self._compiler.last_report if self._compiler is not None else None

    # ------------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            child = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {child}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

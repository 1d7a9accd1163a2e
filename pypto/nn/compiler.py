"""Compiling a Module's forward with the ``pypto.jit`` machinery.

The compiled entry is a JitFunction over ``forward``'s own arguments followed by one keyword
argument per parameter and buffer (deduplicated by identity, so tied weights are one input) and the
modules' training flags. Parameters and buffers are therefore graph inputs, not constants: one
compilation serves new weight values, and a changed dtype or shape is a new cache entry, like any
other argument. While forward is traced, reading ``self.weight`` yields the traced input standing
for that parameter (see ``module.bind_state``); a buffer assigned or written in forward is written
back after the run.
"""
from __future__ import annotations

import inspect
import keyword

import torch

from .. import symbolic as sym
from ..errors import PyptoError, ShapeError
from ..frontend.jit import JitFunction
from ..frontend.tensor import TensorSpec
from .module import Module, bind_state

TRAINING_ARG = "_training_flags"


class ModuleCompiler(JitFunction):
    def __init__(self, module, options: dict, names: tuple):
        self.module = module
        self.names = names
        if type(module).forward is Module.forward:
            raise PyptoError(f"{type(module).__name__} does not define forward()")
        try:
            fwd_sig = inspect.signature(module.forward, eval_str=True)
        except (NameError, TypeError):
            fwd_sig = inspect.signature(module.forward)
        for p in fwd_sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise PyptoError(f"{type(module).__name__}.forward takes *{p.name}: a compiled module needs named "
                                 "arguments (each tensor argument becomes a graph input)", loc=_forward_loc(module))
        self.forward_params = list(fwd_sig.parameters.values())
        taken = {p.name for p in self.forward_params} | {TRAINING_ARG}
        self.state_args = _identifiers(names, taken)
        state_params = [inspect.Parameter(a, inspect.Parameter.KEYWORD_ONLY) for a in self.state_args]
        entry = self._make_entry()
        entry.__signature__ = fwd_sig.replace(
            parameters=self.forward_params + state_params
            + [inspect.Parameter(TRAINING_ARG, inspect.Parameter.KEYWORD_ONLY)])
        opts = {k: options.get(k) for k in ("backend", "machine", "dump", "trace", "lowering")}
        super().__init__(entry, timing_only=bool(options.get("timing_only")), name=type(module).__name__, **opts)
        self.dynamic = _check_dynamic(options.get("dynamic"), {p.name for p in self.forward_params}, module)

    @staticmethod
    def state_names(module) -> tuple:
        return tuple(n for n, _ in _state(module))

    # ------------------------------------------------------------------ tracing
    def _make_entry(self):
        module, forward_params, state_args = self.module, self.forward_params, self.state_args

        def entry(**kw):
            binding = {id(obj): kw[a] for a, (_, obj) in zip(state_args, _state(module))}
            args, kwargs = [], {}
            for p in forward_params:
                if p.kind == p.POSITIONAL_ONLY:
                    args.append(kw[p.name])
                else:
                    kwargs[p.name] = kw[p.name]
            with bind_state(binding):
                return module.forward(*args, **kwargs)
        entry.__name__ = type(module).__name__
        return entry

    def arg_spec(self, pname, value: torch.Tensor) -> TensorSpec | None:
        spec = self._spec_of(pname)
        if spec is not None or pname in self.state_args:
            return spec                      # an annotation on forward; weights are static
        rank = value.dim()
        dims = self._dynamic_dims(pname, rank)
        if not dims:
            return None
        shape = tuple(dims[i] if i in dims else int(n) for i, n in enumerate(value.shape))
        return TensorSpec(shape, None)

    def _dynamic_dims(self, pname: str, rank: int) -> dict:
        """{dim index: DYNAMIC or a named size symbol} for forward argument ``pname``."""
        rule = self.dynamic
        if isinstance(rule, dict):
            rule = rule.get(pname)
        if rule is None:
            rule = self.module.default_dynamic_dims(pname, rank)
        if rule is False:
            return {}
        if rule is True:
            return {i: sym.DYNAMIC for i in range(rank)}
        named = rule if isinstance(rule, dict) else {d: None for d in rule}
        out = {}
        for d, name in named.items():
            if not isinstance(d, int) or not -rank <= d < rank:
                raise ShapeError(f"{type(self.module).__name__}: dynamic dim {d!r} of argument '{pname}' is out of "
                                 f"range: expected an int in [{-rank}, {rank}) for a rank-{rank} tensor")
            out[d % rank] = sym.DYNAMIC if name is None else sym.dynamic(name)
        return out

    def _set_outputs(self, g, frame, result, input_names):
        try:
            super()._set_outputs(g, frame, result, input_names)
        except PyptoError as e:          # point at the user's forward, not at the generated entry
            raise type(e)(e.message, loc=_forward_loc(self.module), hint=e.hint) from None

    # ------------------------------------------------------------------ calling
    def _state_kwargs(self) -> dict:
        kw = {a: obj for a, (_, obj) in zip(self.state_args, _state(self.module))}
        kw[TRAINING_ARG] = tuple(m.training for m in self.module.modules())
        return kw

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs, **self._state_kwargs())

    def trace(self, *args, **kwargs):
        return super().trace(*args, **kwargs, **self._state_kwargs())

    graph = trace


def _state(module):
    """(dotted name, tensor) of every parameter then every buffer, each object once."""
    seen, out = set(), []
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            out.append((name, t))
    return out


def _identifiers(names, taken: set) -> list[str]:
    out = []
    for n in names:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in n)
        if not base or base[0].isdigit() or keyword.iskeyword(base):
            base = "p_" + base
        a, k = base, 1
        while a in taken:
            a, k = f"{base}_{k}", k + 1
        taken.add(a)
        out.append(a)
    return out


def _check_dynamic(dynamic, arg_names: set, module):
    if dynamic is None or isinstance(dynamic, bool):
        return dynamic
    if isinstance(dynamic, dict):
        unknown = sorted(set(dynamic) - arg_names)
        if unknown:
            raise PyptoError(f"{type(module).__name__}.compile(dynamic=...): expected names of forward's arguments "
                             f"({', '.join(sorted(arg_names))}), found {', '.join(map(repr, unknown))}")
        return {k: (v if isinstance(v, (bool, dict)) or v is None else tuple(v)) for k, v in dynamic.items()}
    raise PyptoError(f"{type(module).__name__}.compile(dynamic=...): expected None, a bool or a dict "
                     f"{{argument: dims}}, found {type(dynamic).__name__}")


def _forward_loc(module):
    from ..errors import SourceLoc
    code = getattr(type(module).forward, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None

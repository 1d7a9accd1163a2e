"""What FX metadata means in pypto terms: a FakeTensor dim or a SymInt (``node.meta["val"]``) carries a
torch sympy expression over shape-environment symbols; it becomes a pypto size over symbols of the same
names (``size_expr``), and ``plan_sizes`` says how each is bound at run time from a partition's
arguments. Also the errors of the FX importer."""
from __future__ import annotations

import sympy
import torch

from .. import dtypes, symbolic as sym
from ..errors import CompileError, PyptoError


class ConversionError(CompileError):
    """An FX graph (or one node of it) that pypto cannot take; the caller falls back to eager."""


class NothingToCompute(ConversionError):
    """Every output of the graph is one of its inputs (views and copies only)."""


class Lazy(tuple):
    """A multi-result value whose members are built on first use (unused ones are never traced)."""

    def __new__(cls, thunks):
        obj = super().__new__(cls, thunks)
        obj.memo = {}
        return obj

    def get(self, i):
        if i not in self.memo:
            self.memo[i] = tuple.__getitem__(self, i)()
        return self.memo[i]


def _translations():
    from torch.utils._sympy import functions as F
    floor_div = lambda a, b: sympy.floor(a / b)   # noqa: E731
    return {
        F.FloorDiv: floor_div, F.CleanDiv: floor_div,
        F.CeilDiv: lambda a, b: sympy.ceiling(a / b),
        F.Mod: sympy.Mod, F.PythonMod: sympy.Mod,
        F.ModularIndexing: lambda x, d, m: sympy.Mod(sympy.floor(x / d), m),
        F.Max: sympy.Max, F.Min: sympy.Min, F.Identity: lambda x: x,
    }


_KNOWN_FUNCS = (sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min)


def size_expr(v):
    """A torch size (int, SymInt, sympy expression) -> a pypto size (int or sympy over pypto symbols)."""
    if isinstance(v, bool):
        raise ConversionError(f"a bool where a size was expected: {v}")
    if isinstance(v, int):
        return v
    if isinstance(v, torch.SymInt):
        v = v.node.expr
    if not isinstance(v, sympy.Basic):
        raise ConversionError(f"not a size: {v!r}")
    for cls, fn in _translations().items():
        v = v.replace(cls, fn)
    v = v.xreplace({s: sym.symbol(s.name) for s in v.free_symbols})
    for f in v.atoms(sympy.Function):
        if not isinstance(f, _KNOWN_FUNCS):
            raise ConversionError(f"size expression {v} uses {type(f).__name__}, which pypto does not model")
    if _opaque and v.free_symbols:
        v = v.subs(_opaque)
    return sym.simplify(v)


# while converting one partition: size expressions none of whose symbols can be bound, each standing for
# a fresh symbol bound from the input dim it is (a [s0*s1, 64] input whose s0, s1 appear nowhere alone)
_opaque: dict = {}
_V = sym.symbol("_v")       # the bound value in a solved binder


def plan_sizes(placeholders) -> list[tuple]:
    """Binders (argument position, dim or None, symbol name, solution or None) that bind every size
    symbol of a partition at run time from its arguments: a dim (or SymInt) that is exactly a symbol
    binds it; one with a single unknown symbol is solved for it (s0*s1 with s0 known: s1 = v / s0);
    what is left is made opaque (``_opaque``)."""
    dims = []
    for pos, p in enumerate(placeholders):
        v = p.meta.get("val")
        exprs = list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else \
            [(None, v)] if isinstance(v, torch.SymInt) else []
        for d, e in exprs:
            e = size_expr(e)
            if not isinstance(e, int):
                dims.append((pos, d, e))
    binders, bound = [], set()
    for pos, d, e in dims:
        if isinstance(e, sympy.Symbol) and e not in bound:
            binders.append((pos, d, e.name, None))
            bound.add(e)
    progress = True
    while progress:
        progress = False
        for pos, d, e in dims:
            unknown = e.free_symbols - bound
            if len(unknown) != 1:
                continue
            s = unknown.pop()
            try:
                sols = sympy.solve(sympy.Eq(e, _V), s)
            except Exception:       # noqa: BLE001 - floor/Mod and the like: not solvable here
                sols = []
            if len(sols) == 1:
                binders.append((pos, d, s.name, sols[0]))
                bound.add(s)
                progress = True
    for pos, d, e in dims:
        if e not in _opaque and e.free_symbols and not e.free_symbols & bound:
            _opaque[e] = sym.symbol(f"u{len(_opaque)}")
            binders.append((pos, d, _opaque[e].name, None))
    return binders


def shape_of(t) -> tuple:
    return tuple(size_expr(d) for d in t.shape)


def dtype_of(t) -> dtypes.DataType:
    if is_f64_scalar(t):
        return dtypes.float32
    try:
        return dtypes.from_torch(t.dtype)
    except PyptoError as e:
        raise ConversionError(e.message) from None


def is_f64_scalar(t) -> bool:
    """A 0-d float64 tensor: how dynamo passes a Python float it does not specialise (a module's eps
    under dynamic=True), or a float64 scalar constant a model builds (GPT-2's attention scale,
    sqrt(full([], d, dtype=float64))). pypto has no float64: such a value is computed in float32 (folded
    to the compute dtype, as inductor does: the ops it meets round it to float32 anyway, since a 0-d
    tensor does not promote a float32 one) and handed back as float64 when a partition returns it."""
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.dim() == 0

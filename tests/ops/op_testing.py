"""Shared machinery of the op tests: a case table row (`Case`), compiling a case with given input
annotations, random inputs, and the per-dtype comparison with torch eager.

Tolerances (checked elementwise, scale-aware: |out - ref| <= tol * (|ref| + mean|ref|)):
  float32 1e-5, float16 1e-3, bfloat16 1e-2 — times a per-case factor that a case states when its
  rounding points differ from torch's (e.g. linear rounds the matmul before adding the bias).
Integer and bool results must be equal.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

import pypto

TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DYNAMIC_SIZES = (1, 7, 64, 1000)
T = "T"          # a dynamic dim in a case's input shapes


@dataclass
class Inp:
    """One input of a case: shape (ints and T), value kind, and a fixed dtype (None: the case dtype)."""
    shape: tuple
    kind: str = "normal"          # normal | positive | index:<dim size> | bool | int
    dtype: torch.dtype | None = None

    def __post_init__(self):
        if self.kind == "bool":
            self.dtype = torch.bool


@dataclass
class Case:
    """``fn(m, *inputs)`` is called with m = pypto (traced) and m = torch (eager); ``ref`` overrides
    the torch side when the names differ."""
    name: str
    fn: Callable
    inputs: list
    ref: Callable | None = None
    dtypes: tuple = FLOAT_DTYPES
    tol: float = 1.0
    dynamic: bool = True          # whether the T dims are also run from one trace with several sizes

    def __str__(self) -> str:
        return self.name


def compile_case(fn: Callable, specs: list, backend: str = "reference"):
    """A pypto.jit function of len(specs) tensors annotated with ``specs`` calling ``fn(pypto, *xs)``."""
    names = [f"x{i}" for i in range(len(specs))]

    def body(**kw):
        return fn(pypto, *[kw[n] for n in names])

    body.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=s) for n, s in zip(names, specs)])
    body.__name__ = getattr(fn, "__name__", "case")
    return pypto.jit(body, backend=backend)


def make_input(inp: Inp, dtype: torch.dtype, t_value: int, gen: torch.Generator) -> torch.Tensor:
    shape = tuple(t_value if d == T else d for d in inp.shape)
    dt = inp.dtype or dtype
    if inp.kind.startswith("index:"):
        bound = int(inp.kind.split(":")[1])
        return torch.randint(0, bound, shape, generator=gen).to(dt or torch.int64)
    if inp.kind == "bool":
        return torch.rand(shape, generator=gen) > 0.5
    if inp.kind == "int" or (inp.kind == "positive" and not dt.is_floating_point):
        low = 1 if inp.kind == "positive" else -5
        return torch.randint(low, 6, shape, generator=gen).to(dt)
    x = torch.randn(shape, generator=gen)
    if inp.kind == "positive":
        x = x.abs() + 0.5
    return x.to(dt)


def spec_of(inp: Inp, dtype: torch.dtype, dynamic: bool):
    dims = [pypto.dynamic("T") if (d == T and dynamic) else d for d in inp.shape]
    return pypto.Tensor[dims, pypto.dtypes.from_torch(inp.dtype or dtype)]


def static_shapes(inp: Inp, t_value: int) -> tuple:
    return tuple(t_value if d == T else d for d in inp.shape)


def assert_close(out, ref, dtype: torch.dtype | None = None, factor: float = 1.0, what: str = "") -> None:
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(ref), f"{what}: {len(ref)} results expected"
        for k, (o, r) in enumerate(zip(out, ref)):
            assert_close(o, r, dtype, factor, f"{what}[{k}]")
        return
    assert isinstance(out, torch.Tensor), f"{what}: expected a tensor, found {type(out).__name__}"
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != torch {tuple(ref.shape)}"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != torch {ref.dtype}"
    if not ref.dtype.is_floating_point:
        assert torch.equal(out, ref), f"{what}: integer results differ"
        return
    tol = TOL[dtype if dtype in TOL else ref.dtype] * factor
    o, r = out.double(), ref.double()
    same_special = (o == r) | (torch.isnan(o) & torch.isnan(r))
    finite = torch.isfinite(r)
    scale = r[finite].abs().mean() if finite.any() else torch.tensor(0.0, dtype=torch.float64)
    bound = tol * (r.abs() + scale)
    ok = same_special | (finite & ((o - r).abs() <= bound))
    if not bool(ok.all()):
        bad = (~ok).nonzero()[0].tolist()
        idx = tuple(bad)
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.numel()} elements differ beyond tol {tol:g} "
                             f"(scale-aware); first at {idx}: pypto {o[idx].item()!r} vs torch {r[idx].item()!r}")


def run_case(case: Case, dtype: torch.dtype, t_value: int = 37, seed: int = 0):
    """Trace the case with static shapes and compare it with torch eager at ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    xs = [make_input(i, dtype, t_value, gen) for i in case.inputs]
    f = compile_case(case.fn, [spec_of(i, dtype, dynamic=False) for i in case.inputs])
    out = f(*xs)
    ref = (case.ref or case.fn)(torch, *xs)
    assert_close(out, ref, dtype, case.tol, case.name)
    return f


def run_dynamic(case: Case, dtype: torch.dtype = torch.float32, sizes=DYNAMIC_SIZES):
    """One trace with T dynamic, run for every size in ``sizes``; each result compared with torch."""
    f = compile_case(case.fn, [spec_of(i, dtype, dynamic=True) for i in case.inputs])
    for k, t in enumerate(sizes):
        gen = torch.Generator().manual_seed(k)
        xs = [make_input(i, dtype, t, gen) for i in case.inputs]
        assert_close(f(*xs), (case.ref or case.fn)(torch, *xs), dtype, case.tol, f"{case.name} T={t}")
    assert f.trace_count == 1, f"{case.name}: traced {f.trace_count} times for sizes {sizes}"
    return f


def case_params(cases):
    """pytest parameters (case, dtype) for every case and each of its dtypes."""
    import pytest
    return [pytest.param(c, dt, id=f"{c.name}-{str(dt).replace('torch.', '')}") for c in cases for dt in c.dtypes]


def dynamic_params(cases):
    import pytest
    return [pytest.param(c, id=c.name) for c in cases if c.dynamic and any(T in i.shape for i in c.inputs)]


def traced_ops(f) -> set:
    """The op names in every graph ``f`` has traced (loop bodies included)."""
    names = set()

    def walk(g):
        for nid in g.nodes():
            names.add(g.op(nid))
            if g.op(nid) == "loop":
                walk(g.node(nid)["attrs"]["body"])
    for compiled in f.cache.values():
        walk(compiled.graph)
    return names


def check_error(fn: Callable, inputs: list, exc: type, match: str, dtype: torch.dtype = torch.float32):
    """Tracing ``fn`` raises ``exc`` matching ``match`` at fn's own line (a one-line lambda or def)."""
    import pytest
    gen = torch.Generator().manual_seed(0)
    xs = [make_input(i, dtype, 8, gen) for i in inputs]
    f = compile_case(fn, [spec_of(i, dtype, dynamic=True) for i in inputs])
    with pytest.raises(exc, match=match) as info:
        f(*xs)
    loc = info.value.loc
    code = fn.__code__
    assert loc is not None and loc.file == code.co_filename, f"error located at {loc}, not in {code.co_filename}"
    assert loc.line == code.co_firstlineno, f"error located at line {loc.line}, expected {code.co_firstlineno}"
    return info.value


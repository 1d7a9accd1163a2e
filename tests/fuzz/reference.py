"""The torch oracle of a random program: its steps interpreted in float64 from the same (rounded)
inputs, each value carried with a first-order bound on the error a correct low-precision
implementation can have there (a running error analysis).

Every op adds ``ROUNDING_ULPS * u(dtype) * (|r| + mean|r|)`` per rounding it makes (u: the unit
roundoff of the result's dtype, 2^-24 / 2^-11 / 2^-8; the mean term covers results near 0, e.g.
tanh or 1 - e^x computed through a cancellation) plus the dtype's smallest normal (results that
small may be flushed to zero), and passes on its operands' errors:
elementwise ops through the largest change of the result over the operands' error intervals,
sums as the sum of errors plus the accumulation's rounding (``u * log2(n)`` of sum|x|), amax/amin
as the largest error reduced, softmax as s * (e + sum(s * e)), matmul as |A|@eB + eA@|B| with the
accumulation in fp32 (the cube's accumulator). A result matches when |got - r| <= TOLERANCE * e
(elementwise; NaN/inf must match exactly): so tolerances grow with the dtype's precision and with
every op of the chain, and an ill-conditioned chain (exp of a large difference) gets a wide one
while a well-conditioned one stays tight.
"""
from __future__ import annotations

import math

import torch

from .programs import Program

UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ROUNDING_ULPS = 1.0       # per rounding (an op within an ulp of the exact result passes at any depth)
# a result below the dtype's smallest normal may be flushed to zero (silu(-50) in fp16 is -0.0)
SMALLEST_NORMAL = {k: torch.finfo(v).tiny for k, v in TORCH_DTYPE.items()}
TOLERANCE = 2.0           # |got - ref| <= TOLERANCE * the propagated bound

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "sin": torch.sin, "cos": torch.cos, "silu": torch.nn.functional.silu, "exp": torch.exp,
    "sqrt_abs1": lambda x: torch.sqrt(x.abs() + 1), "log1p_abs": lambda x: torch.log1p(x.abs()),
    "rsqrt_abs1": lambda x: torch.rsqrt(x.abs() + 1), "recip_abs1": lambda x: 1 / (x.abs() + 1),
    "square": lambda x: x * x, "clip": lambda x: x.clamp(-1.0, 1.5), "leaky": lambda x: torch.where(x > 0, x, x * 0.5),
    "softplus": torch.nn.functional.softplus, "gelu": torch.nn.functional.gelu,
}
SCALAR = {"add": lambda x, c: x + c, "sub": lambda x, c: x - c, "mul": lambda x, c: x * c,
          "rsub": lambda x, c: c - x, "div": lambda x, c: x / c, "rmul": lambda x, c: c * x}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum}


class _Rounds:
    """A part of a step that makes ``roundings`` roundings (the step's own count is for all of it)."""
    def __init__(self, roundings: int):
        self.roundings = roundings


class Approx:
    """A float64 reference value and its elementwise error bound (same shape)."""
    __slots__ = ("r", "e", "dtype")

    def __init__(self, r: torch.Tensor, e: torch.Tensor, dtype: str):
        self.r, self.e, self.dtype = r, e, dtype


def _rounding(r: torch.Tensor, dtype: str, count: float) -> torch.Tensor:
    if count == 0 or r.numel() == 0:
        return torch.zeros_like(r)
    a = r.abs().nan_to_num(0.0, 0.0, 0.0)
    return ROUNDING_ULPS * count * UNIT_ROUNDOFF[dtype] * (a + a.mean()) + count * SMALLEST_NORMAL[dtype]


def _through(f, *xs: Approx) -> tuple:
    """-> (f(*r), the largest change of it when each operand moves to an end of its error interval)."""
    base = f(*[x.r for x in xs])
    worst = torch.zeros_like(base)
    corners = [[]]
    for x in xs:
        corners = [c + [x.r + s * x.e] for c in corners for s in (-1.0, 1.0)] if bool((x.e > 0).any()) else \
            [c + [x.r] for c in corners]
    for c in corners:
        worst = torch.maximum(worst, (f(*c) - base).abs().nan_to_num(math.inf, math.inf, math.inf))
    return base, worst


def _elementwise(f, step, out_dtype, *xs: Approx) -> Approx:
    r, e = _through(f, *xs)
    e = e + _rounding(r, out_dtype, step.roundings)
    if len(xs) == 1:
        # a function of one argument is computed through its argument: gelu's 1 + erf(x / sqrt(2))
        # or sin's range reduction are exact to an ulp of x, not of the (possibly tiny) result
        e = e + ROUNDING_ULPS * step.roundings * UNIT_ROUNDOFF[out_dtype] * xs[0].r.abs()
    return Approx(r, e, out_dtype)


def _reduce(step, x: Approx) -> Approx:
    name, dim, keep = step.attrs["name"], step.attrs["dim"], step.attrs["keepdim"]
    if name in ("amax", "amin"):
        r = getattr(x.r, name)(dim, keepdim=keep)
        return Approx(r, x.e.amax(dim, keepdim=keep), x.dtype)
    n = math.prod(x.r.shape[d] for d in dim)
    acc = x.r.abs().sum(dim, keepdim=keep) * UNIT_ROUNDOFF[x.dtype] * ROUNDING_ULPS * (1 + math.log2(max(n, 1)))
    r, e = x.r.sum(dim, keepdim=keep), x.e.sum(dim, keepdim=keep) + acc
    if name == "mean":
        r, e = r / n, e / n
    return Approx(r, e + _rounding(r, x.dtype, step.roundings), x.dtype)


def _softmax(step, x: Approx) -> Approx:
    dim = step.attrs["dim"]
    s = torch.softmax(x.r, dim)
    spread = (s * x.e).sum(dim, keepdim=True)
    if step.op == "softmax":
        return Approx(s, s * (x.e + spread) + _rounding(s, x.dtype, step.roundings), x.dtype)
    r = torch.log_softmax(x.r, dim)
    return Approx(r, x.e + spread + _rounding(r, x.dtype, step.roundings), x.dtype)


def _matmul(step, a: Approx, b: Approx, out_dtype: str) -> Approx:
    layout = step.attrs["layout"]
    br, be = b.r, b.e
    if layout in ("gram", "right_t", "right_trans"):
        br, be = br.transpose(-1, -2), be.transpose(-1, -2)
    r = a.r @ br
    k = a.r.shape[-1]
    mag = a.r.abs() @ br.abs()
    e = a.r.abs() @ be + a.e @ br.abs() + a.e @ be
    e = e + mag * UNIT_ROUNDOFF["fp32"] * ROUNDING_ULPS * (1 + math.log2(max(k, 1)))
    return Approx(r, e + _rounding(r, out_dtype, step.roundings), out_dtype)


def _shaped(f, x: Approx) -> Approx:
    return Approx(f(x.r), f(x.e), x.dtype)


def _step(step, vals: dict, program: Program) -> Approx:
    xs = [vals[a] for a in step.args]
    out_dtype = program.values[step.out].dtype
    at = step.attrs
    op = step.op
    if op == "unary":
        return _elementwise(UNARY[at["name"]], step, out_dtype, xs[0])
    if op == "scalar":
        return _elementwise(lambda x: SCALAR[at["name"]](x, at["c"]), step, out_dtype, xs[0])
    if op == "binary" and at["name"] == "div_abs1":
        # a / (|b| + 1): the denominator is rounded twice in b's dtype, the quotient once in the result's
        a, b = xs
        den = _elementwise(lambda t: t.abs() + 1, _Rounds(2), b.dtype, b)
        return _elementwise(torch.div, _Rounds(1), out_dtype, a, den)
    if op == "binary":
        return _elementwise(BINARY[at["name"]], step, out_dtype, *xs)
    if op == "reduce":
        return _reduce(step, xs[0])
    if op in ("softmax", "log_softmax"):
        return _softmax(step, xs[0])
    if op == "matmul":
        return _matmul(step, *xs, out_dtype)
    if op == "cast":
        x = xs[0]
        return Approx(x.r, x.e + _rounding(x.r, out_dtype, step.roundings), out_dtype)
    if op == "transpose":
        return _shaped(lambda t: t.transpose(*at["dims"]), xs[0])
    if op == "permute":
        return _shaped(lambda t: t.permute(*at["perm"]), xs[0])
    if op in ("reshape", "expand"):
        run = vals["__run__"]
        shape = [d.sizes[run] for d in program.values[step.out].shape]
        return _shaped(lambda t: t.reshape(shape) if op == "reshape" else t.expand(shape), xs[0])
    if op == "slice":
        x = xs[0]
        n = x.r.shape[at["dim"]]
        length = n - at["lo"] if at["length"] is None else at["length"]
        return _shaped(lambda t: t.narrow(at["dim"], at["lo"], length), x)
    if op == "index":
        return _shaped(lambda t: t.select(at["dim"], at["i"]), xs[0])
    if op == "view":
        shape = [d.sizes[0] for d in program.values[step.out].shape]

        def box(t):
            for d, (o, n) in enumerate(zip(at["offsets"], shape)):
                t = t.narrow(d, o, n)
            return t
        return _shaped(box, xs[0])
    if op == "concat":
        return Approx(torch.cat([x.r for x in xs], at["dim"]), torch.cat([x.e for x in xs], at["dim"]), out_dtype)
    raise AssertionError(f"no reference for step {op}")


def evaluate(program: Program, inputs: list, run: int = 0) -> list:
    """-> [Approx] of the program's outputs, from the input tensors (in program.inputs order)."""
    vals = {"__run__": run}
    for inp, t in zip(program.inputs, inputs):
        r = t.double()
        vals[inp.name] = Approx(r, torch.zeros_like(r), inp.dtype)
    for step in program.steps:
        vals[step.out] = _step(step, vals, program)
    return [vals[o] for o in program.outputs]


def make_inputs(program: Program, run: int, gen: torch.Generator) -> list:
    """Uniform [-2, 2] * scale inputs of the run's sizes, rounded to each input's dtype."""
    out = []
    for inp in program.inputs:
        shape = [d.sizes[run] for d in inp.shape]
        x = (torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2) * inp.scale
        out.append(x.to(TORCH_DTYPE[inp.dtype]))
    return out


def mismatch(got, want: Approx, dtype: str) -> str | None:
    """None when ``got`` matches the reference within its bound; else what differs."""
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, found {type(got).__name__}"
    if tuple(got.shape) != tuple(want.r.shape):
        return f"shape {list(got.shape)} != torch {list(want.r.shape)}"
    if got.dtype != TORCH_DTYPE[dtype]:
        return f"dtype {got.dtype} != {TORCH_DTYPE[dtype]}"
    o, r = got.double(), want.r
    bound = TOLERANCE * want.e
    special = ~torch.isfinite(r)
    ok = torch.where(special, (o == r) | (torch.isnan(o) & torch.isnan(r)), (o - r).abs() <= bound)
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()[0].tolist()
    idx = tuple(bad)
    ratio = ((o - r).abs() / bound.clamp_min(1e-300))[~ok].max().item()
    return (f"{int((~ok).sum())} of {ok.numel()} elements differ; first at {list(idx)}: got {o[idx].item()!r}, "
            f"torch {r[idx].item()!r}, allowed +-{bound[idx].item():.3g} (worst {ratio:.3g}x the bound)")

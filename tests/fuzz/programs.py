"""Random pypto programs: a chain of ops drawn from one seed, rendered as the source of a @pypto.jit
function (several programs can share one function, one output tuple per program).

A program starts from one input and applies 1-8 steps, each making a new value from the last one
(binary steps also from an earlier value or a fresh input): elementwise unary/binary ops with
broadcasting and Python scalars, reductions sum/mean/amax/amin along a dim with or without keepdim,
softmax/log_softmax, matmul (weight on either side, transposed operands, batch dims, fp32 out),
transpose/permute/reshape/slice/index/view/expand/concat, casts between fp32/fp16/bf16. Sizes have
tails (1, 7, 33, 130, 257: not multiples of any tile) and size-1 dims; some dims are DYNAMIC (named
symbols), and a program is run at two sizes of each.

Each step records what it is (``Step``); ``source`` writes the pypto text, ``reference.py``
interprets the same steps with torch. The generator keeps a bound on every value's magnitude so
that no fp16 value overflows and exp/sin only see small arguments; magnitude is brought down by an
exact power-of-two scale when a step would exceed it.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

FLOATS = ("fp32", "fp16", "bf16")
PYPTO_DTYPE = {"fp32": "pypto.float32", "fp16": "pypto.float16", "bf16": "pypto.bfloat16"}
SIZES = (1, 1, 2, 3, 7, 16, 33, 64, 130, 257)
MAX_NUMEL = 20_000
MAX_BOUND = 2_000.0        # |value| stays below this (fp16 holds 65504; products of two stay finite)
INPUT_BOUND = 2.0          # inputs are uniform in [-2, 2] (weights scaled by 1/sqrt(K))

# name -> (pypto text of the op on {a}, how many roundings it does, the bound of the result from the operand's)
UNARY = {
    "abs": ("pypto.abs({a})", 1, lambda b: b),
    "neg": ("-{a}", 1, lambda b: b),
    "relu": ("pypto.relu({a})", 1, lambda b: b),
    "tanh": ("pypto.tanh({a})", 1, lambda b: 1.0),
    "sigmoid": ("pypto.sigmoid({a})", 1, lambda b: 1.0),
    "sin": ("pypto.sin({a})", 1, lambda b: 1.0),
    "cos": ("{a}.cos()", 1, lambda b: 1.0),
    "silu": ("pypto.silu({a})", 2, lambda b: b),
    "exp": ("pypto.exp({a})", 1, lambda b: math.exp(b)),
    "sqrt_abs1": ("pypto.sqrt(pypto.abs({a}) + 1.0)", 3, lambda b: math.sqrt(b + 1)),
    "log1p_abs": ("pypto.log1p({a}.abs())", 2, lambda b: math.log1p(b)),
    "rsqrt_abs1": ("pypto.rsqrt(pypto.abs({a}) + 1.0)", 3, lambda b: 1.0),
    "recip_abs1": ("pypto.reciprocal({a}.abs() + 1.0)", 3, lambda b: 1.0),
    "square": ("{a} * {a}", 1, lambda b: b * b),
    "clip": ("pypto.clip({a}, -1.0, 1.5)", 1, lambda b: min(b, 1.5)),
    "leaky": ("pypto.where({a} > 0, {a}, {a} * 0.5)", 2, lambda b: b),
    "softplus": ("pypto.softplus({a})", 3, lambda b: b + 1.0),
    "gelu": ("pypto.gelu({a})", 4, lambda b: b),
}
# arguments an op accepts with any accuracy: exp overflows fp16 beyond 11, sin/cos lose their
# range reduction on large arguments
UNARY_ARG_LIMIT = {"exp": 6.0, "sin": 16.0, "cos": 16.0}
SCALAR = {"add": "{a} + {c}", "sub": "{a} - {c}", "mul": "{a} * {c}", "rsub": "{c} - {a}", "div": "{a} / {c}",
          "rmul": "{c} * {a}"}
SCALARS = (0.5, 2.0, -3.0, 1.5, -0.25, 7.0)
BINARY = {
    "add": ("{a} + {b}", 1), "sub": ("{a} - {b}", 1), "mul": ("{a} * {b}", 1),
    "maximum": ("pypto.maximum({a}, {b})", 1), "minimum": ("pypto.minimum({a}, {b})", 1),
    "div_abs1": ("{a} / (pypto.abs({b}) + 1.0)", 3),
}
REDUCE = ("sum", "mean", "amax", "amin")


@dataclass(frozen=True)
class Dim:
    """One dimension: its sizes in the two runs, and for a dynamic one the key of its size (two
    dims with the same key have the same size in every run; None: static)."""
    sizes: tuple
    key: str | None = None

    @property
    def static(self) -> bool:
        return self.key is None

    @property
    def least(self) -> int:
        return min(self.sizes)


def static(n: int) -> Dim:
    return Dim((n, n))


def same_size(a: Dim, b: Dim) -> bool:
    return a.key == b.key and (a.key is not None or a.sizes == b.sizes)


def broadcast_dim(a: Dim, b: Dim) -> Dim | None:
    if same_size(a, b):
        return a
    if a.static and a.sizes[0] == 1:
        return b
    if b.static and b.sizes[0] == 1:
        return a
    return None


def broadcast(sa: tuple, sb: tuple) -> tuple | None:
    """The broadcast shape of two shapes of Dims, or None where they do not broadcast."""
    n = max(len(sa), len(sb))
    sa, sb = (static(1),) * (n - len(sa)) + tuple(sa), (static(1),) * (n - len(sb)) + tuple(sb)
    out = tuple(broadcast_dim(a, b) for a, b in zip(sa, sb))
    return None if any(d is None for d in out) else out


def inputtable(d: Dim) -> bool:
    """Whether an input annotation can name ``d``: static, or a symbol itself (not T - 3)."""
    return d.static or "-" not in d.key


def numel(shape) -> int:
    """Elements of ``shape`` in the larger of the two runs."""
    return max(math.prod(d.sizes[run] for d in shape) for run in (0, 1))


@dataclass
class Input:
    name: str
    shape: tuple            # of Dim
    dtype: str
    scale: float = 1.0      # values are uniform in [-2, 2] * scale


@dataclass
class Value:
    name: str
    shape: tuple
    dtype: str
    bound: float
    strided: bool = False   # a view whose last two dims are not its storage's rows and columns


@dataclass
class Step:
    """``out = op(args...)``; ``attrs`` holds what the op needs beyond its operands (all static)."""
    out: str
    op: str                 # unary | scalar | binary | reduce | softmax | log_softmax | matmul | cast | transpose
    #                         permute | reshape | slice | index | view | expand | concat
    args: tuple             # value names
    attrs: dict = field(default_factory=dict)
    text: str = ""          # the pypto expression
    roundings: int = 0      # roundings in the result's dtype the op makes (0: exact)


@dataclass
class Program:
    seed: int
    inputs: list
    steps: list
    values: dict            # name -> Value (inputs too)
    outputs: list           # value names

    def describe(self) -> str:
        x = self.values[self.inputs[0].name]
        return (f"seed {self.seed}: {x.dtype} {shape_text(x.shape)}, "
                + " -> ".join(s.op if s.op not in ("unary", "scalar", "binary", "reduce")
                              else f"{s.op}:{s.attrs['name']}" for s in self.steps))


def shape_text(shape) -> str:
    return "[" + ", ".join(str(d.sizes[0]) if d.static else f"{d.key}={d.sizes[0]}|{d.sizes[1]}" for d in shape) + "]"


class _Builder:
    def __init__(self, seed: int, rng: random.Random):
        self.seed, self.rng = seed, rng
        self.inputs, self.steps, self.values = [], [], {}

    # ------------------------------------------------------------------ values
    def new_input(self, shape, dtype, scale=1.0) -> Value:
        name = f"x{len(self.inputs)}"
        self.inputs.append(Input(name, tuple(shape), dtype, scale))
        v = self.values[name] = Value(name, tuple(shape), dtype, INPUT_BOUND * scale)
        return v

    def add(self, op, args, shape, dtype, bound, text, roundings=1, strided=False, **attrs) -> Value:
        name = f"v{len(self.steps) + 1}"
        self.steps.append(Step(name, op, tuple(a.name for a in args), attrs, text, roundings))
        v = self.values[name] = Value(name, tuple(shape), dtype, bound, strided)
        return v

    def rescale(self, a: Value, target: float) -> Value:
        """``a`` times an exact power of two that brings its bound to at most ``target``."""
        k = max(1, math.ceil(math.log2(a.bound / target)))
        c = 2.0 ** -k
        return self.add("scalar", [a], a.shape, a.dtype, a.bound * c, SCALAR["mul"].format(a=a.name, c=c),
                        1, name="mul", c=c)

    def fit(self, a: Value, growth: float) -> Value:
        """``a``, rescaled first if a step multiplying its bound by ``growth`` would pass MAX_BOUND."""
        return self.rescale(a, MAX_BOUND / growth) if a.bound * growth > MAX_BOUND else a

    # ------------------------------------------------------------------ shapes
    def draw_shape(self, rank: int, dynamic_dims: int) -> tuple:
        rng = self.rng
        while True:
            dims = [static(rng.choice(SIZES)) for _ in range(rank)]
            if numel(dims) <= MAX_NUMEL:
                break
        for i in rng.sample(range(rank), min(rank, dynamic_dims)):
            second = rng.choice([s for s in SIZES if s != dims[i].sizes[0]] or [1])
            candidate = dims[:i] + [Dim((dims[i].sizes[0], second), f"s{i}")] + dims[i + 1:]
            if numel(candidate) <= MAX_NUMEL:
                dims = candidate
        return tuple(dims)

    def broadcast_partner(self, shape) -> tuple:
        """A shape that broadcasts against ``shape`` (size-1 dims, dropped leading dims, or a
        size-1 dim of ``shape`` grown)."""
        rng = self.rng
        out = []
        for d in shape:
            r = rng.random()
            if not inputtable(d):
                out.append(static(1))
            elif d.static and d.sizes[0] == 1 and r < 0.3:
                grown = static(rng.choice([2, 7, 33]))
                out.append(grown if numel(shape) * grown.sizes[0] <= MAX_NUMEL else d)
            elif r < 0.35:
                out.append(static(1))
            else:
                out.append(d)
        drop = rng.randint(0, len(out) - 1) if len(out) > 1 and rng.random() < 0.3 else 0
        return tuple(out[drop:])


def promote(a: str, b: str) -> str:
    """torch's promotion of two float dtypes: the wider; fp16 with bf16 is fp32."""
    return a if a == b else "fp32"


def _index(rank: int, dim: int, item: str) -> str:
    """The subscript of ``item`` along ``dim`` of a rank-``rank`` tensor: ':, :, 3:5' or '..., 3:5'."""
    if dim == rank - 1 and rank > 1:
        return f"..., {item}"
    return ", ".join([":"] * dim + [item])


def _scale_text(c: float) -> str:
    return repr(float(c))


def draw_step(b: _Builder, a: Value) -> Value:
    rng = b.rng
    rank = len(a.shape)
    if rank == 0:                       # a full reduction's result
        return STEP_DRAWERS[rng.choice(["unary", "scalar", "binary", "cast", "reshape"])](b, a)
    kinds = ["unary"] * 4 + ["scalar"] * 2 + ["binary"] * 4 + ["reduce"] * 2 + ["softmax", "cast"] * 1
    if rank >= 2:
        kinds += ["matmul"] * 3 + ["transpose"] * 2 + ["reshape", "slice", "index"]
    else:
        kinds += ["reshape", "slice", "matmul"]
    if rank >= 3:
        kinds += ["permute"]
    if any(d.static and d.sizes[0] == 1 for d in a.shape):
        kinds += ["expand"]
    if all(d.static for d in a.shape):
        kinds += ["view"]
    kinds += ["concat"]
    kind = rng.choice(kinds)
    return STEP_DRAWERS[kind](b, a)


def _unary(b: _Builder, a: Value) -> Value:
    name = b.rng.choice(sorted(UNARY))
    text, roundings, bound_of = UNARY[name]
    limit = UNARY_ARG_LIMIT.get(name, MAX_BOUND if name != "square" else math.sqrt(MAX_BOUND))
    if a.bound > limit:
        a = b.rescale(a, limit)
    return b.add("unary", [a], a.shape, a.dtype, bound_of(a.bound), text.format(a=a.name), roundings, name=name)


def _scalar(b: _Builder, a: Value) -> Value:
    name = b.rng.choice(sorted(SCALAR))
    c = b.rng.choice(SCALARS)
    growth = abs(c) if name in ("mul", "rmul") else 1 / abs(c) if name == "div" else 1.0
    a = b.fit(a, growth)
    bound = a.bound * growth + (abs(c) if name in ("add", "sub", "rsub") else 0.0)
    if bound > MAX_BOUND:
        a = b.rescale(a, MAX_BOUND / 4)
        bound = a.bound * growth + abs(c)
    return b.add("scalar", [a], a.shape, a.dtype, bound, SCALAR[name].format(a=a.name, c=_scale_text(c)), 1,
                 name=name, c=c)


def _binary(b: _Builder, a: Value) -> Value:
    rng = b.rng
    name = rng.choice(sorted(BINARY))
    earlier = [v for v in b.values.values() if v.name != a.name
               and broadcast(a.shape, v.shape) is not None
               and numel(broadcast(a.shape, v.shape)) <= MAX_NUMEL]
    if earlier and rng.random() < 0.4:
        other = rng.choice(earlier)
    else:
        other = b.new_input(b.broadcast_partner(a.shape), a.dtype)
    shape = broadcast(a.shape, other.shape)
    if name == "mul" and a.bound * other.bound > MAX_BOUND:
        a = b.rescale(a, MAX_BOUND / other.bound / 2) if other.bound < MAX_BOUND / 8 else a
        if a.bound * other.bound > MAX_BOUND:
            other = b.rescale(other, 1.0)
    bound = {"add": a.bound + other.bound, "sub": a.bound + other.bound, "mul": a.bound * other.bound,
             "maximum": max(a.bound, other.bound), "minimum": max(a.bound, other.bound),
             "div_abs1": a.bound}[name]
    if bound > MAX_BOUND:
        a = b.rescale(a, MAX_BOUND / 4)
        other = b.rescale(other, MAX_BOUND / 4) if other.bound > MAX_BOUND / 4 else other
        bound = max(a.bound, other.bound) * 2
    text, roundings = BINARY[name]
    if rng.random() < 0.2 and name in ("add", "mul", "maximum", "minimum"):
        a, other = other, a                   # the broadcast operand first
    return b.add("binary", [a, other], shape, promote(a.dtype, other.dtype), bound,
                 text.format(a=a.name, b=other.name), roundings, name=name)


def _reduce(b: _Builder, a: Value) -> Value:
    rng = b.rng
    name = rng.choice(REDUCE)
    rank = len(a.shape)
    r = rng.random()
    if r < 0.1:
        dims = tuple(range(rank))                   # every dim: dim=None
    elif r < 0.25 and rank >= 2:
        dims = tuple(sorted(rng.sample(range(rank), 2)))
    else:
        dims = (rng.randrange(rank),)
    keepdim = (rank == len(dims) and len(dims) == 1) or rng.random() < 0.5
    n = math.prod(max(a.shape[d].sizes) for d in dims)
    if name == "sum":
        a = b.fit(a, n)
    shape = tuple(static(1) if i in dims else d for i, d in enumerate(a.shape)) if keepdim else \
        tuple(d for i, d in enumerate(a.shape) if i not in dims)
    if len(dims) == rank and len(dims) > 1 and rng.random() < 0.5:
        written = "None"
    elif len(dims) == 1:
        written = str(dims[0] - rank if rng.random() < 0.5 else dims[0])
    else:
        written = str(tuple(d - rank if rng.random() < 0.5 else d for d in dims))
    text = f"pypto.{name}({a.name}, {written}" + (", keepdim=True)" if keepdim else ")")
    if rng.random() < 0.3:
        text = f"{a.name}.{name}({written}" + (", keepdim=True)" if keepdim else ")")
    bound = a.bound * n if name == "sum" else a.bound
    return b.add("reduce", [a], shape, a.dtype, bound, text, 0 if name in ("amax", "amin") else 1,
                 name=name, dim=dims, keepdim=keepdim)


def _softmax(b: _Builder, a: Value) -> Value:
    dim = b.rng.randrange(len(a.shape))
    if b.rng.random() < 0.25:
        n = max(a.shape[dim].sizes)
        return b.add("log_softmax", [a], a.shape, a.dtype, 2 * a.bound + math.log(n) + 1,
                     f"pypto.log_softmax({a.name}, {dim})", 3, dim=dim)
    return b.add("softmax", [a], a.shape, a.dtype, 1.0, f"pypto.softmax({a.name}, {dim})", 3, dim=dim)


def _cast(b: _Builder, a: Value) -> Value:
    to = b.rng.choice([t for t in FLOATS if t != a.dtype])
    return b.add("cast", [a], a.shape, to, a.bound, f"pypto.cast({a.name}, {PYPTO_DTYPE[to]})",
                 0 if to == "fp32" else 1, to=to)


def _vector_matmul(b: _Builder, a: Value) -> Value:
    """A rank-1 value times a matrix: a @ w ([K] @ [K, N] -> [N]) or w @ a ([N, K] @ [K] -> [N])."""
    (k,) = a.shape
    if not inputtable(k):
        return _unary(b, a)
    n = static(b.rng.choice([1, 7, 33, 130]))
    left = b.rng.random() < 0.5
    w = b.new_input((n, k) if left else (k, n), a.dtype, 1 / math.sqrt(max(k.sizes)))
    a = b.fit(a, math.sqrt(max(k.sizes)))
    w_val = b.values[w.name]
    text = f"{w.name} @ {a.name}" if left else f"{a.name} @ {w.name}"
    return b.add("matmul", [w_val, a] if left else [a, w_val], (n,), a.dtype, a.bound * math.sqrt(max(k.sizes)),
                 text, 1, layout="left" if left else "right")


def _matmul(b: _Builder, a: Value) -> Value:
    rng = b.rng
    if len(a.shape) == 1:
        return _vector_matmul(b, a)
    *batch, m, k = a.shape
    if a.strided:
        # pypto refuses a matmul operand whose rows and columns are not the last two dims of a tensor
        # (CompileError "copy it first"); the copy is an op of the chain
        a = b.add("scalar", [a], a.shape, a.dtype, a.bound, f"{a.name} * 1.0", 0, name="mul", c=1.0)
    layout = rng.choice(["right", "right", "right_t", "right_trans", "left", "gram", "batched"])
    n = static(rng.choice([s for s in SIZES if s > 1] + [1]))
    out_f32 = a.dtype != "fp32" and rng.random() < 0.3
    out_dtype = "fp32" if out_f32 else a.dtype
    extra = f", {PYPTO_DTYPE['fp32']}" if out_f32 else ""
    if layout == "gram":
        if numel((*batch, m, m)) > MAX_NUMEL:
            layout = "right"
        else:
            if a.bound * a.bound * max(k.sizes) > MAX_BOUND:
                a = b.rescale(a, math.sqrt(MAX_BOUND / max(k.sizes)))
            shape = (*batch, m, m)
            return b.add("matmul", [a, a], shape, out_dtype, a.bound * a.bound * max(k.sizes),
                         f"pypto.matmul({a.name}, {a.name}.transpose(-1, -2){extra})", 1, layout=layout)
    if not inputtable(m if layout == "left" else k) or (layout == "batched" and not all(map(inputtable, batch))):
        return _unary(b, a)
    if layout == "left":
        w = b.new_input((n, m), a.dtype, 1 / math.sqrt(max(m.sizes)))
        shape = (*batch, n, k)
        growth = math.sqrt(max(m.sizes))
    else:
        shape = (*batch, m, n)
        growth = math.sqrt(max(k.sizes))
        wbatch = ()
        if layout == "batched" and batch:
            wbatch = tuple(d if rng.random() < 0.6 else static(1) for d in batch)
        stored = (n, k) if layout in ("right_t", "right_trans") else (k, n)
        w = b.new_input((*wbatch, *stored), a.dtype, 1 / math.sqrt(max(k.sizes)))
    if numel(shape) > MAX_NUMEL:
        return _unary(b, a)
    a = b.fit(a, growth)
    w_val = b.values[w.name]
    text = {"right": f"pypto.matmul({a.name}, {w.name}{extra})" if extra else f"{a.name} @ {w.name}",
            "batched": f"pypto.matmul({a.name}, {w.name}{extra})",
            "right_t": f"pypto.matmul({a.name}, {w.name}.transpose(-1, -2){extra})",
            "right_trans": f"pypto.matmul({a.name}, {w.name}{extra}, b_trans=True)",
            "left": f"pypto.matmul({w.name}, {a.name}{extra})"}[layout]
    args = [w_val, a] if layout == "left" else [a, w_val]
    return b.add("matmul", args, shape, out_dtype, a.bound * growth, text, 1, layout=layout)


def _transpose(b: _Builder, a: Value) -> Value:
    rank = len(a.shape)
    d0, d1 = b.rng.sample(range(rank), 2)
    shape = list(a.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    text = f"{a.name}.transpose({d0 - rank if b.rng.random() < 0.5 else d0}, {d1})"
    moves_rows = {d0, d1} != {rank - 2, rank - 1} and max(d0, d1) >= rank - 2
    return b.add("transpose", [a], shape, a.dtype, a.bound, text, 0, a.strided or moves_rows, dims=(d0, d1))


def _permute(b: _Builder, a: Value) -> Value:
    perm = list(range(len(a.shape)))
    b.rng.shuffle(perm)
    moves_rows = set(perm[-2:]) != {len(perm) - 2, len(perm) - 1}
    return b.add("permute", [a], [a.shape[p] for p in perm], a.dtype, a.bound,
                 f"pypto.permute({a.name}, {', '.join(map(str, perm))})", 0, a.strided or moves_rows, perm=tuple(perm))


def _factor(n: int, rng: random.Random) -> tuple | None:
    pairs = [(f, n // f) for f in range(2, n) if n % f == 0]
    return rng.choice(pairs) if pairs else None


def _reshape(b: _Builder, a: Value) -> Value:
    rng = b.rng
    shape = list(a.shape)
    rank = len(shape)
    options = ["unsqueeze"]
    if rank >= 2 and any(shape[i].static and shape[i + 1].static for i in range(rank - 1)):
        options.append("merge")
    if rank < 4 and any(d.static and _factor(d.sizes[0], rng) for d in shape):
        options.append("split")
    if rank >= 2 and any(d.static and d.sizes[0] == 1 for d in shape):
        options.append("squeeze")
    how = rng.choice(options)
    if how == "unsqueeze" and rank >= 4:
        how = options[-1] if len(options) > 1 else None
        if how is None:
            return _transpose(b, a) if rank >= 2 else _unary(b, a)
    if how == "unsqueeze":
        p = rng.randint(0, rank)
        new = shape[:p] + [static(1)] + shape[p:]
        text = f"pypto.unsqueeze({a.name}, {p})"
    elif how == "squeeze":
        p = rng.choice([i for i, d in enumerate(shape) if d.static and d.sizes[0] == 1])
        new = shape[:p] + shape[p + 1:]
        text = f"pypto.squeeze({a.name}, {p})"
    elif how == "merge":
        i = rng.choice([i for i in range(rank - 1) if shape[i].static and shape[i + 1].static])
        new = shape[:i] + [static(shape[i].sizes[0] * shape[i + 1].sizes[0])] + shape[i + 2:]
        text = f"pypto.flatten({a.name}, {i}, {i + 1})" if rng.random() < 0.5 else None
    else:
        i = rng.choice([i for i, d in enumerate(shape) if d.static and _factor(d.sizes[0], rng)])
        f, g = _factor(shape[i].sizes[0], rng)
        new = shape[:i] + [static(f), static(g)] + shape[i + 1:]
        text = None
    if text is None:
        dims = ", ".join(str(d.sizes[0]) if d.static else f"{a.name}.shape[{shape.index(d)}]" for d in new)
        text = f"pypto.reshape({a.name}, [{dims}])" if rng.random() < 0.5 else f"{a.name}.reshape({dims})"
    return b.add("reshape", [a], new, a.dtype, a.bound, text, 0, a.strided)


def _slice(b: _Builder, a: Value) -> Value:
    rng = b.rng
    rank = len(a.shape)
    dims = [i for i, d in enumerate(a.shape) if d.least >= 2]
    if not dims:
        return _unary(b, a)
    dim = rng.choice(dims)
    d = a.shape[dim]
    if d.static:
        lo = rng.randrange(d.sizes[0])
        hi = rng.randint(lo + 1, d.sizes[0])
        new = static(hi - lo)
        item = f"{lo or ''}:{hi if hi != d.sizes[0] or rng.random() < 0.5 else ''}"
        if hi == d.sizes[0] and rng.random() < 0.3 and lo:
            item = f"{lo - d.sizes[0]}:"           # negative start
    else:
        lo = rng.randrange(1, d.least)
        hi = None
        new = Dim(tuple(s - lo for s in d.sizes), f"{d.key}-{lo}")
        item = f"{lo}:"
    shape = list(a.shape)
    shape[dim] = new
    return b.add("slice", [a], shape, a.dtype, a.bound, f"{a.name}[{_index(rank, dim, item)}]", 0, a.strided,
                 dim=dim, lo=lo, length=None if hi is None else hi - lo)


def _select(b: _Builder, a: Value) -> Value:
    rank = len(a.shape)
    dims = [i for i, d in enumerate(a.shape) if d.static]
    if not dims:
        return _slice(b, a)
    dim = b.rng.choice(dims)
    i = b.rng.randrange(a.shape[dim].sizes[0])
    shape = [d for j, d in enumerate(a.shape) if j != dim]
    return b.add("index", [a], shape, a.dtype, a.bound, f"{a.name}[{_index(rank, dim, str(i))}]", 0,
                 a.strided, dim=dim, i=i)


def _view(b: _Builder, a: Value) -> Value:
    rng = b.rng
    box, offsets = [], []
    for d in a.shape:
        n = d.sizes[0]
        size = rng.randint(1, n)
        box.append(size)
        offsets.append(rng.randint(0, n - size))
    return b.add("view", [a], [static(s) for s in box], a.dtype, a.bound,
                 f"pypto.view({a.name}, {box}, {offsets})", 0, a.strided, offsets=tuple(offsets))


def _expand(b: _Builder, a: Value) -> Value:
    rng = b.rng
    shape = list(a.shape)
    ones = [i for i, d in enumerate(shape) if d.static and d.sizes[0] == 1]
    i = rng.choice(ones)
    grown = rng.choice([2, 7, 33, 64])
    if numel(shape) * grown > MAX_NUMEL:
        return _unary(b, a)
    shape[i] = static(grown)
    sizes = ", ".join(str(grown) if j == i else "-1" for j in range(len(shape)))
    return b.add("expand", [a], shape, a.dtype, a.bound, f"{a.name}.expand({sizes})", 0, True)


def _concat(b: _Builder, a: Value) -> Value:
    rng = b.rng
    dims = [i for i, d in enumerate(a.shape) if d.static]
    if not dims or not all(map(inputtable, a.shape)):
        return _binary(b, a)
    dim = rng.choice(dims)
    extra = rng.choice([1, 7, 33])
    shape = list(a.shape)
    shape[dim] = static(a.shape[dim].sizes[0] + extra)
    if numel(shape) > MAX_NUMEL:
        return _unary(b, a)
    part = list(a.shape)
    part[dim] = static(extra)
    other = b.new_input(part, a.dtype)
    first, second = (a, other) if rng.random() < 0.5 else (other, a)
    text = f"pypto.concat([{first.name}, {second.name}], {dim})"
    return b.add("concat", [first, second], shape, a.dtype, max(a.bound, other.bound), text, 0, dim=dim)


STEP_DRAWERS = {"unary": _unary, "scalar": _scalar, "binary": _binary, "reduce": _reduce, "softmax": _softmax,
                "cast": _cast, "matmul": _matmul, "transpose": _transpose, "permute": _permute,
                "reshape": _reshape, "slice": _slice, "index": _select, "view": _view, "expand": _expand,
                "concat": _concat}


def generate(seed: int, max_steps: int = 8) -> Program:
    """The program of ``seed`` (the same one on every machine and Python version)."""
    rng = random.Random(seed)
    b = _Builder(seed, rng)
    rank = rng.choice([1, 2, 2, 2, 3, 3])
    dtype = rng.choice(FLOATS)
    dynamic = rng.choice([0, 0, 1, 1, 2])
    x = b.new_input(b.draw_shape(rank, dynamic), dtype)
    v = x
    for _ in range(rng.randint(1, max_steps)):
        v = draw_step(b, v)
    if v is x:
        v = _unary(b, x)
    outputs = [v.name]
    middle = [s.out for s in b.steps[:-1] if s.out != v.name]
    if middle and rng.random() < 0.3:
        outputs.append(rng.choice(middle))
    return Program(seed, b.inputs, b.steps, b.values, outputs)


# ---------------------------------------------------------------------- source text
def _annotation(inp: Input, prefix: str) -> str:
    dims = ", ".join(str(d.sizes[0]) if d.static else f'pypto.dynamic("{prefix}{d.key}")' for d in inp.shape)
    return f"pypto.Tensor[[{dims}], {PYPTO_DTYPE[inp.dtype]}]"


def _renamed(text: str, names: dict) -> str:
    """``text`` with every value name replaced by its prefixed one (whole identifiers only)."""
    return re.sub(r"\b[xv]\d+\b", lambda m: names.get(m.group(0), m.group(0)), text)


def source(programs: list, name: str = "program") -> str:
    """Python source of ``def name(...)`` running every program; returns one flat tuple of all their
    outputs (program order). With one program, names are unprefixed (a reproducer to paste)."""
    params, body, results = [], [], []
    for k, p in enumerate(programs):
        prefix = f"p{k}_" if len(programs) > 1 else ""
        names = {v: prefix + v for v in p.values}
        for inp in p.inputs:
            params.append(f"{names[inp.name]}: {_annotation(inp, prefix)}")
        if len(programs) > 1:
            body.append(f"    # {p.describe()}")
        for s in p.steps:
            body.append(f"    {names[s.out]} = {_renamed(s.text, names)}")
        results += [names[o] for o in p.outputs]
    sig = (",\n" + " " * (len(name) + 5)).join(params)
    ret = ", ".join(results) + ("," if len(results) == 1 else "")
    return f"def {name}({sig}):\n" + "\n".join(body) + f"\n    return {ret}\n"

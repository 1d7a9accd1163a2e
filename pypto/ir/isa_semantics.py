"""What each PTO instruction computes, on torch tensors, and over which region of its operands.

This is the one executable meaning of the instruction set: the simulator (pypto/runtime/sim/functional.py)
and the Tile level's reference interpreter (pypto/tile/interpret.py) both run these functions; each
entry of pypto/ir/isa.py names its function and its region kind.

Semantics functions have the signature ``f(dst, srcs, attrs)`` and write ``dst``. The caller has
already cut every tile operand to the region the instruction works on (``REGIONS`` below), so a
function only says *what* is computed. Dtype behaviour (the hardware's): floating tiles compute in
fp32 and round to the destination dtype once per instruction (round-to-nearest-even, as
``Tensor.copy_`` does); integer tiles compute in their own integer type (int64 intermediates,
wrapped on the store); reductions accumulate in fp32; matmul multiplies fp16/bf16 inputs and
accumulates in fp32.

Region kinds: a function ``shapes(v, n) -> ((rows, cols) per tile operand, destination first)``
of ``v``, the flat list of valid shapes ``[dst_rows, dst_cols, src0_rows, src0_cols, ...]`` (plain
ints, or strings of Python source when the simulator compiles a bounds test):
  same       every tile operand over the destination's valid region
  rowexpand  src0 over the region, src1 as a [rows, 1] column
  colexpand  src0 over the region, src1 as a [1, cols] row
  rowbcast / colbcast   the single source as a column / row
  rowreduce / colreduce the source over its own valid region; dst column 0 / row 0
  trans      the source over the transposed region
  fill       no tile source
  matmul     dst [M, N] valid; a [M, K] with K = a's valid columns; b [K, N]
  load / store  the tile's valid region (the GM box is the simulator's business)
"""
from __future__ import annotations

import torch

F32 = torch.float32


def _up(x):
    """A source operand as the compute type: fp32 for floating tiles, int64 for integer tiles."""
    if isinstance(x, torch.Tensor):
        if x.dtype.is_floating_point:
            return x if x.dtype == F32 else x.to(F32)
        return x.to(torch.int64)
    return x


def _store(dst, value):
    if isinstance(value, torch.Tensor) and not dst.dtype.is_floating_point and value.dtype.is_floating_point:
        value = torch.trunc(value)          # float -> int stores truncate (TCVT chooses its own rounding)
    dst.copy_(value)


def elementwise(fn):
    """dst = fn(src0, src1, ...) in the compute type (also the row/col-expand forms: the caller
    shapes the broadcast operand)."""
    def run(dst, srcs, attrs):
        _store(dst, fn(*[_up(s) for s in srcs]))
    return run


def tile_scalar(fn):
    """dst = fn(src, scalar): the scalar takes the compute type of the tile (fp32 or integer)."""
    def run(dst, srcs, attrs):
        src, s = _up(srcs[0]), srcs[1]
        if isinstance(src, torch.Tensor) and src.dtype == F32:
            s = float(s)
        _store(dst, fn(src, s))
    return run


def bitwise(fn):
    def run(dst, srcs, attrs):
        args = [s if s.dtype == torch.bool else s.to(torch.int64) for s in srcs]
        _store(dst, fn(*args))
    return run


_CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def compare(dst, srcs, attrs):
    """dst = src0 <attrs['cmp']> src1 (a tile or a scalar), one 0/1 element per element."""
    a, b = _up(srcs[0]), srcs[1]
    b = _up(b) if isinstance(b, torch.Tensor) else (float(b) if a.dtype == F32 else b)
    _store(dst, _CMP[attrs.get("cmp", "eq")](a, b))


def select(dst, srcs, attrs):
    mask, a, b = srcs
    _store(dst, torch.where(mask != 0, _up(a), _up(b)))


def _half_away(x):
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def _to_odd(x):
    t = torch.trunc(x)
    return torch.where((t != x) & (torch.remainder(t, 2) == 0), t + torch.sign(x), t)


# TCVT rounding (attrs["round"]) for float -> int; the names the codegen knows (CAST_RINT, ...)
ROUND_MODES = {"rint": torch.round, "nearest": torch.round, "even": torch.round, "round": _half_away,
               "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "odd": _to_odd,
               "none": torch.trunc}      # none: a plain C cast, as pto-isa and the cpu backend do


def _narrow(src32, dtype, mode):
    """float -> narrower float with a rounding mode: round to nearest even, then step one ulp where
    the mode wants the other neighbour (toward zero / -inf / +inf)."""
    y = src32.to(dtype)
    back = y.to(torch.float32)
    if mode == "trunc":
        step = back.abs() > src32.abs()
        target = torch.zeros_like(y)
    elif mode == "floor":
        step, target = back > src32, torch.full_like(y, float("-inf"))
    elif mode == "ceil":
        step, target = back < src32, torch.full_like(y, float("inf"))
    else:                       # rint / nearest / round / odd / none: nearest even (ties differ only)
        return y
    return torch.where(step, torch.nextafter(y, target), y)


def convert(dst, srcs, attrs):
    """TCVT: dst = src in dst's dtype, rounded by attrs['round'] (default rint)."""
    src = srcs[0]
    mode = attrs.get("round", "rint")
    if src.dtype.is_floating_point and not dst.dtype.is_floating_point:
        dst.copy_(ROUND_MODES[mode](src.to(F32)))
    elif src.dtype.is_floating_point and dst.dtype.is_floating_point and dst.dtype.itemsize < src.dtype.itemsize \
            or (src.dtype == F32 and dst.dtype in (torch.float16, torch.bfloat16)):
        dst.copy_(_narrow(src.to(F32), dst.dtype, mode))
    else:
        dst.copy_(src)


def reduce(torch_fn, dim):
    """dst = torch_fn(src, dim) (keepdim): a row (dim 1) or column (dim 0) reduction."""
    def run(dst, srcs, attrs):
        _store(dst, torch_fn(_up(srcs[0]), dim))
    return run


def total(x, d):
    return x.sum(dim=d, keepdim=True)


def product(x, d):
    return x.prod(dim=d, keepdim=True)


def maximum(x, d):
    return x.amax(dim=d, keepdim=True)


def minimum(x, d):
    return x.amin(dim=d, keepdim=True)


def argmax(x, d):
    return x.argmax(dim=d, keepdim=True)


def cumsum(d):
    def run(dst, srcs, attrs):
        _store(dst, torch.cumsum(_up(srcs[0]), dim=d))
    return run


def copy(dst, srcs, attrs):
    dst.copy_(srcs[0])


def transpose(dst, srcs, attrs):
    dst.copy_(srcs[0].transpose(0, 1))


def fill(dst, srcs, attrs):
    dst.fill_(srcs[0])


def arange(dst, srcs, attrs):
    """dst[r, c] = start + (c, or r when attrs['axis'] == 0)."""
    rows, cols = dst.shape
    start = srcs[0]
    if attrs.get("axis", 1) == 0:
        vals = torch.arange(rows, dtype=torch.float64).unsqueeze(1).expand(rows, cols)
    else:
        vals = torch.arange(cols, dtype=torch.float64).unsqueeze(0).expand(rows, cols)
    dst.copy_(vals + start)


def triangle(lower: bool):
    """dst[r, c] = c <= r + diag (lower) or c >= r + diag (upper); diag is the scalar operand."""
    def run(dst, srcs, attrs):
        rows, cols = dst.shape
        r = torch.arange(rows).unsqueeze(1)
        c = torch.arange(cols).unsqueeze(0)
        diag = int(srcs[0]) if srcs else 0
        dst.copy_((c <= r + diag) if lower else (c >= r + diag))
    return run


def matmul(dst, srcs, attrs):
    a, b = srcs
    dst.copy_(torch.matmul(a.to(F32), b.to(F32)) if dst.dtype.is_floating_point
              else torch.matmul(a.to(torch.int64), b.to(torch.int64)))


def matmul_acc(dst, srcs, attrs):
    a, b = srcs
    if dst.dtype.is_floating_point:
        dst.copy_(dst.to(F32) + torch.matmul(a.to(F32), b.to(F32)))
    else:
        dst.copy_(dst.to(torch.int64) + torch.matmul(a.to(torch.int64), b.to(torch.int64)))


def isfinite(x):
    return torch.isfinite(x) if x.dtype.is_floating_point else torch.ones_like(x, dtype=torch.bool)


def remainder(a, b):
    return torch.remainder(a, b)       # sign of the divisor (PTO TREM)


def rpow(src, s):
    return torch.pow(torch.as_tensor(s, dtype=src.dtype), src)


# ---------------------------------------------------------------- operand regions
def _same(v, n):
    r, c = v[0], v[1]
    return ((r, c),) * n


def _rowexpand(v, n):
    r, c = v[0], v[1]
    return ((r, c), (r, c), (r, 1))


def _colexpand(v, n):
    r, c = v[0], v[1]
    return ((r, c), (r, c), (1, c))


def _rowbcast(v, n):
    return ((v[0], v[1]), (v[0], 1))


def _colbcast(v, n):
    return ((v[0], v[1]), (1, v[1]))


def _rowreduce(v, n):
    return ((v[2], 1), (v[2], v[3]))


def _colreduce(v, n):
    return ((1, v[3]), (v[2], v[3]))


def _trans(v, n):
    return ((v[0], v[1]), (v[1], v[0]))


def _fill(v, n):
    return ((v[0], v[1]),)


def _matmul(v, n):
    m, nn, k = v[0], v[1], v[3]
    return ((m, nn), (m, k), (k, nn))


def _move(v, n):
    return ((v[0], v[1]),)


def _indexed(v, n):
    """MGATHER / MSCATTER: the rows tile over its valid shape, the index tile over the same rows."""
    return ((v[0], v[1]), (v[2], v[3]))


REGIONS = {"same": _same, "rowexpand": _rowexpand, "colexpand": _colexpand, "rowbcast": _rowbcast,
           "colbcast": _colbcast, "rowreduce": _rowreduce, "colreduce": _colreduce, "trans": _trans,
           "fill": _fill, "matmul": _matmul, "load": _move, "store": _move,
           "gather": _indexed, "scatter": _indexed}

"""What every PTO instruction computes, on torch tensors: the table ``SEMANTICS`` maps an op name to a
function ``f(dst, srcs, attrs)`` that writes ``dst``.

The caller (functional.py) has already cut every operand to the region the instruction works on
(the destination's valid region; a row/column of it for expand ops; the source's valid region for
reductions), so these functions only say *what* is computed. Dtype behaviour (the hardware's):
floating tiles compute in fp32 and round to the destination dtype once per instruction
(round-to-nearest-even, as ``Tensor.copy_`` does); integer tiles compute in their own integer type
(int64 intermediates, wrapped on the store); reductions accumulate in fp32; matmul multiplies
fp16/bf16 inputs and accumulates in fp32.
"""
from __future__ import annotations

import torch

F32 = torch.float32


def _up(x):
    """A source operand as the compute type: fp32 for floating tiles, int64 for integer tiles."""
    if isinstance(x, torch.Tensor):
        if x.dtype.is_floating_point:
            return x if x.dtype == F32 else x.to(F32)
        if x.dtype == torch.bool:
            return x.to(torch.int64)
        return x.to(torch.int64)
    return x


def _store(dst, value):
    if isinstance(value, torch.Tensor) and not dst.dtype.is_floating_point and value.dtype.is_floating_point:
        value = torch.trunc(value)          # float -> int stores truncate (TCVT chooses its own rounding)
    dst.copy_(value)


def _ew(fn):
    def run(dst, srcs, attrs):
        _store(dst, fn(*[_up(s) for s in srcs]))
    return run


def _scalar(fn):
    """Tile-scalar op: the scalar takes the compute type of the tile (fp32 or integer)."""
    def run(dst, srcs, attrs):
        src, s = _up(srcs[0]), srcs[1]
        if isinstance(src, torch.Tensor) and src.dtype == F32:
            s = float(s)
        _store(dst, fn(src, s))
    return run


def _bitwise(fn):
    def run(dst, srcs, attrs):
        args = [s if s.dtype == torch.bool else s.to(torch.int64) for s in srcs]
        _store(dst, fn(*args))
    return run


_CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def _cmp(dst, srcs, attrs):
    a, b = _up(srcs[0]), srcs[1]
    b = _up(b) if isinstance(b, torch.Tensor) else (float(b) if a.dtype == F32 else b)
    _store(dst, _CMP[attrs.get("cmp", "eq")](a, b))


def _sel(dst, srcs, attrs):
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
               "none": torch.round}


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


def _cvt(dst, srcs, attrs):
    src = srcs[0]
    mode = attrs.get("round", "rint")
    if src.dtype.is_floating_point and not dst.dtype.is_floating_point:
        dst.copy_(ROUND_MODES[mode](src.to(F32)))
    elif src.dtype.is_floating_point and dst.dtype.is_floating_point and dst.dtype.itemsize < src.dtype.itemsize \
            or (src.dtype == F32 and dst.dtype in (torch.float16, torch.bfloat16)):
        dst.copy_(_narrow(src.to(F32), dst.dtype, mode))
    else:
        dst.copy_(src)


def _reduce(torch_fn, dim):
    def run(dst, srcs, attrs):
        _store(dst, torch_fn(_up(srcs[0]), dim))
    return run


def _sum(x, d):
    return x.sum(dim=d, keepdim=True)


def _prod(x, d):
    return x.prod(dim=d, keepdim=True)


def _max(x, d):
    return x.amax(dim=d, keepdim=True)


def _min(x, d):
    return x.amin(dim=d, keepdim=True)


def _argmax(x, d):
    return x.argmax(dim=d, keepdim=True)


def _cumsum(d):
    def run(dst, srcs, attrs):
        _store(dst, torch.cumsum(_up(srcs[0]), dim=d))
    return run


def _copy(dst, srcs, attrs):
    dst.copy_(srcs[0])


def _trans(dst, srcs, attrs):
    dst.copy_(srcs[0].transpose(0, 1))


def _fill(dst, srcs, attrs):
    dst.fill_(srcs[0])


def _arange(dst, srcs, attrs):
    rows, cols = dst.shape
    start = srcs[0]
    if attrs.get("axis", 1) == 0:
        vals = torch.arange(rows, dtype=torch.float64).unsqueeze(1).expand(rows, cols)
    else:
        vals = torch.arange(cols, dtype=torch.float64).unsqueeze(0).expand(rows, cols)
    dst.copy_(vals + start)


def _tri(lower: bool):
    def run(dst, srcs, attrs):
        rows, cols = dst.shape
        r = torch.arange(rows).unsqueeze(1)
        c = torch.arange(cols).unsqueeze(0)
        diag = int(srcs[0]) if srcs else 0
        dst.copy_((c <= r + diag) if lower else (c >= r + diag))
    return run


def _matmul(dst, srcs, attrs):
    a, b = srcs
    dst.copy_(torch.matmul(a.to(F32), b.to(F32)) if dst.dtype.is_floating_point
              else torch.matmul(a.to(torch.int64), b.to(torch.int64)))


def _matmul_acc(dst, srcs, attrs):
    a, b = srcs
    if dst.dtype.is_floating_point:
        dst.copy_(dst.to(F32) + torch.matmul(a.to(F32), b.to(F32)))
    else:
        dst.copy_(dst.to(torch.int64) + torch.matmul(a.to(torch.int64), b.to(torch.int64)))


def _sign(x):
    return torch.sign(x)


def _isfinite(x):
    return torch.isfinite(x) if x.dtype.is_floating_point else torch.ones_like(x, dtype=torch.bool)


def _rem(a, b):
    return torch.remainder(a, b)       # sign of the divisor (PTO TREM)


def _rpow(src, s):
    return torch.pow(torch.as_tensor(s, dtype=src.dtype), src)


SEMANTICS: dict = {
    # binary elementwise
    "TADD": _ew(torch.add), "TSUB": _ew(torch.sub), "TMUL": _ew(torch.mul), "TDIV": _ew(torch.div),
    "TMAX": _ew(torch.maximum), "TMIN": _ew(torch.minimum), "TPOW": _ew(torch.pow), "TREM": _ew(_rem),
    "TAND": _bitwise(torch.bitwise_and), "TOR": _bitwise(torch.bitwise_or),
    # tile-scalar
    "TADDS": _scalar(lambda x, s: x + s), "TSUBS": _scalar(lambda x, s: x - s),
    "TRSUBS": _scalar(lambda x, s: s - x), "TMULS": _scalar(lambda x, s: x * s),
    "TDIVS": _scalar(lambda x, s: x / s), "TRDIVS": _scalar(lambda x, s: s / x),
    "TMAXS": _scalar(lambda x, s: torch.clamp(x, min=s)), "TMINS": _scalar(lambda x, s: torch.clamp(x, max=s)),
    "TPOWS": _scalar(lambda x, s: torch.pow(x, s)), "TRPOWS": _scalar(_rpow),
    # unary
    "TABS": _ew(torch.abs), "TNEG": _ew(torch.neg), "TRELU": _ew(torch.relu),
    "TNOT": _bitwise(torch.bitwise_not), "TMOV_V": _copy,
    "TEXP": _ew(torch.exp), "TLOG": _ew(torch.log), "TSQRT": _ew(torch.sqrt), "TRSQRT": _ew(torch.rsqrt),
    "TRECIP": _ew(torch.reciprocal), "TSIN": _ew(torch.sin), "TCOS": _ew(torch.cos),
    "TTANH": _ew(torch.tanh), "TSIGMOID": _ew(torch.sigmoid), "TERF": _ew(torch.erf),
    "TLOG1P": _ew(torch.log1p), "TEXPM1": _ew(torch.expm1),
    "TFLOOR": _ew(torch.floor), "TCEIL": _ew(torch.ceil), "TROUND": _ew(torch.round),
    "TSIGN": _ew(_sign), "TISFINITE": _ew(_isfinite),
    "TCVT": _cvt,
    # reductions (dst column 0 / row 0)
    "TROWSUM": _reduce(_sum, 1), "TROWMAX": _reduce(_max, 1), "TROWMIN": _reduce(_min, 1),
    "TROWPROD": _reduce(_prod, 1), "TROWARGMAX": _reduce(_argmax, 1),
    "TCOLSUM": _reduce(_sum, 0), "TCOLMAX": _reduce(_max, 0), "TCOLMIN": _reduce(_min, 0),
    "TCOLPROD": _reduce(_prod, 0), "TCOLARGMAX": _reduce(_argmax, 0),
    "TROWCUMSUM": _cumsum(1), "TCOLCUMSUM": _cumsum(0),
    # broadcast of a column (row-expand) or a row (col-expand); srcs arrive already shaped to broadcast
    "TROWEXPANDADD": _ew(torch.add), "TROWEXPANDSUB": _ew(torch.sub), "TROWEXPANDMUL": _ew(torch.mul),
    "TROWEXPANDDIV": _ew(torch.div), "TROWEXPANDMAX": _ew(torch.maximum), "TROWEXPANDMIN": _ew(torch.minimum),
    "TCOLEXPANDADD": _ew(torch.add), "TCOLEXPANDSUB": _ew(torch.sub), "TCOLEXPANDMUL": _ew(torch.mul),
    "TCOLEXPANDDIV": _ew(torch.div), "TCOLEXPANDMAX": _ew(torch.maximum), "TCOLEXPANDMIN": _ew(torch.minimum),
    "TROWEXPAND": _ew(lambda x: x), "TCOLEXPAND": _ew(lambda x: x),
    # generators
    "TEXPANDS": _fill, "TARANGE": _arange, "TTRIL": _tri(True), "TTRIU": _tri(False),
    # compare / select
    "TCMP": _cmp, "TCMPS": _cmp, "TSEL": _sel,
    # moves
    "TMOV": _copy, "TTRANS": _trans,
    # cube
    "TMATMUL": _matmul, "TMATMUL_ACC": _matmul_acc,
}

# How each instruction's operands are cut to its working region (see functional.py):
#   same       every tile operand over the destination's valid region
#   rowexpand  src0 over the region, src1 as a [rows, 1] column
#   colexpand  src0 over the region, src1 as a [1, cols] row
#   rowbcast / colbcast   the single source as a column / row
#   rowreduce / colreduce the source over its own valid region; dst column 0 / row 0
#   trans      the source over the transposed region
#   fill       no tile source
#   matmul     dst [M, N] valid; a [M, K] with K = a's valid columns; b [K, N]
REGION: dict = {}
for _op in SEMANTICS:
    REGION[_op] = "same"
for _op in ("TROWEXPANDADD", "TROWEXPANDSUB", "TROWEXPANDMUL", "TROWEXPANDDIV", "TROWEXPANDMAX", "TROWEXPANDMIN"):
    REGION[_op] = "rowexpand"
for _op in ("TCOLEXPANDADD", "TCOLEXPANDSUB", "TCOLEXPANDMUL", "TCOLEXPANDDIV", "TCOLEXPANDMAX", "TCOLEXPANDMIN"):
    REGION[_op] = "colexpand"
REGION["TROWEXPAND"], REGION["TCOLEXPAND"] = "rowbcast", "colbcast"
for _op in ("TROWSUM", "TROWMAX", "TROWMIN", "TROWPROD", "TROWARGMAX"):
    REGION[_op] = "rowreduce"
for _op in ("TCOLSUM", "TCOLMAX", "TCOLMIN", "TCOLPROD", "TCOLARGMAX"):
    REGION[_op] = "colreduce"
REGION["TTRANS"] = "trans"
for _op in ("TEXPANDS", "TARANGE", "TTRIL", "TTRIU"):
    REGION[_op] = "fill"
REGION["TMATMUL"] = REGION["TMATMUL_ACC"] = "matmul"
REGION["TLOAD"], REGION["TSTORE"] = "load", "store"


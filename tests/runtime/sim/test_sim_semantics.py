"""Every PTO instruction through the simulator, one instruction per kernel, against torch computing the
same thing in fp32 and rounding once to the destination dtype (the hardware's dtype rule)."""
import pytest
import torch

from pypto import dtypes
from pypto.runtime import sim
from pypto.testing.kernels import single_op_kernel

F32, F16, BF16, I32, U8 = dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.uint8
SHAPE = (16, 64)
TAIL = (5, 40)      # a valid region smaller than the tile in both dims


def _inputs(n, dtype, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(SHAPE, generator=g)
        if positive:
            x = x.abs() + 0.5
        out.append(x.to(dtype.torch_dtype))
    return out


def _run(op, ins, dst_dtype, valid=None, scalar=None, attrs=None, dst_shape=None):
    k = single_op_kernel(op, [dtypes.from_torch(x.dtype) for x in ins], dst_dtype, SHAPE, valid=valid,
                         scalar=scalar, attrs=attrs, dst_shape=dst_shape)
    out = torch.zeros(dst_shape or SHAPE, dtype=dst_dtype.torch_dtype)
    args = {f"in{i}": x for i, x in enumerate(ins)} | {"out": out}
    res, report = sim.run_kernel(k, args, {})
    assert report.instructions == len(ins) + 2
    return res["out"]


def _check(got, ref, region, dtype):
    r, c = region
    ref = ref[:r, :c].to(dtype.torch_dtype)
    torch.testing.assert_close(got[:r, :c], ref, rtol=1e-6 if dtype == F32 else 0, atol=1e-6 if dtype == F32 else 0,
                               equal_nan=True)
    # nothing outside the valid region was written
    rest = got.clone()
    rest[:r, :c] = 0
    assert torch.count_nonzero(rest) == 0


BINARY = {"TADD": torch.add, "TSUB": torch.sub, "TMUL": torch.mul, "TDIV": torch.div,
          "TMAX": torch.maximum, "TMIN": torch.minimum}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("valid", [None, TAIL])
def test_binary(op, dtype, valid):
    a, b = _inputs(2, dtype)
    got = _run(op, [a, b], dtype, valid=valid)
    _check(got, BINARY[op](a.float(), b.float()), valid or SHAPE, dtype)


def test_pow_and_rem_fp32():
    a, b = _inputs(2, F32, positive=True)
    _check(_run("TPOW", [a, b], F32), torch.pow(a, b), SHAPE, F32)
    a, b = _inputs(2, F32, seed=3)
    _check(_run("TREM", [a, b], F32), torch.remainder(a, b), SHAPE, F32)


SCALAR = {"TADDS": lambda x, s: x + s, "TSUBS": lambda x, s: x - s, "TRSUBS": lambda x, s: s - x,
          "TMULS": lambda x, s: x * s, "TDIVS": lambda x, s: x / s, "TRDIVS": lambda x, s: s / x,
          "TMAXS": lambda x, s: torch.clamp(x, min=s), "TMINS": lambda x, s: torch.clamp(x, max=s),
          "TPOWS": lambda x, s: x ** s, "TRPOWS": lambda x, s: s ** x}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("op", sorted(SCALAR))
def test_scalar_forms(op, dtype):
    (a,) = _inputs(1, dtype, positive=op in ("TPOWS", "TRDIVS"))
    got = _run(op, [a], dtype, valid=TAIL, scalar=1.5)
    _check(got, SCALAR[op](a.float(), 1.5), TAIL, dtype)


UNARY = {"TABS": torch.abs, "TNEG": torch.neg, "TRELU": torch.relu, "TEXP": torch.exp, "TLOG": torch.log,
         "TSQRT": torch.sqrt, "TRSQRT": torch.rsqrt, "TRECIP": torch.reciprocal, "TSIN": torch.sin,
         "TCOS": torch.cos, "TTANH": torch.tanh, "TSIGMOID": torch.sigmoid, "TERF": torch.erf,
         "TLOG1P": torch.log1p, "TEXPM1": torch.expm1, "TERFC": torch.erfc, "TFLOOR": torch.floor, "TCEIL": torch.ceil,
         "TROUND": torch.round, "TSIGN": torch.sign, "TMOV_V": lambda x: x}
POSITIVE = {"TLOG", "TSQRT", "TRSQRT", "TLOG1P"}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype):
    (a,) = _inputs(1, dtype, positive=op in POSITIVE)
    got = _run(op, [a], dtype, valid=TAIL)
    _check(got, UNARY[op](a.float()), TAIL, dtype)


@pytest.mark.parametrize("src,dst", [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32), (F16, BF16)])
def test_cvt_float(src, dst):
    (a,) = _inputs(1, src)
    got = _run("TCVT", [a * 1000], dst, valid=TAIL)
    _check(got, (a * 1000).to(dst.torch_dtype), TAIL, dst)


VALUES = [0.5, 1.5, 2.5, -0.5, -1.5, 2.7, -2.7, 3.2]


@pytest.mark.parametrize("mode,expect", [("rint", [0, 2, 2, 0, -2, 3, -3, 3]), ("round", [1, 2, 3, -1, -2, 3, -3, 3]),
                                         ("floor", [0, 1, 2, -1, -2, 2, -3, 3]), ("ceil", [1, 2, 3, 0, -1, 3, -2, 4]),
                                         ("trunc", [0, 1, 2, 0, -1, 2, -2, 3]), ("odd", [1, 1, 3, -1, -1, 3, -3, 3])])
def test_cvt_to_int_rounding(mode, expect):
    a = torch.tensor(VALUES * 128).reshape(SHAPE)
    got = _run("TCVT", [a], I32, attrs={"round": mode})
    assert torch.equal(got, torch.tensor(expect * 128, dtype=torch.int32).reshape(SHAPE))


@pytest.mark.parametrize("mode", ["trunc", "floor", "ceil"])
@pytest.mark.parametrize("dst", [F16, BF16])
def test_cvt_narrowing_with_a_rounding_mode(mode, dst):
    (a,) = _inputs(1, F32, seed=7)
    got = _run("TCVT", [a], dst, attrs={"round": mode}).float()
    lo_hi = {"trunc": lambda g: g.abs() <= a.abs(), "floor": lambda g: g <= a, "ceil": lambda g: g >= a}
    assert lo_hi[mode](got).all()
    # and within one ulp of round-to-nearest
    rn = a.to(dst.torch_dtype)
    up, down = (torch.nextafter(rn, torch.full_like(rn, v)).float() for v in (float("inf"), float("-inf")))
    ulp = torch.maximum(up - rn.float(), rn.float() - down)
    assert ((got - rn.float()).abs() <= ulp).all()


def test_cvt_unknown_rounding_is_rejected():
    from pypto.errors import SimError
    (a,) = _inputs(1, F32)
    with pytest.raises(SimError, match="round='sideways' is not one of"):
        _run("TCVT", [a], I32, attrs={"round": "sideways"})


ROW_REDUCE = {"TROWSUM": lambda x: x.sum(1, keepdim=True), "TROWMAX": lambda x: x.amax(1, keepdim=True),
              "TROWMIN": lambda x: x.amin(1, keepdim=True), "TROWPROD": lambda x: x.prod(1, keepdim=True)}
COL_REDUCE = {"TCOLSUM": lambda x: x.sum(0, keepdim=True), "TCOLMAX": lambda x: x.amax(0, keepdim=True),
              "TCOLMIN": lambda x: x.amin(0, keepdim=True), "TCOLPROD": lambda x: x.prod(0, keepdim=True)}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("op", sorted(ROW_REDUCE) + sorted(COL_REDUCE))
def test_reductions_over_the_source_valid_region(op, dtype):
    (a,) = _inputs(1, dtype)
    a = (a.float() * 0.2 + 1).to(dtype.torch_dtype)          # keep products finite
    r, c = TAIL
    row = op in ROW_REDUCE
    dst_shape = (16, 8) if row else (8, 64)
    got = _run(op, [a], dtype, valid=TAIL, dst_shape=dst_shape)
    ref = (ROW_REDUCE if row else COL_REDUCE)[op](a.float()[:r, :c])       # fp32 accumulation
    _check(got, torch.nn.functional.pad(ref, (0, 64, 0, 16)), (r, 1) if row else (1, c), dtype)


def test_argmax_and_cumsum():
    (a,) = _inputs(1, F32)
    got = _run("TROWARGMAX", [a], I32, dst_shape=(16, 8))
    assert torch.equal(got[:, 0], a.argmax(1).to(torch.int32))
    _check(_run("TROWCUMSUM", [a], F32), torch.cumsum(a, 1), SHAPE, F32)
    _check(_run("TCOLCUMSUM", [a], F32), torch.cumsum(a, 0), SHAPE, F32)


EXPAND = {"ADD": torch.add, "SUB": torch.sub, "MUL": torch.mul, "DIV": torch.div, "MAX": torch.maximum,
          "MIN": torch.minimum}


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("kind", sorted(EXPAND))
def test_row_and_col_expand(kind, dtype):
    a, b = _inputs(2, dtype)
    r, c = TAIL
    got = _run(f"TROWEXPAND{kind}", [a, b], dtype, valid=TAIL)
    _check(got, EXPAND[kind](a.float(), b.float()[:, :1]), TAIL, dtype)        # src1's first column
    got = _run(f"TCOLEXPAND{kind}", [a, b], dtype, valid=TAIL)
    _check(got, EXPAND[kind](a.float(), b.float()[:1, :]), TAIL, dtype)        # src1's first row


def test_broadcast_row_and_col():
    (a,) = _inputs(1, F32)
    _check(_run("TROWEXPAND", [a], F32, valid=TAIL), a[:, :1].expand(SHAPE), TAIL, F32)
    _check(_run("TCOLEXPAND", [a], F32, valid=TAIL), a[:1, :].expand(SHAPE), TAIL, F32)


def test_generators():
    r, c = TAIL
    _check(_run("TEXPANDS", [], F16, valid=TAIL, scalar=2.5), torch.full(SHAPE, 2.5), TAIL, F16)
    cols = torch.arange(64).expand(SHAPE).float()
    rows = torch.arange(16).unsqueeze(1).expand(SHAPE).float()
    _check(_run("TARANGE", [], F32, valid=TAIL, scalar=3), cols + 3, TAIL, F32)
    _check(_run("TARANGE", [], F32, valid=TAIL, scalar=3, attrs={"axis": 0}), rows + 3, TAIL, F32)
    _check(_run("TTRIL", [], F32, valid=TAIL, scalar=1), (cols <= rows + 1).float(), TAIL, F32)
    _check(_run("TTRIU", [], F32, valid=TAIL, scalar=-1), (cols >= rows - 1).float(), TAIL, F32)


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_compare_and_select(cmp):
    a, b = _inputs(2, F16)
    b[::2] = a[::2]                                  # some equal elements
    fn = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}[cmp]
    mask = _run("TCMP", [a, b], U8, valid=TAIL, attrs={"cmp": cmp})
    _check(mask, fn(a.float(), b.float()).to(torch.uint8), TAIL, U8)
    mask_s = _run("TCMPS", [a], U8, valid=TAIL, scalar=0.25, attrs={"cmp": cmp})
    _check(mask_s, fn(a.float(), 0.25).to(torch.uint8), TAIL, U8)
    full_mask = fn(a.float(), b.float()).to(torch.uint8)
    got = _run("TSEL", [full_mask, a, b], F16, valid=TAIL)
    _check(got, torch.where(full_mask != 0, a, b).float(), TAIL, F16)


def test_transpose_and_int_bitwise():
    (a,) = _inputs(1, F32)
    r, c = TAIL
    got = _run("TTRANS", [a], F32, valid=TAIL, dst_shape=SHAPE[::-1])
    _check(got, a.t(), (c, r), F32)
    x = torch.randint(0, 1 << 20, SHAPE, dtype=torch.int32)
    y = torch.randint(0, 1 << 20, SHAPE, dtype=torch.int32)
    assert torch.equal(_run("TAND", [x, y], I32), x & y)
    assert torch.equal(_run("TOR", [x, y], I32), x | y)
    assert torch.equal(_run("TNOT", [x], I32), ~x)
    assert torch.equal(_run("TADD", [x, y], I32), x + y)

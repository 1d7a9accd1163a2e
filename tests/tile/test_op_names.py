"""The Tile level calls ops by the op registry's names (pypto/ops/, torch's names; pypto/tile/optable.py reads
them): pt.sum / amax / amin / prod(x, dim), pt.eq ... ge, pt.expand and every one-instruction elementwise op of
the registry compute what torch does; the old spellings (rowsum ... colmin, compare, broadcast_to) still work,
give the same result and warn once per name (PyptoDeprecationWarning at the user's line) naming the new one;
a name pypto.tile does not have is an error at the user's line."""
import importlib
import inspect
import warnings

import pytest
import torch

import pypto
import pypto.tile as pt
from pypto.errors import PyptoDeprecationWarning, ShapeError, TypeMismatchError
from pypto.ops.registry import REGISTRY, ops_of_form
from pypto.tile import api, optable

R, C = 45, 100          # 16 x 64 tiles: a row tail (45 = 2 x 16 + 13) and a column tail (100 = 64 + 36)
GRID = (3, 2)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _reductions(X, RS, RX, RN, RP, CS, CX, CN, CP):
    i, j = pt.program_id(0), pt.program_id(1)
    x = pt.load(X.tile((16, 64))[i, j])
    pt.store(RS.tile((16, 1))[i, j], pt.sum(x, dim=-1))
    pt.store(RX.tile((16, 1))[i, j], pt.amax(x, dim=1))
    pt.store(RN.tile((16, 1))[i, j], x.amin(-1))
    pt.store(RP.tile((16, 1))[i, j], pt.prod(x, dim=-1, keepdim=True))
    pt.store(CS.tile((1, 64))[i, j], x.sum(0))
    pt.store(CX.tile((1, 64))[i, j], pt.amax(x, dim=0))
    pt.store(CN.tile((1, 64))[i, j], pt.amin(x, dim=-2))
    pt.store(CP.tile((1, 64))[i, j], x.prod(dim=0))


def _tiles_of(X, fn):
    """fn(tile) for each 16 x 64 tile of X (its valid part), laid out as the kernel stores them."""
    return [[fn(X[i:i + 16, j:j + 64].float()) for j in range(0, C, 64)] for i in range(0, R, 16)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_by_dim_against_torch(dtype):
    dt = DTYPES[dtype]
    g = torch.Generator().manual_seed(3)
    X = (1 + 0.02 * torch.randn(R, C, generator=g)).to(dt)        # near 1: a product of 64 stays finite
    rows = [torch.empty(R, 2, dtype=dt) for _ in range(4)]
    cols = [torch.empty(3, C, dtype=dt) for _ in range(4)]
    pt.kernel(_reductions, backend="sim")[GRID](X, *rows, *cols)
    tol = dict(rtol=0, atol=0) if dt == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    # sum / prod of 64 values near 1 (about 64 and 1): fp32 within a few ulps; 16-bit outputs round to 2^-8
    acc = dict(rtol=1e-5, atol=1e-5) if dt == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for out, fn in zip(rows, (torch.sum, torch.amax, torch.amin, torch.prod)):
        ref = torch.cat([torch.cat([fn(t, 1, keepdim=True) for t in row], 1) for row in _tiles_of(X, lambda t: t)])
        torch.testing.assert_close(out.float(), ref.to(dt).float(),
                                   **(tol if fn in (torch.amax, torch.amin) else acc))
    for out, fn in zip(cols, (torch.sum, torch.amax, torch.amin, torch.prod)):
        ref = torch.cat([torch.cat([fn(t, 0, keepdim=True) for t in row], 1) for row in _tiles_of(X, lambda t: t)])
        torch.testing.assert_close(out.float(), ref.to(dt).float(),
                                   **(tol if fn in (torch.amax, torch.amin) else acc))


def _compare_expand(X, Y, O):
    i, j = pt.program_id(0), pt.program_id(1)
    x, y = pt.load(X.tile((16, 64))[i, j]), pt.load(Y.tile((16, 64))[i, j])
    code = pt.where(pt.eq(x, y), 1.0, 0.0) + pt.where(pt.ne(x, 0.0), 2.0, 0.0) + \
        pt.where(pt.lt(x, y), 4.0, 0.0) + pt.where(pt.le(1.0, x), 8.0, 0.0) + \
        pt.where(pt.gt(x, y), 16.0, 0.0) + pt.where(pt.ge(y, x), 32.0, 0.0)
    wide = pt.expand(pt.amax(x, dim=-1), (16, 64)) + pt.amin(y, dim=0).expand(16, 64) * 0.0 + \
        pt.expand(pt.amin(y, dim=0), 16, 64)
    pt.store(O.tile((16, 64))[i, j], code * 1000.0 + wide.float())


def _compare_expand_ref(X, Y):
    out = torch.empty(R, C)
    for i in range(0, R, 16):
        for j in range(0, C, 64):
            x, y = X[i:i + 16, j:j + 64].float(), Y[i:i + 16, j:j + 64].float()
            code = (x == y) * 1.0 + (x != 0) * 2.0 + (x < y) * 4.0 + (1 <= x) * 8.0 + (x > y) * 16.0 + (y >= x) * 32.0
            out[i:i + 16, j:j + 64] = code * 1000 + x.amax(1, keepdim=True) + y.amin(0, keepdim=True)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons_and_expand_against_torch(dtype):
    dt = DTYPES[dtype]
    g = torch.Generator().manual_seed(4)
    X = torch.randint(-2, 3, (R, C), generator=g).to(dt)         # small integers: equal pairs are common
    Y = torch.randint(-2, 3, (R, C), generator=g).to(dt)
    O = torch.empty(R, C)
    pt.kernel(_compare_expand, backend="sim")[GRID](X, Y, O)
    torch.testing.assert_close(O, _compare_expand_ref(X, Y), rtol=0, atol=0)


def _elementwise(X, Y, RM, SG, RD, FI):
    i = pt.program_id(0)
    x, y = pt.load(X.tile((16, 64))[i, 0]), pt.load(Y.tile((16, 64))[i, 0])
    pt.store(RM.tile((16, 64))[i, 0], pt.remainder(x, y) + pt.remainder(x, 3.0))
    pt.store(SG.tile((16, 64))[i, 0], pt.sign(x))
    pt.store(RD.tile((16, 64))[i, 0], pt.round(x * 2.5))
    pt.store(FI.tile((16, 64))[i, 0], pt.where(pt.isfinite(pt.log(x)), 1.0, 0.0))


def test_registry_elementwise_ops_new_to_the_tile_level_against_torch():
    """remainder, sign, round, isfinite: the registry's one-instruction ops the Tile level did not have."""
    g = torch.Generator().manual_seed(5)
    X = torch.randn(40, 64, generator=g) * 4
    Y = torch.where(torch.rand(40, 64, generator=g) < 0.5, -1.0, 1.0) * (torch.rand(40, 64, generator=g) + 0.5)
    outs = [torch.empty(40, 64) for _ in range(4)]
    pt.kernel(_elementwise, backend="sim")[(3,)](X, Y, *outs)
    rm, sg, rd, fi = outs
    torch.testing.assert_close(rm, torch.remainder(X, Y) + torch.remainder(X, 3.0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sg, torch.sign(X), rtol=0, atol=0)
    torch.testing.assert_close(rd, torch.round(X * 2.5), rtol=0, atol=0)
    torch.testing.assert_close(fi, torch.isfinite(torch.log(X)).float(), rtol=0, atol=0)


def test_the_tile_op_table_is_read_from_the_registry():
    """Every one-instruction elementwise op of the registry is a pt function of that name running that
    instruction, but logical_and / logical_or (no integer masks at the Tile level); the comparisons are the
    registry's TCMP ops; the reductions are registry ops."""
    for form in ("unary", "binary"):
        for op in ops_of_form(form):
            if op.pto:
                assert callable(getattr(pt, op.name)) and optable.OPS[op.name].pto == op.pto, op.name
    cmp = [op.name for op in ops_of_form("comparison") if op.pto]
    assert sorted(set(cmp) - set(optable.COMPARES)) == ["logical_and", "logical_or"]
    assert all(callable(getattr(pt, n)) for n in optable.COMPARES)
    assert all(n in REGISTRY and callable(getattr(pt, n)) for n in optable.REDUCTIONS)
    for old in api.DEPRECATED:                # kept working, but not the names pypto.tile offers
        assert old not in pt.__all__ and callable(getattr(pt, old))
    # pt.expand stays the op although the lowering module pypto/tile/expand.py has its name
    lowering = importlib.import_module("pypto.tile.expand")
    assert callable(lowering.lower_tile_graph) and pt.expand is api.expand


def _old_names(X, Y, O1, O2, O3):
    i, j = pt.program_id(0), pt.program_id(1)
    x, y = pt.load(X.tile((16, 64))[i, j]), pt.load(Y.tile((16, 64))[i, j])
    s = pt.rowsum(x) + pt.rowmax(y) - pt.rowmin(x)
    pt.store(O1.tile((16, 64))[i, j], pt.broadcast_to(s, (16, 64)) + pt.where(pt.compare(x, y, "lt"), 1.0, 0.0))
    pt.store(O2.tile((1, 64))[i, j], pt.colsum(x) + pt.colmax(y) - pt.colmin(x))
    pt.store(O3.tile((16, 64))[i, j], pt.where(pt.compare(0.5, x, "ge"), x, y))


def _new_names(X, Y, O1, O2, O3):
    i, j = pt.program_id(0), pt.program_id(1)
    x, y = pt.load(X.tile((16, 64))[i, j]), pt.load(Y.tile((16, 64))[i, j])
    s = pt.sum(x, dim=-1) + pt.amax(y, dim=-1) - pt.amin(x, dim=-1)
    pt.store(O1.tile((16, 64))[i, j], pt.expand(s, (16, 64)) + pt.where(pt.lt(x, y), 1.0, 0.0))
    pt.store(O2.tile((1, 64))[i, j], pt.sum(x, dim=0) + pt.amax(y, dim=0) - pt.amin(x, dim=0))
    pt.store(O3.tile((16, 64))[i, j], pt.where(pt.ge(0.5, x), x, y))


def _run(fn, backend, X, Y):
    outs = [torch.empty(R, C), torch.empty(3, C), torch.empty(R, C)]
    pt.kernel(fn, backend=backend)[GRID](X, Y, *outs)
    return outs


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_old_names_warn_once_at_the_user_s_line_and_give_the_same_result(backend, monkeypatch):
    monkeypatch.setattr(api, "_WARNED", set())
    g = torch.Generator().manual_seed(6)
    X, Y = torch.randn(R, C, generator=g), torch.randn(R, C, generator=g)
    new = _run(_new_names, backend, X, Y)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = _run(_old_names, backend, X, Y)
    for a, b in zip(old, new):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    deprecations = [w for w in seen if issubclass(w.category, PyptoDeprecationWarning)]
    said = {str(w.message).split()[0]: w for w in deprecations}
    assert len(deprecations) == len(said) == 8, [str(w.message) for w in deprecations]      # once per name
    src, first = inspect.getsourcelines(_old_names)
    for old_name, new_call in (("rowsum", "pt.sum(x, dim=-1)"), ("colmax", "pt.amax(x, dim=0)"),
                               ("compare", "pt.eq / ne / lt / le / gt / ge (a, b)"),
                               ("broadcast_to", "pt.expand(x, shape)")):
        w = said[f"pt.{old_name}"]
        assert new_call in str(w.message), str(w.message)
        line = next(first + k for k, text in enumerate(src) if f"pt.{old_name}(" in text)
        assert (w.filename, w.lineno) == (__file__, line)
    # a second kernel with the old names: no warning again (once per name)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        _run(_old_names, "reference", X, Y)
    assert not [w for w in again if issubclass(w.category, PyptoDeprecationWarning)]


def test_an_unknown_name_is_an_error_at_the_user_s_line():
    def k(X, O):
        x = pt.load(X.tile((16, 64))[0, 0])
        pt.store(O.tile((16, 1))[0, 0], pt.rowsun(x))

    X, O = torch.randn(16, 64), torch.empty(16, 1)
    line = inspect.getsourcelines(k)[1] + 2
    with pytest.raises(api.UnknownNameError, match=r"pypto.tile has no op 'rowsun'") as e:
        pt.kernel(k, backend="reference")[(1,)](X, O)
    assert f"{__file__}:{line}" in str(e.value) and "pt.sum(x, dim=-1)" in str(e.value)
    assert isinstance(e.value, AttributeError) and not hasattr(pt, "rowsun")

    def m(X, O):
        x = pt.load(X.tile((16, 64))[0, 0])
        pt.store(O.tile((16, 1))[0, 0], x.amaxx(-1))

    with pytest.raises(api.UnknownNameError, match=r"a tile has no method 'amaxx'") as e:
        pt.kernel(m, backend="reference")[(1,)](X, O)
    assert f"{__file__}:{inspect.getsourcelines(m)[1] + 2}" in str(e.value) and "amax" in str(e.value)


@pytest.mark.parametrize("call, error, text", [
    (lambda x: pt.sum(x, dim=2), ShapeError, "pt.sum(dim=2)"),
    (lambda x: pt.amax(x, dim=True), ShapeError, "pt.amax(dim=True)"),
    (lambda x: pt.amin(x, dim=-1, keepdim=False), ShapeError, "keepdim=False"),
    (lambda x: pt.expand(x, (16, 128)), ShapeError, "does not expand to [16, 128]"),
    (lambda x: pt.compare(x, x, "lte"), TypeMismatchError, "cmp is one of eq, ne, lt, le, gt, ge"),
    (lambda x: pt.eq(1.0, 2.0), TypeMismatchError, "pt.eq: expected at least one tile"),
])
def test_bad_arguments_to_the_registry_names_name_the_user_s_line(call, error, text):
    def k(X, O):
        x = pt.load(X.tile((16, 64))[0, 0])
        pt.store(O.tile((16, 64))[0, 0], pt.expand(call(x), (16, 64)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PyptoDeprecationWarning)
        with pytest.raises(error) as e:
            pt.kernel(k, backend="reference")[(1,)](torch.randn(16, 64), torch.empty(16, 64))
    assert text in str(e.value) and f"{__file__}:" in str(e.value)


def test_dynamic_rows_by_the_new_names():
    """A dynamic row count: the reductions' tails follow the run-time size."""
    @pt.kernel(backend="sim")
    def k(X: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], S: pypto.Tensor[[pypto.DYNAMIC, 1], pypto.float32],
          M: pypto.Tensor[[1, 64], pypto.float32]):
        x = pt.load(X.tile((32, 64))[0, 0])
        pt.store(S.tile((32, 1))[0, 0], pt.sum(x, dim=-1))
        pt.store(M.tile((1, 64))[0, 0], pt.amax(x, dim=0))

    for rows in (32, 19):
        X = torch.randn(rows, 64)
        S, M = torch.empty(rows, 1), torch.empty(1, 64)
        k[(1,)](X, S, M)
        torch.testing.assert_close(S, X.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(M, X.amax(0, keepdim=True), rtol=0, atol=0)

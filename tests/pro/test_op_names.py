"""Professional mode calls ops by the op registry's names (pypto/ops/registry.py): the reductions with a dim
(sum, amax, ...), full, where and the comparisons compute what torch does; the old spellings still work,
give the same Block IR and warn (DeprecationWarning at the kernel's line) naming the new spelling."""
import inspect
import re
import warnings

import pytest
import torch

import pypto_pro.language as pl
from pypto.ir.block_printer import print_block
from pypto.ops.registry import REGISTRY
from pypto_pro.language import ops as pl_ops

VEC = pl.MemorySpace.Vec
F32 = pl.DT_FP32
R, C = 16, 64


def registry_names(x: pl.Tensor[[R, C], F32], y: pl.Tensor[[R, C], F32], z: pl.Tensor[[R, C], F32],
                   w: pl.Tensor[[R, C], F32]):
    t = pl.TileType([R, C], F32, VEC)
    xt, yt, zt, wt = (pl.make_tile(t, addr=a) for a in (0x0000, 0x1000, 0x2000, 0x3000))
    mt = pl.make_tile(t, addr=0x4000)
    rs = pl.make_tile(pl.TileType([R, 8], F32, VEC), addr=0x5000)
    cs = pl.make_tile(pl.TileType([8, C], F32, VEC), addr=0x6000)
    with pl.section_vector():
        pl.load_tile(xt, x, [0, 0])
        pl.sum(rs, xt, dim=-1)
        pl.row_expand_sub(yt, xt, rs)                 # y = x - x.sum(1, keepdim=True)
        pl.amax(cs, xt, dim=0)
        pl.col_expand_sub(zt, xt, cs)                 # z = x - x.amax(0, keepdim=True)
        pl.gt(mt, xt, 0.5)
        pl.full(wt, -1.0)
        pl.where(wt, mt, xt, wt)                      # w = where(x > 0.5, x, -1)
        pl.store_tile(y, yt, [0, 0])
        pl.store_tile(z, zt, [0, 0])
        pl.store_tile(w, wt, [0, 0])


def _run(fn):
    x = torch.randn(R, C, dtype=torch.float32)
    outs = [torch.empty_like(x) for _ in range(3)]
    pl.jit(fn, backend="sim")[None, 1](x, *outs)
    return x, outs


def test_registry_names_compute_what_torch_does():
    x, (y, z, w) = _run(registry_names)
    torch.testing.assert_close(y, x - x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, x - x.amax(0, keepdim=True), rtol=0, atol=0)
    torch.testing.assert_close(w, torch.where(x > 0.5, x, torch.tensor(-1.0)), rtol=0, atol=0)


def test_every_name_pl_takes_from_the_registry_is_the_registry_s():
    """Read from the registry, not kept by hand: each registry op whose one instruction pl emits is a pl op of
    that name, but for the bitwise ops (bitwise on pl's integer tiles, so not logical_*)."""
    dsl = {name for name in dir(pl) if isinstance(getattr(pl, name), type(pl.add))}
    for name in (*pl_ops.BY_DIM, *pl_ops.RENAMED, *pl_ops.COMPARISONS):
        assert name in REGISTRY and name in dsl, name
    emitted = {row.isa: name for name, row in pl_ops.OPS.items()}
    unnamed = sorted(op.name for op in REGISTRY.values() if op.pto in emitted and op.name not in dsl)
    assert unnamed == ["logical_and", "logical_or"], unnamed
    assert {emitted["TAND"], emitted["TOR"]} <= set(pl_ops.BITWISE)


def old_spellings(x: pl.Tensor[[R, C], F32], y: pl.Tensor[[R, C], F32], z: pl.Tensor[[R, C], F32],
                  w: pl.Tensor[[R, C], F32]):
    t = pl.TileType([R, C], F32, VEC)
    xt, yt, zt, wt = (pl.make_tile(t, addr=a) for a in (0x0000, 0x1000, 0x2000, 0x3000))
    mt = pl.make_tile(t, addr=0x4000)
    rs = pl.make_tile(pl.TileType([R, 8], F32, VEC), addr=0x5000)
    cs = pl.make_tile(pl.TileType([8, C], F32, VEC), addr=0x6000)
    with pl.section_vector():
        pl.load_tile(xt, x, [0, 0])
        pl.row_sum(rs, xt)
        pl.row_expand_sub(yt, xt, rs)
        pl.col_max(cs, xt)
        pl.col_expand_sub(zt, xt, cs)
        pl.compare(mt, xt, 0.5, "gt")
        pl.fill(wt, -1.0)
        pl.select(wt, mt, xt, wt)
        pl.store_tile(y, yt, [0, 0])
        pl.store_tile(z, zt, [0, 0])
        pl.store_tile(w, wt, [0, 0])


def _ir(fn) -> str:
    x = torch.zeros(R, C)
    text = print_block(pl.jit(fn, backend="sim").compile(x, x, x, x).kernel.blocks[0])
    return re.sub(r"\s*#.*", "", text.replace(fn.__name__, "k"))      # without the source lines


def test_old_spellings_warn_at_the_kernel_line_and_give_the_same_program():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        old = _ir(old_spellings)
    msgs = [(str(w.message), w.filename, w.lineno) for w in got if issubclass(w.category, DeprecationWarning)]
    src, first = inspect.getsourcelines(old_spellings)
    line_of = {name: first + i for i, ln in enumerate(src) for name in ("row_sum", "col_max", "compare", "fill",
                                                                          "select") if f"pl.{name}(" in ln}
    want = {"row_sum": "pl.sum(dst, src, dim=1)", "col_max": "pl.amax(dst, src, dim=0)",
            "compare": "pl.eq / ne / lt / le / gt / ge (dst, a, b)", "fill": "pl.full", "select": "pl.where"}
    for name, new in want.items():
        assert (f"pl.{name} is deprecated: use {new} (the op registry's name)", __file__, line_of[name]) in msgs, msgs
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = _ir(registry_names)                   # the registry's names warn about nothing
    assert old == new


def bad_dim(x: pl.Tensor[[R, C], F32], y: pl.Tensor[[R, C], F32], z: pl.Tensor[[R, C], F32],
            w: pl.Tensor[[R, C], F32]):
    t = pl.TileType([R, C], F32, VEC)
    xt = pl.make_tile(t, addr=0x0000)
    rs = pl.make_tile(pl.TileType([R, 8], F32, VEC), addr=0x5000)
    with pl.section_vector():
        pl.load_tile(xt, x, [0, 0])
        pl.sum(rs, xt, dim=2)


def test_a_dim_a_tile_does_not_have_is_an_error_at_the_user_s_line():
    with pytest.raises(pl.ParseError) as e:
        _ir(bad_dim)
    src, first = inspect.getsourcelines(bad_dim)
    line = first + next(i for i, ln in enumerate(src) if "dim=2" in ln)
    assert f"test_op_names.py:{line}" in str(e.value) and "dim is 1 or -1" in str(e.value), str(e.value)

"""Parser and memory-plan errors: the right class, and the caret under the offending expression."""
import inspect

import pytest
import torch

import pypto_pro.language as pl
from pypto.errors import PyptoError

VEC = pl.MemorySpace.Vec
x16 = torch.zeros(256, 256, dtype=torch.float16)


def _where(fn, marker: str, text: str):
    """(line, 1-based column) of ``text`` on the source line of ``fn`` holding ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if marker in line:
            return first + i, line.index(text) + 1
    raise AssertionError(marker)


def _compile(kernel, *args):
    with pytest.raises(PyptoError) as info:
        kernel.compile(*args)
    return info.value


def _check(err, fn, marker, text, cls=pl.ParseError):
    assert isinstance(err, cls), err
    line, col = _where(fn, marker, text)
    assert (err.span.line, err.span.col + 1) == (line, col), str(err)
    rendered = str(err)
    assert f":{line}:{col}" in rendered and "^" in rendered
    caret_line = rendered.splitlines()[4]
    assert caret_line.index("^") - caret_line.index("|") - 2 == col - 1   # caret under the column


def test_undefined_name_points_at_the_name():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        t = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        with pl.section_vector():
            pl.load_tile(t, x, [0, undefined_thing])  # MARK
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "undefined_thing")
    assert "not defined" in err.message


def test_misspelled_name_gets_a_suggestion():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        tile_a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        with pl.section_vector():
            pl.load_tile(tile_b, x, [0, 0])  # MARK
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "tile_b")
    assert "tile_a" in err.hint


def test_wrong_arity_points_at_the_call():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        c = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x2000)
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
            pl.add(c, a)  # MARK
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "pl.add(")
    assert "missing argument 'b'" in err.message and "pl.add(dst, a, b)" in err.hint


def test_python_range_with_runtime_bound_needs_pl_range():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        with pl.section_vector():
            for i in range(x.shape[0] // 64):  # MARK
                pl.load_tile(a, x, [i, 0])
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "range(")
    assert "pl.range" in err.hint


def test_python_range_with_constant_bound_is_unrolled():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16], y: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        with pl.section_vector():
            for i in range(3):
                pl.load_tile(a, x, [i, 0])
                pl.store_tile(y, a, [i, 0])
    kern = pl.jit(k).compile(x16, x16).kernel
    loads = [i for i in kern.blocks[0].instructions() if i.op == "TLOAD"]
    assert [str(i.operands[1].offsets[0]) for i in loads] == ["0", "64", "128"]


def test_tile_over_capacity_points_at_make_tile():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([128, 128], pl.DT_FP16, VEC), addr=0x2C000)  # MARK
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "pl.make_tile(", cls=pl.MemoryPlanError)
    assert "capacity" in err.message and "0x30000" in err.message


def test_misaligned_address_points_at_the_address():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x10)  # MARK
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "0x10)", cls=pl.MemoryPlanError)
    assert "aligned" in err.message


def test_overlapping_live_tiles_point_at_the_later_declaration():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16], y: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x0000)
        b = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x1000)  # MARK
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
            pl.load_tile(b, x, [1, 0])
            pl.add(a, a, b)
            pl.store_tile(y, a, [0, 0])
    err = _compile(pl.jit(k), x16, x16)
    _check(err, k, "# MARK", "pl.make_tile(", cls=pl.MemoryPlanError)
    assert "overlaps tile 'a'" in err.message


def test_overlapping_tiles_with_disjoint_lives_are_fine():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16], y: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x0000)
        b = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0x1000)
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
            pl.store_tile(y, a, [0, 0])
            pl.load_tile(b, x, [1, 0])
            pl.store_tile(y, b, [1, 0])
    k2 = pl.jit(k)
    x = torch.randn(256, 256, dtype=torch.float16)
    y = torch.zeros_like(x)
    k2[None, 1](x, y)
    torch.testing.assert_close(y[:128, :64], x[:128, :64])


def test_tile_used_in_the_wrong_section():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, pl.MemorySpace.Mat), addr=0)
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])  # MARK
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "a, x")
    assert "section_vector" in err.message


def test_dtype_mismatch_names_both_tiles():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        c = pl.make_tile(pl.TileType([64, 64], pl.DT_FP32, VEC), addr=0x2000)
        with pl.section_vector():
            pl.load_tile(a, x, [0, 0])
            pl.add(c, a, a)  # MARK
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "a, a)")
    assert "pl.cast" in err.hint


def test_loop_carried_scalar_is_refused():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        with pl.section_vector():
            row = 0
            for i in pl.range(4):
                row = row + 1  # MARK
                pl.load_tile(a, x, [row, 0])
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "row =")
    assert "carried" in err.message


def test_op_outside_a_section():
    def k(x: pl.Tensor[[pl.DYNAMIC, pl.DYNAMIC], pl.DT_FP16]):
        a = pl.make_tile(pl.TileType([64, 64], pl.DT_FP16, VEC), addr=0)
        pl.load_tile(a, x, [0, 0])  # MARK
        with pl.section_vector():
            pass
    err = _compile(pl.jit(k), x16)
    _check(err, k, "# MARK", "pl.load_tile(")


def test_calling_a_dsl_function_outside_a_kernel():
    with pytest.raises(pl.ParseError, match="only be used inside a @pl.jit kernel"):
        pl.add(1, 2, 3)


def test_launch_errors():
    def k(x: pl.Tensor[[pl.DYNAMIC, 64], pl.DT_FP16]):
        with pl.section_vector():
            pass
    kern = pl.jit(k)
    with pytest.raises(pl.LaunchError, match="dim 1 must be 64"):
        kern[None, 1](x16)
    with pytest.raises(pl.LaunchError, match="must be float16"):
        kern[None, 1](torch.zeros(4, 64))
    with pytest.raises(pl.LaunchError, match="block_dim"):
        kern[None, 0]
    with pytest.raises(pl.LaunchError, match="launch"):
        kern(x16)

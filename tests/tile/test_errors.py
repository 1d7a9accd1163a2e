"""User mistakes in tile kernels raise pypto errors that name the user's file and line."""
import inspect

import pytest
import torch

import pypto
import pypto.tile as pt
from pypto.errors import DTypeError, PyptoError, ShapeError, TilingError, TypeMismatchError


def _line(fn, marker: str) -> int:
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


def _raises(exc, kernel_fn, marker, *args, grid=(1,), **kw):
    k = pt.kernel(kernel_fn, backend="sim")
    with pytest.raises(exc) as info:
        k[grid](*args, **kw)
    assert info.value.loc is not None and info.value.loc.file == __file__, info.value
    assert info.value.loc.line == _line(kernel_fn, marker), str(info.value)
    return info.value


X = torch.randn(64, 64, dtype=torch.float16)


def test_elementwise_shape_mismatch():
    def k(A, B):
        a = pt.load(A.tile((64, 64))[0, 0])
        b = pt.load(A.tile((32, 64))[0, 0])
        pt.store(B.tile((64, 64))[0, 0], a + b)       # MARK
    e = _raises(ShapeError, k, "MARK", X, torch.empty_like(X))
    assert "do not broadcast" in str(e)


def test_matmul_of_incompatible_tiles():
    def k(A, B):
        a = pt.load(A.tile((64, 32))[0, 0])
        b = pt.load(A.tile((64, 64))[0, 0])
        c = pt.matmul(a, b)                           # MARK
        pt.store(B.tile((64, 64))[0, 0], c)
    e = _raises(ShapeError, k, "MARK", X, torch.empty(64, 64))
    assert "incompatible tiles f16[64, 32] @ f16[64, 64]" in str(e)


def test_matmul_of_int8_and_fp16():
    def k(A, B, C):
        c = pt.matmul(pt.load(A.tile((64, 64))[0, 0]), pt.load(B.tile((64, 64))[0, 0]))   # MARK
        pt.store(C.tile((64, 64))[0, 0], c)
    _raises(DTypeError, k, "MARK", X, torch.ones(64, 64, dtype=torch.int8), torch.empty(64, 64))


def test_tile_over_the_vector_buffer():
    big = torch.randn(256, 512)
    def k(A, B):
        a = pt.load(A.tile((256, 512))[0, 0])         # MARK
        pt.store(B.tile((256, 512))[0, 0], a)
    e = _raises(TilingError, k, "MARK", big, torch.empty_like(big))
    assert "over the 196608-byte UB" in str(e)


def test_matmul_operand_over_l0a():
    a = torch.randn(256, 256, dtype=torch.float16)
    def k(A, C):
        x = pt.load(A.tile((256, 256))[0, 0])
        pt.store(C.tile((256, 256))[0, 0], pt.matmul(x, x))   # MARK
    e = _raises(TilingError, k, "MARK", a, torch.empty(256, 256))
    assert "L0A" in str(e)


def test_working_set_over_capacity_names_a_line():
    """Each tile fits, but the program's tiles together (two copies for double buffering) do not."""
    x = torch.randn(64, 1024)
    def k(A, B):
        a = pt.load(A.tile((32, 1024))[0, 0])
        b = pt.exp(a)                                 # MARK
        c = pt.exp(b) + a + b
        pt.store(B.tile((32, 1024))[0, 0], c)
    k2 = pt.kernel(k, backend="sim")
    with pytest.raises(TilingError) as info:
        k2[(2,)](x, torch.empty_like(x))
    assert "over the 196608-byte ub" in str(info.value) and info.value.loc.file == __file__


def test_store_shape_mismatch():
    def k(A, B):
        a = pt.load(A.tile((64, 64))[0, 0])
        pt.store(B.tile((32, 64))[0, 0], a)           # MARK
    _raises(ShapeError, k, "MARK", X, torch.empty_like(X))


def test_tile_used_after_the_loop_that_computed_it():
    def k(A, B):
        acc = pt.zeros((64, 64))
        for j in pt.range(2):
            t = pt.load(A.tile((64, 64))[0, 0]).float()
            acc = acc + t
        pt.store(B.tile((64, 64))[0, 0], t)           # MARK
    e = _raises(PyptoError, k, "MARK", X, torch.empty_like(X, dtype=torch.float32))
    assert "inside the pt.range loop" in str(e)


def test_carried_tile_changing_dtype():
    def k(A, B):
        acc = pt.zeros((64, 64), pt.float16)
        for j in pt.range(2):                         # MARK
            acc = acc + pt.load(A.tile((64, 64))[0, 0]).float()
        pt.store(B.tile((64, 64))[0, 0], acc)
    _raises(ShapeError, k, "MARK", X, torch.empty_like(X))


def test_loading_a_grid_instead_of_a_tile():
    def k(A, B):
        a = pt.load(A.tile((64, 64)))                 # MARK
        pt.store(B.tile((64, 64))[0, 0], a)
    e = _raises(TypeMismatchError, k, "MARK", X, torch.empty_like(X))
    assert "grid of tiles" in str(e)


def test_wrong_number_of_tile_coordinates():
    def k(A, B):
        a = pt.load(A.tile((64, 64))[0])              # MARK
        pt.store(B.tile((64, 64))[0, 0], a)
    _raises(ShapeError, k, "MARK", X, torch.empty_like(X))


def test_where_needs_a_bool_mask():
    def k(A, B):
        a = pt.load(A.tile((64, 64))[0, 0])
        pt.store(B.tile((64, 64))[0, 0], pt.where(a, a, 0.0))   # MARK
    _raises(DTypeError, k, "MARK", X, torch.empty_like(X))


def test_launch_errors_point_at_the_call():
    @pt.kernel
    def k(A, B):
        pt.store(B.tile((64, 64))[0, 0], pt.load(A.tile((64, 64))[0, 0]))
    with pytest.raises(PyptoError) as info:
        k(X, X)
    assert info.value.loc.line == inspect.currentframe().f_lineno - 1
    with pytest.raises(TypeMismatchError, match="the grid is an int or a tuple of ints"):
        k["x"](X, X)
    with pytest.raises(TypeMismatchError, match="neither a torch tensor nor a hashable constant"):
        k[(1,)](X, [X])


def test_kernel_that_stores_nothing():
    @pt.kernel
    def k(A):
        pt.load(A.tile((64, 64))[0, 0])
    with pytest.raises(PyptoError, match="stores nothing"):
        k[(1,)](X)


def test_dynamic_dims_bind_consistently():
    @pt.kernel(backend="reference")
    def k(A: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float16], B: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float16]):
        pt.store(B.tile((16, 64))[pt.program_id(0), 0], pt.load(A.tile((16, 64))[pt.program_id(0), 0]))
    with pytest.raises(ShapeError, match="dim 1 must be 64"):
        k[(1,)](torch.randn(16, 32).half(), torch.randn(16, 32).half())


def test_a_float_op_on_an_int_tile_names_the_op_as_called():
    def k(A, B):
        a = pt.load(A.tile((64, 64))[0, 0])
        pt.store(B.tile((64, 64))[0, 0], pt.reciprocal(a))   # MARK
    ints = torch.ones(64, 64, dtype=torch.int32)
    e = _raises(DTypeError, k, "MARK", ints, torch.empty_like(ints))
    assert "pt.reciprocal: expected a floating tile, found i32" in str(e)

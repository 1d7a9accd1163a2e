"""Hand-built multi-instruction kernels (double-buffered streaming, softmax and rms_norm rows, a tiled
cube matmul, a cube+vector kernel with cross-core flags) and ExecutionGraphs with loops, run on the
simulator and compared with torch."""
import pytest
import sympy
import torch

from pypto import dtypes
from pypto.errors import DTypeError, PyptoError, ShapeError, SimError
from pypto.ir.execution import Buffer, ExecutionGraph, Loop, Region, Task
from pypto.runtime import sim
from pypto.testing import kernels as S

F32, F16, BF16 = dtypes.float32, dtypes.float16, dtypes.bfloat16
TOL = {F32: dict(rtol=1e-6, atol=1e-6), F16: dict(rtol=1e-3, atol=1e-3), BF16: dict(rtol=8e-3, atol=8e-3)}


def _rand(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype.torch_dtype)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("rows,block_dim,buffers", [(100, 3, 2), (64, 1, 1), (7, 4, 2)])
def test_vector_add_double_buffered(dtype, rows, block_dim, buffers):
    k = S.vector_add_kernel(rows, 64, 16, dtype, buffers=buffers)
    x, y = _rand(rows, 64, dtype=dtype), _rand(rows, 64, dtype=dtype, seed=1)
    out, rep = sim.run_kernel(k, {"x": x, "y": y, "z": torch.empty(rows, 64, dtype=dtype.torch_dtype)}, {},
                              block_dim=block_dim)
    assert torch.equal(out["z"], (x.float() + y.float()).to(dtype.torch_dtype))
    assert rep.cycles > 0 and rep.blocks == block_dim


def test_dynamic_rows_one_compile_many_sizes():
    R = sympy.Symbol("R", integer=True, positive=True)
    k = S.vector_add_kernel(R, 32, 8, F16)
    for rows in (1, 8, 13, 40):
        x, y = _rand(rows, 32, dtype=F16), _rand(rows, 32, dtype=F16, seed=2)
        out, _ = sim.run_kernel(k, {"x": x, "y": y, "z": torch.empty(rows, 32, dtype=torch.float16)}, {},
                                block_dim=2)
        assert torch.equal(out["z"], x + y)


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_softmax_rows(dtype):
    x = _rand(37, 256, dtype=dtype)
    k = S.softmax_kernel(37, 256, 4, dtype)
    out, _ = sim.run_kernel(k, {"x": x, "y": torch.empty_like(x)}, {}, block_dim=4)
    ref = torch.softmax(x.float(), -1).to(dtype.torch_dtype)
    torch.testing.assert_close(out["y"], ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_rms_norm_rows(dtype):
    x, w = _rand(21, 128, dtype=dtype), _rand(1, 128, dtype=dtype, seed=5)
    k = S.rms_norm_kernel(21, 128, 8, dtype)
    out, _ = sim.run_kernel(k, {"x": x, "w": w, "y": torch.empty_like(x)}, {}, block_dim=2)
    xf = x.float()
    ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(dtype.torch_dtype)
    torch.testing.assert_close(out["y"], ref, **TOL[dtype])


@pytest.mark.parametrize("dtype,out_dtype", [(F16, F32), (BF16, F32), (F16, F16)])
@pytest.mark.parametrize("m,n,k,block_dim", [(64, 64, 64, 1), (200, 150, 130, 5), (33, 17, 300, 2)])
def test_matmul_cube_tiles_k_accumulation(dtype, out_dtype, m, n, k, block_dim):
    a, b = _rand(m, k, dtype=dtype), _rand(k, n, dtype=dtype, seed=1)
    kern = S.matmul_kernel(m, n, k, 64, 64, 32, dtype, out_dtype)
    out, rep = sim.run_kernel(kern, {"a": a, "b": b, "c_out": torch.empty(m, n, dtype=out_dtype.torch_dtype)}, {},
                              block_dim=block_dim)
    ref = (a.float() @ b.float()).to(out_dtype.torch_dtype)
    tol = dict(rtol=1e-5, atol=1e-4) if out_dtype == F32 else TOL[F16]
    torch.testing.assert_close(out["c_out"], ref, **tol)
    assert rep.cube_flops == 2 * m * n * k


def test_cube_and_vector_with_cross_core_flags():
    m, n, k = 200, 150, 130
    a, b = _rand(m, k, dtype=F16), _rand(k, n, dtype=F16, seed=1)
    kern = S.matmul_relu_kernel(m, n, k, 64, 64, 32)
    out, rep = sim.run_kernel(kern, {"a": a, "b": b, "ws": torch.empty(m, n),
                                     "out": torch.empty(m, n, dtype=torch.float16)}, {}, block_dim=3)
    ref = torch.relu(a.float() @ b.float()).half()
    torch.testing.assert_close(out["out"], ref, rtol=1e-3, atol=1e-3)
    assert set(rep.utilization) == {"AIC", "AIV"}


def _vadd_graph(rows_sym, chunk):
    """z = (x + y) + y over row chunks in a Loop with a run-time trip count: two dependent tasks per chunk."""
    kern = S.vector_add_kernel(chunk, 32, 8, F32)
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    n = sympy.ceiling(rows_sym / chunk)
    bufs = {"x": Buffer("x", (rows_sym, 32), F32, "input"), "y": Buffer("y", (rows_sym, 32), F32, "input"),
            "t": Buffer("t", (rows_sym, 32), F32, "workspace"), "z": Buffer("z", (rows_sym, 32), F32, "output")}
    # each chunk's kernel sees a [chunk, 32] view of the buffers
    for name in list(bufs):
        bufs[f"{name}_c"] = Buffer(f"{name}_c", (chunk, 32), F32, "workspace", view_of=name, view_offset=i * chunk * 32)
    region = lambda b: [Region(b, (i * chunk, 0), (chunk, 32))]
    t1 = Task("vadd", {"x": "x_c", "y": "y_c", "z": "t_c"}, {}, 1, reads=region("x") + region("y"),
              writes=region("t"), name="add1")
    t2 = Task("vadd", {"x": "t_c", "y": "y_c", "z": "z_c"}, {}, 1, reads=region("t") + region("y"),
              writes=region("z"), name="add2")
    return ExecutionGraph({"vadd": kern}, bufs, ["x", "y"], ["z"], [Loop(i, 0, n, 1, [t1, t2])],
                          symbols=[rows_sym])


def test_execution_graph_loop_with_views_and_dependencies():
    R = sympy.Symbol("R", integer=True, positive=True)
    g = _vadd_graph(R, 16)
    x, y = _rand(64, 32), _rand(64, 32, seed=1)
    for policy in ("fifo", "locality"):
        out, rep = sim.run(g, {"x": x, "y": y}, {}, policy=policy)
        torch.testing.assert_close(out["z"], x + y + y)
        assert rep.tasks == 8 and list(out) == ["z"]


def test_outputs_written_in_place_and_non_contiguous():
    x, y = _rand(16, 32), _rand(16, 32, seed=1)
    k = S.vector_add_kernel(16, 32, 8, F32)
    z = torch.zeros(32, 16).t()                      # non-contiguous
    out, _ = sim.run_kernel(k, {"x": x, "y": y, "z": z}, {})
    assert out["z"] is z and torch.equal(z, x + y)


def test_bad_arguments_raise():
    k = S.vector_add_kernel(16, 32, 8, F32)
    x = _rand(16, 32)
    with pytest.raises(DTypeError, match="float16"):
        sim.run_kernel(k, {"x": x.half(), "y": x, "z": torch.empty(16, 32)}, {})
    g = _vadd_graph(sympy.Symbol("R", integer=True, positive=True), 16)
    with pytest.raises(PyptoError, match="no argument"):
        sim.run(g, {"x": _rand(32, 32)}, {})
    with pytest.raises(ShapeError, match="size R is 32"):
        sim.run(g, {"x": _rand(32, 32), "y": _rand(48, 32)}, {})


def test_constant_buffers_carry_their_data():
    k = S.vector_add_kernel(16, 32, 8, F32)
    w = _rand(16, 32, seed=3)
    bufs = {"x": Buffer("x", (16, 32), F32, "input"), "w": Buffer("w", (16, 32), F32, "constant", data=w),
            "z": Buffer("z", (16, 32), F32, "output")}
    g = ExecutionGraph({"vadd": k}, bufs, ["x"], ["z"], [Task("vadd", {"x": "x", "y": "w", "z": "z"})])
    x = _rand(16, 32)
    out, _ = sim.run(g, {"x": x}, {})
    assert torch.equal(out["z"], x + w)

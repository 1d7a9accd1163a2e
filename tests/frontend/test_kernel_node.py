"""Kernels as graph nodes (pypto/ir/kernel_node.py): a pl.jit and a pt.kernel launched with pypto Tensors
inside pypto.jit, between Tensor-level ops, on sim, cpu and reference, against torch; dtypes, a dynamic
size with a tail, a kernel called twice (the second call reads the first's result), bad arguments."""
import inspect

import pytest
import torch

import pypto
import pypto.tile as pt
import pypto_pro.language as pl
from pypto.errors import DTypeError, ShapeError

BACKENDS = ("sim", "cpu", "reference")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _rel(out, ref) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


# ---------------------------------------------------------------- a pl kernel: z = 2 x + y, 64 x 128 tiles
def _axpy_body(x: pl.Tensor[[pl.DYNAMIC, 128], None], y: pl.Tensor[[pl.DYNAMIC, 128], None],
               z: pl.Tensor[[pl.DYNAMIC, 128], None], DT=None):
    t = pl.TileType(shape=[64, 128], dtype=DT, target_memory=pl.MemorySpace.Vec)
    a_db = pl.make_tile_group(type=t, addrs=0x0000, mutex_ids=[0, 1])
    b_db = pl.make_tile_group(type=t, addrs=0x10000, mutex_ids=[2, 3])
    c_db = pl.make_tile_group(type=t, addrs=0x20000, mutex_ids=[4, 5])
    with pl.section_vector():
        for i in pl.range(pl.get_block_idx(), (x.shape[0] + 63) // 64, pl.get_block_num()):
            a, b, c = a_db.next(), b_db.next(), c_db.next()
            pl.load_tile(a, x, [i, 0])
            pl.load_tile(b, y, [i, 0])
            pl.mul(a, a, 2.0)
            pl.add(c, a, b)
            pl.store_tile(z, c, [i, 0])


def _axpy_ref(x, y, z, DT=None):
    z.copy_((x.float() * 2 + y.float()).to(z.dtype))


axpy = pl.jit(_axpy_body, reference=_axpy_ref, name="axpy")
PL_DT = {torch.float32: pl.DT_FP32, torch.float16: pl.DT_FP16, torch.bfloat16: pl.DT_BF16}


def _pl_fn(backend, dt):
    pdt = pypto.dtypes.from_torch(dt)

    def f(x: pypto.Tensor[[pypto.DYNAMIC, 128], pdt], y: pypto.Tensor[[pypto.DYNAMIC, 128], pdt]):
        a = pypto.exp(x)                                  # Tensor-level op before ...
        z = pypto.zeros(x.shape[0], 128, dtype=pdt)
        axpy[None, 4](a, y, z, DT=PL_DT[dt])               # ... the kernel, writing z ...
        w = axpy[None, 2](z, y, pypto.zeros(x.shape[0], 128, dtype=pdt), DT=PL_DT[dt])   # ... again, reading z
        return z, w * 0.5                                 # ... and one after
    return pypto.jit(f, backend=backend)


def _pl_want(x, y):
    z = (x.float().exp().to(x.dtype).float() * 2 + y.float()).to(x.dtype)
    w = (z.float() * 2 + y.float()).to(x.dtype)
    return z, (w.float() * 0.5).to(x.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", [torch.float32, torch.float16])
def test_pl_kernel_between_tensor_ops(backend, dt):
    f = _pl_fn(backend, dt)
    gen = torch.Generator().manual_seed(0)
    for rows in (200, 64):                            # a tail (200 = 3 x 64 + 8), then another size: one trace
        x = torch.randn(rows, 128, generator=gen).to(dt)
        y = torch.randn(rows, 128, generator=gen).to(dt)
        z, w = f(x, y)
        rz, rw = _pl_want(x, y)
        assert z.dtype == dt and z.shape == (rows, 128)
        assert _rel(z, rz) <= TOL[dt], (rows, _rel(z, rz))
        assert _rel(w, rw) <= TOL[dt], (rows, _rel(w, rw))
    assert f.trace_count == 1


def test_pl_node_is_one_task_per_call_ordered_after_its_producer():
    f = _pl_fn("sim", torch.float32)
    x, y = torch.randn(130, 128), torch.randn(130, 128)
    f(x, y)
    g = f.trace(x, y)
    assert [g.op(n) for n in g.nodes()].count("custom_kernel") == 2
    from pypto.passes.pipeline import lower
    eg = lower(g)
    tasks = [t for t in eg.tasks() if eg.kernels[t.kernel].attrs.get("prebuilt")]
    assert len(tasks) == 2 and tasks[0].kernel == tasks[1].kernel          # one kernel, two launches
    # the second launch reads the buffer the first wrote: the runtime's dependency model orders them
    assert tasks[1].gm_args["x"] == tasks[0].gm_args["z"]
    assert tasks[0].block_dim == 4 and tasks[1].block_dim == 2


# ---------------------------------------------------------------- a pt kernel: row-wise layer norm
@pt.kernel
def layer_norm(X: pypto.Tensor[[pypto.DYNAMIC, 256], None], W, B, Y: pypto.Tensor[[pypto.DYNAMIC, 256], None],
               BR: int = 16, eps: float = 1e-5):
    n = X.shape[1]
    i = pt.program_id(0)
    x = pt.load(X.tile((BR, n))[i, 0]).float()
    mean = pt.sum(x, dim=-1) / n
    xc = x - mean
    var = pt.sum(xc * xc, dim=-1) / n
    w = pt.load(W.tile((n,))[0]).float()
    b = pt.load(B.tile((n,))[0]).float()
    pt.store(Y.tile((BR, n))[i, 0], (xc * pt.rsqrt(var + eps) * w + b).to(Y.dtype))


def _pt_fn(backend, dt):
    pdt = pypto.dtypes.from_torch(dt)

    def f(x: pypto.Tensor[[pypto.DYNAMIC, 256], pdt], w: pypto.Tensor[[256], pdt], b: pypto.Tensor[[256], pdt]):
        y = pypto.zeros(x.shape[0], 256, dtype=pdt)
        layer_norm[(pt.cdiv(x.shape[0], 16),)](x * 2.0, w, b, y)        # the grid: a run-time size
        y2 = layer_norm[(pt.cdiv(x.shape[0], 16),)](y + 1.0, w, b, pypto.zeros(x.shape[0], 256, dtype=pdt))
        return y2 - 1.0
    return pypto.jit(f, backend=backend)


def _ln(x, w, b):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_pt_kernel_called_twice_between_tensor_ops(backend, dt):
    f = _pt_fn(backend, dt)
    gen = torch.Generator().manual_seed(1)
    w, b = torch.randn(256, generator=gen).to(dt), torch.randn(256, generator=gen).to(dt)
    for rows in (100, 37):                           # tails of the 16-row blocks, one trace
        x = torch.randn(rows, 256, generator=gen).to(dt)
        out = f(x, w, b)
        y1 = _ln((x.float() * 2).to(dt), w, b)
        want = (_ln((y1.float() + 1).to(dt), w, b).float() - 1).to(dt)
        assert out.dtype == dt and out.shape == (rows, 256)
        assert _rel(out, want) <= TOL[dt] * 2, (rows, _rel(out, want))
    assert f.trace_count == 1


def test_pt_node_called_twice_is_one_kernel_compiled_once():
    """Two launches of one pt kernel signature share its compiled Block IR: one kernel of the
    ExecutionGraph, two tasks (a compile per call site and a kernel per launch before)."""
    f = _pt_fn("sim", torch.float32)
    x, w, b = torch.randn(100, 256), torch.randn(256), torch.randn(256)
    from pypto.passes.pipeline import lower
    eg = lower(f.trace(x, w, b))
    tasks = [t for t in eg.tasks() if eg.kernels[t.kernel].attrs.get("prebuilt")]
    assert len(tasks) == 2 and tasks[0].kernel == tasks[1].kernel
    assert [n for n, k in eg.kernels.items() if k.attrs.get("prebuilt")] == ["layer_norm"]


# ---------------------------------------------------------------- bad input names the user's line
def _line_of(fn, text):
    src, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(src) if text in line)


def test_wrong_dtype_names_the_call():
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32]):
        z = pypto.zeros(x.shape[0], 128)
        axpy_f16[None, 2](x, x, z)                       # the kernel declares fp16
        return z
    axpy_f16 = pl.jit(_f16_body, name="axpy_f16")
    with pytest.raises(DTypeError) as e:
        pypto.jit(f, backend="reference")(torch.randn(64, 128))
    assert "must be fp16" in str(e.value) or "float16" in str(e.value)
    assert e.value.loc.line == _line_of(f, "axpy_f16[None, 2]") and e.value.loc.file == __file__


def _f16_body(x: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP16], y: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP16],
              z: pl.Tensor[[pl.DYNAMIC, 128], pl.DT_FP16]):
    with pl.section_vector():
        pass


def test_wrong_shape_names_the_call():
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        z = pypto.zeros(x.shape[0], 64)
        axpy[None, 2](x, x, z, DT=pl.DT_FP32)            # the kernel takes 128 columns
        return z
    with pytest.raises(ShapeError) as e:
        pypto.jit(f, backend="reference")(torch.randn(64, 64))
    assert "dim 1 must be 128" in str(e.value)
    assert e.value.loc.line == _line_of(f, "axpy[None, 2]")


@pt.kernel
def static_ln(X, W, B, Y):                           # no annotations: every dim is specialised
    pt.store(Y.tile((16, 256))[pt.program_id(0), 0], pt.load(X.tile((16, 256))[pt.program_id(0), 0]))


def test_dynamic_dim_where_the_kernel_is_static_names_the_call():
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 256], pypto.float32], w: pypto.Tensor[[256], pypto.float32]):
        y = pypto.zeros(x.shape[0], 256)
        static_ln[(4,)](x, w, w, y)
        return y
    with pytest.raises(ShapeError) as e:
        pypto.jit(f, backend="reference")(torch.randn(64, 256), torch.randn(256))
    assert "run-time size" in str(e.value) and "static" in str(e.value)
    assert e.value.loc.line == _line_of(f, "static_ln[(4,)]")


@pytest.mark.parametrize("backend", BACKENDS)
def test_pl_kernel_inside_a_loop(backend):
    """A node in a pypto.loop body: one task per iteration, each reading the previous iteration's result."""
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32], y: pypto.Tensor[[pypto.DYNAMIC, 128], pypto.float32]):
        acc = x * 1.0
        for _ in pypto.loop(3):
            nxt = pypto.zeros(x.shape[0], 128)
            axpy[None, 2](acc, y, nxt, DT=pl.DT_FP32)
            acc[:, :] = nxt
        return acc
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(100, 128, generator=gen), torch.randn(100, 128, generator=gen)
    want = x.clone()
    for _ in range(3):
        want = 2 * want + y
    assert _rel(pypto.jit(f, backend=backend)(x, y), want) <= 1e-6

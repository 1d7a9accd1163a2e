"""CANN PyPTO 0.2.0's Tensor-level names with CANN's meaning (issue 16 item 3), each against torch on
sim (and on cpu where it builds kernels), with tails and dynamic sizes. Our own programs, written from
the documented behaviour of each name; the published examples themselves run in test_cann_examples.py."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as TF

import pypto
import pypto.nn.functional as F
from pypto.errors import DTypeError, ShapeError, TilingError, UnsupportedOpError
from pypto.frontend import cann, hints

DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def _no_hint_left():
    hints.reset_tile_shapes()
    yield
    hints.reset_tile_shapes()


def close(got, want, dtype=torch.float32, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


# ------------------------------------------------------------------ the decorator and run modes
def test_frontend_jit_is_the_decorator_and_the_module(caplog):
    import pypto.frontend.jit as jit_module          # the package's modules still import it as a module
    assert jit_module.JitFunction is pypto.JitFunction
    assert pypto.jit is jit_module.jit

    @pypto.frontend.jit
    def bare(x: pypto.Tensor([], pypto.DT_FP32)):
        return x + 1.0

    with caplog.at_level(logging.INFO, logger="pypto.cann"):
        @pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.NPU, "cann_only_knob": 7},
                            pass_options={"enable_slice": True})
        def with_options(x: pypto.Tensor([], pypto.DT_FP32)):
            return x * 3.0

    x = torch.randn(5, 40)
    close(bare(x), x + 1)
    close(with_options(x), x * 3)
    assert isinstance(bare, pypto.JitFunction) and isinstance(with_options, pypto.JitFunction)
    ignored = cann.ignored_options()
    assert ignored[("runtime_options", "run_mode")] == pypto.RunMode.NPU
    assert ignored[("runtime_options", "cann_only_knob")] == 7
    assert ("pass_options", "enable_slice") in ignored
    assert "cann_only_knob" in caplog.text and "ignored" in caplog.text
    assert [int(m) for m in pypto.RunMode] == [0, 1] and pypto.RunMode.SIM.name == "SIM"


def test_jit_keeps_its_own_options_beside_cann_ones():
    @pypto.frontend.jit(backend="cpu", runtime_options={"run_mode": pypto.RunMode.SIM})
    def f(x: pypto.Tensor([], pypto.DT_FP32)):
        return x - 2.0
    x = torch.randn(3, 64)
    close(f(x), x - 2)
    assert f.backend == "cpu"


def test_option_setters_are_accepted_and_listed_as_ignored():
    pypto.set_pass_options(vec_nbuffer_setting={-1: 2}, enable_slice=False)
    pypto.set_host_options(compile_stage=1)
    pypto.set_codegen_options(support_dynamic_aligned=True)
    pypto.set_runtime_options(device_sched_parallelism=8)
    pypto.set_verify_options(enable_pass_verify=True)
    pypto.set_debug_options(runtime_debug_mode=1)
    assert pypto.get_pass_options()["vec_nbuffer_setting"] == {-1: 2}
    assert pypto.get_runtime_options()["device_sched_parallelism"] == 8
    with pytest.raises(pypto.PyptoError, match="must be a dict"):
        cann.note_ignored("pass_options", [1, 2])


def test_options_scope_sets_the_tile_hint_of_what_it_traces_and_restores_it():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([], pypto.DT_FP32)):
        return pypto.exp(x)

    @pypto.options(pass_options={"enable_slice": True}, vec_tile_shapes=[8, 64])
    def call(x):
        return f(x)

    x = torch.randn(20, 130)
    close(call(x), torch.exp(x))
    (node,) = [f.trace(x).node(n) for n in f.trace(x).nodes() if f.trace(x).op(n) == "exp"]
    assert node["attrs"]["vec_tile"] == (8, 64)
    assert pypto.get_vec_tile_shapes() is None          # the scope's hint is gone after it
    with pypto.options(vec_tile_shapes=[4, 32]):
        assert pypto.get_vec_tile_shapes() == (4, 32)
    assert pypto.get_vec_tile_shapes() is None


# ------------------------------------------------------------------ annotations
@pytest.mark.parametrize("shape", [(7,), (5, 33), (2, 3, 40)])
def test_empty_shape_annotation_means_any_shape(shape):
    @pypto.frontend.jit
    def f(x: pypto.Tensor([], pypto.DT_FP32), y: pypto.Tensor(), out: pypto.Tensor[...]):
        out[:] = x * y + 1.0

    x, y = torch.randn(shape), torch.randn(shape)
    out = torch.empty(shape)
    f(x, y, out)
    close(out, x * y + 1)


def test_any_shape_annotation_checks_its_dtype_and_specialises_each_shape():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([], pypto.DT_FP16)):
        return x * 2.0
    with pytest.raises(DTypeError, match="must be f16|must be float16|fp16|f16"):
        f(torch.randn(4, 32))
    for rows in (3, 9):
        x = torch.randn(rows, 32, dtype=torch.float16)
        close(f(x), x * 2, torch.float16)
    assert f.trace_count == 2                         # each dim static: one trace per shape
    assert repr(pypto.Tensor([], pypto.DT_FP16)).startswith("pypto.Tensor[[...]")


def test_dynamic_then_ellipsis_annotation():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32), w: pypto.Tensor[[...], pypto.DT_FP32]):
        return x * w
    w = torch.randn(48)
    for rows in (1, 17, 64):
        x = torch.randn(rows, 48)
        close(f(x, w), x * w)
    assert f.trace_count == 1                         # the first dim is dynamic, the rest static
    x3 = torch.randn(5, 2, 48)
    close(f(x3, w), x3 * w)
    assert f.trace_count == 2
    with pytest.raises(pypto.TypeMismatchError, match="at most one"):
        pypto.Tensor([Ellipsis, 4, Ellipsis], pypto.DT_FP32)


# ------------------------------------------------------------------ tensors and writes
@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_tensor_and_move(backend):
    @pypto.frontend.jit(backend=backend)
    def f(a: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), out: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(16, 64)
        acc = pypto.tensor([2, 64], pypto.DT_FP32)       # a new tensor, assembled into
        pypto.assemble(a[0:2, :] * 2.0, [0, 0], acc)
        out.move(a + acc.sum(0, keepdim=True))

    for rows in (2, 37):
        a, out = torch.randn(rows, 64), torch.empty(rows, 64)
        f(a, out)
        close(out, a + (a[0:2] * 2).sum(0, keepdim=True), scale=10)


def test_move_needs_the_target_shape_and_dtype():
    @pypto.frontend.jit
    def f(a: pypto.Tensor([], pypto.DT_FP32), out: pypto.Tensor([], pypto.DT_FP32)):
        out.move(a.sum(0))
    with pytest.raises(ShapeError, match="move") as e:
        f(torch.randn(4, 32), torch.empty(4, 32))
    assert "test_cann_api.py" in str(e.value)


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_size_min_max_methods_and_python_min_in_tail_loops(backend):
    @pypto.frontend.jit(backend=backend)
    def f(x: pypto.Tensor([pypto.DYNAMIC, 128], pypto.DT_FP16), out: pypto.Tensor([pypto.DYNAMIC, 128], pypto.DT_FP16)):
        n = x.shape[0]
        pypto.set_vec_tile_shapes(16, 128)
        for i in pypto.loop((n + 15) // 16):
            start = i * 16
            end = min(start + 16, n)                      # Python's min of sizes: a symbolic min
            rows = (n - start).min(16)                    # CANN's SymbolicScalar.min
            tile = pypto.view(x, [16, 128], [start, 0], valid_shape=[end - start, 128])
            other = pypto.view(x, [16, 128], [start, 0], valid_shape=[rows, 128])
            pypto.assemble(tile * 2.0 + other, [start, 0], out)

    for n in (16, 45, 3):
        x, out = torch.randn(n, 128, dtype=torch.float16), torch.empty(n, 128, dtype=torch.float16)
        f(x, out)
        close(out, x * 3, torch.float16)
    assert f.trace_count == 1
    assert min(3, 5) == 3 and max([1, 4]) == 4 and min("ab", "b") == "ab"   # Python's own, outside a trace
    import sympy
    assert not hasattr(sympy.Symbol("a"), "min")     # SymbolicScalar's .min lives only in a trace (test_cann_scope)


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_reshape_and_full_with_valid_shape(backend):
    @pypto.frontend.jit(backend=backend)
    def f(x: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), out: pypto.Tensor([pypto.DYNAMIC, 1, 64], pypto.DT_FP32)):
        n = x.shape[0]
        for i in pypto.loop((n + 7) // 8):
            rows = (n - i * 8).min(8)
            tile = pypto.view(x, [8, 64], [i * 8, 0], valid_shape=[rows, 64])
            r3 = pypto.reshape(tile, [8, 1, 64], valid_shape=[rows, 1, 64])
            ones = pypto.full(size=[8, 1, 64], fill_value=0.5, dtype=pypto.DT_FP32, valid_shape=[rows, 1, 64])
            pypto.assemble(r3 + ones, [i * 8, 0, 0], out)

    for n in (8, 21):
        x, out = torch.randn(n, 64), torch.empty(n, 1, 64)
        f(x, out)
        close(out, x.reshape(n, 1, 64) + 0.5)
    assert f.trace_count == 1


def test_valid_shape_errors():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([], pypto.DT_FP32)):
        return pypto.reshape(x, [4, 8], valid_shape=[5, 8])
    with pytest.raises(ShapeError, match="valid_shape"):
        f(torch.randn(32))

    @pypto.frontend.jit
    def g(x: pypto.Tensor([], pypto.DT_FP32)):
        return x + pypto.full(size=[4], fill_value=1.0, dtype=pypto.DT_FP32, valid_shape=[4, 1])
    with pytest.raises(ShapeError, match="one entry per dim"):
        g(torch.randn(4))


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize("backend,dtype", [("sim", "fp32"), ("sim", "bf16"), ("cpu", "fp16")])
def test_matmul_bias_tensor(backend, dtype):
    dt = DT[dtype]

    @pypto.frontend.jit(backend=backend)
    def f(a: pypto.Tensor([pypto.DYNAMIC, 64], dt), b: pypto.Tensor([], dt), bias: pypto.Tensor([], dt),
          out: pypto.Tensor([pypto.DYNAMIC, 48], pypto.DT_FP32)):
        out[:] = pypto.matmul(a, b, pypto.DT_FP32, extend_params={"bias_tensor": bias})

    b, bias = torch.randn(64, 48, dtype=dt), torch.randn(1, 48, dtype=dt)
    for m in (16, 37):
        a, out = torch.randn(m, 64, dtype=dt), torch.empty(m, 48)
        f(a, b, bias, out)
        close(out, a.float() @ b.float() + bias.float(), dt, scale=20)


def test_matmul_refuses_what_it_does_not_model():
    @pypto.frontend.jit
    def f(a: pypto.Tensor([], pypto.DT_FP32), b: pypto.Tensor([], pypto.DT_FP32)):
        return pypto.matmul(a, b, pypto.DT_FP32, extend_params={"scale": 0.2})
    with pytest.raises(UnsupportedOpError, match="scale"):
        f(torch.randn(16, 32), torch.randn(32, 16))


# ------------------------------------------------------------------ tile hints of lower rank
@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_hint_of_higher_rank_applies_to_rms_norm_and_its_inserted_ops(backend):
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 768], pypto.bfloat16], w: pypto.Tensor[[768], pypto.bfloat16]):
        pypto.set_vec_tile_shapes(16, 768)
        return F.rms_norm(x, w, eps=1e-6)

    w = torch.randn(768, dtype=torch.bfloat16)
    for t in (1, 37):
        x = torch.randn(t, 768, dtype=torch.bfloat16)
        want = TF.rms_norm(x.float(), (768,), w.float(), eps=1e-6)
        close(f(x, w), want, torch.bfloat16, scale=3)


def test_hint_trailing_dims_on_rank_one_ops_and_a_too_short_hint_is_an_error():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([], pypto.DT_FP32), y: pypto.Tensor([], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(2, 8)
        return pypto.add(x, y)
    x, y = torch.randn(3), torch.randn(3)
    close(f(x, y), x + y)
    g = f.trace(x, y)
    (add,) = [g.node(n) for n in g.nodes() if g.op(n) == "add"]
    assert add["attrs"]["vec_tile"] == (8,)

    @pypto.frontend.jit
    def h(x: pypto.Tensor([], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(8, 32)
        return x * 2.0
    with pytest.raises(TilingError, match="has 2 dims but this op works on rank-3") as e:
        h(torch.randn(2, 8, 32))
    assert "test_cann_api.py" in str(e.value)


# ------------------------------------------------------------------ math the examples use
@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_expm1_near_zero_and_erfc_in_its_tail_keep_their_relative_precision(backend):
    # exp(x) - 1 loses every digit as x -> 0 and 1 - erf(x) is 0 for x >= 4: each op is its own instruction
    @pypto.jit(backend=backend)
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 32], pypto.float32]):
        return pypto.expm1(x), pypto.erfc(x)

    x = torch.cat([torch.logspace(-8, -1, 32), torch.linspace(3.0, 9.0, 32), -torch.logspace(-8, 0, 32)]).reshape(3, 32)
    em1, erfc = f(x)
    torch.testing.assert_close(em1, torch.expm1(x), rtol=1e-5, atol=0)
    torch.testing.assert_close(erfc, torch.erfc(x), rtol=1e-4, atol=0)


@pytest.mark.parametrize("backend,dtype", [("sim", "fp32"), ("sim", "fp16"), ("cpu", "fp32"), ("sim", "bf16")])
def test_erfc_expm1_trunc_round_decimals_clip_tensor(backend, dtype):
    dt = DT[dtype]

    @pypto.frontend.jit(backend=backend)
    def f(x: pypto.Tensor([pypto.DYNAMIC, ...], dt), lo: pypto.Tensor([], dt), hi: pypto.Tensor([], dt)):
        pypto.set_vec_tile_shapes(4, 32)
        return (pypto.erfc(x), pypto.expm1(x), pypto.trunc(x * 3.0), pypto.round(x, decimals=1),
                pypto.clip(x, lo, hi), x.clip(min=lo))

    lo, hi = torch.full((40,), -0.5, dtype=dt), torch.linspace(0, 1, 40, dtype=dt)
    for rows in (1, 6):
        x = torch.randn(rows, 40, dtype=dt)
        got = f(x, lo, hi)
        want = (torch.erfc(x.float()), torch.expm1(x.float()), torch.trunc(x * 3.0),
                torch.round(x.float(), decimals=1), torch.clamp(x, lo, hi), torch.clamp(x, min=lo))
        for k, (g, w) in enumerate(zip(got, want)):
            if k in (2, 3) and dt != torch.float32:
                # rounding a value one half-type ulp from a cut may land on either side: most must match
                assert (g.float() - w.float()).abs().le(TOL[dt] * 10 + 0.1 * (k == 3)).float().mean() > 0.95
                continue
            close(g, w.to(dt), dt, scale=5)
    with pytest.raises(pypto.TypeMismatchError, match="decimals"):
        pypto.jit(lambda x: pypto.round(x, decimals=0.5))(torch.randn(4))


# ------------------------------------------------------------------ what CANN's GDN and attention use
@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_int_argument_elements_are_data_scalars(backend):
    """``lens[b + 1] - lens[b]`` (CANN's SymbolicScalar indexing) is a run-time size: a loop bound and
    view offsets, with a sequence of length 0 and a tail."""
    @pypto.frontend.jit(backend=backend)
    def f(x: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), lens: pypto.Tensor([], pypto.DT_INT32),
          out: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(8, 64)
        for b in pypto.loop(lens.shape[0] - 1):
            start, n = lens[b], lens[b + 1] - lens[b]
            for j in pypto.loop(0, n, 8):
                rows = (n - j).min(8)
                tile = x.view([8, 64], [start + j, 0], valid_shape=[rows, 64])   # CANN's Tensor.view
                assert tile.valid_shape == tile.shape
                pypto.assemble(tile * (b + 1.0), [start + j, 0], out)

    lens = torch.tensor([0, 5, 5, 22], dtype=torch.int32)      # lengths 5, 0, 17
    x, out = torch.randn(22, 64), torch.zeros(22, 64)
    f(x, lens, out)
    scale = torch.repeat_interleave(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([5, 0, 17]))
    close(out, x * scale[:, None])


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_write_through_a_squeezed_view_and_setitem_of_a_lower_rank_value(backend):
    @pypto.frontend.jit(backend=backend)
    def f(s: pypto.Tensor([2, 3, 16, 32], pypto.DT_FP32), out: pypto.Tensor([2, 3, 16, 32], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(16, 32)
        for b in pypto.loop(2):
            for h in pypto.loop(3):
                st = s[b, h]                       # [16, 32], a view of s
                st[:] = st * 2.0 + 1.0             # written through into s, as torch does
                out[b, h] = pypto.expand_clone(st[0:1, :], (16, 32)) + st

    s = torch.randn(2, 3, 16, 32)
    s0, out = s.clone(), torch.empty(2, 3, 16, 32)
    f(s, out)
    new = s0 * 2 + 1
    close(s, new)
    close(out, new[:, :, 0:1, :] + new)


def test_fillpad_of_a_reshape_with_valid_shape_fills_the_box():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([pypto.DYNAMIC, 1, 32], pypto.DT_FP32), out: pypto.Tensor([pypto.DYNAMIC, 16, 32], pypto.DT_FP32)):
        n = x.shape[0]
        for i in pypto.loop((n + 15) // 16):
            rows = (n - i * 16).min(16)
            v = pypto.view(x, [16, 1, 32], [i * 16, 0, 0], valid_shape=[rows, 1, 32])
            v2 = pypto.reshape(v, [16, 32], valid_shape=[rows, 32])
            out[i] = pypto.fillpad(v2, "constant", -1.0)

    for n in (16, 21):
        x, out = torch.randn(n, 1, 32), torch.empty((n + 15) // 16, 16, 32)
        f(x, out)
        want = torch.full((((n + 15) // 16) * 16, 32), -1.0)
        want[:n] = x[:, 0]
        want = want.reshape(-1, 16, 32)
        close(out, want)


def test_cube_hint_filling_l0b_once_steps_k_in_halves_and_symbolic_vec_hint():
    @pypto.frontend.jit
    def f(a: pypto.Tensor((4, 64, 512), pypto.DT_FP32), b: pypto.Tensor((4, 128, 512), pypto.DT_FP32)):
        pypto.set_cube_tile_shapes([64, 64], [128, 128], [128, 128])      # fp32 L0B once: 64 KiB
        return pypto.matmul(a, b, pypto.DT_FP32, b_trans=True)
    a, b = torch.randn(4, 64, 512), torch.randn(4, 128, 512)
    close(f(a, b), a @ b.transpose(1, 2), scale=100)

    @pypto.frontend.jit
    def g(x: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), out: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32)):
        n = x.shape[0]
        for i in pypto.loop((n + 15) // 16):
            t = pypto.view(x, [16, 64], [i * 16, 0], valid_shape=[(n - i * 16).min(16), 64])
            pypto.set_vec_tile_shapes(*t.shape)    # a tail's size hints its box: 16
            pypto.assemble(t.exp(), [i * 16, 0], out)
    x, out = torch.randn(20, 64), torch.empty(20, 64)
    g(x, out)
    close(out, x.exp())
    (loop,) = [n for n in g.trace(x, out).nodes() if g.trace(x, out).op(n) == "loop"]
    body = g.trace(x, out).node(loop)["attrs"]["body"]
    assert [body.node(n)["attrs"]["vec_tile"] for n in body.nodes() if body.op(n) == "exp"] == [(16, 64)]


def test_experimental_and_matrix_size_are_accepted():
    pypto.experimental.set_operation_options(combine_axis=True)
    pypto.set_matrix_size([16, 32, 64])
    assert cann.ignored_options()[("operation_options", "combine_axis")] is True
    assert cann.ignored_options()[("options", "matrix_size")] == [16, 32, 64]


def test_tiling_bound_of_a_min_of_a_loop_index():
    """passes/tiling.py _bound: min(i*t + t, n) - i*t (a tail's rows written as CANN programs write
    them) is bounded by t; it raised sympy's PolynomialError before."""
    import sympy
    from pypto.passes.tiling import _Scope
    i, n = sympy.Symbol("i", integer=True, nonnegative=True), sympy.Symbol("n", integer=True, positive=True)
    scope = _Scope.__new__(_Scope)
    scope.loop_vars = {i: (0, sympy.ceiling(n / 8) - 1)}
    assert scope._bound(sympy.Min(8 * i + 8, n) - 8 * i) == 8
    assert scope._bound(sympy.Min(8, n - 8 * i)) == 8
    assert sympy.simplify(scope._bound(8 * i + 8) - 8 * sympy.ceiling(n / 8)) == 0      # at the last i


def test_loop_parallel_is_accepted_and_listed_as_ignored():
    @pypto.frontend.jit
    def f(x: pypto.Tensor([4, 64], pypto.DT_FP32), out: pypto.Tensor([4, 64], pypto.DT_FP32)):
        for i in pypto.loop(4, name="L", idx_name="i", parallel=True):
            out[i:i + 1, :] = x[i:i + 1, :] + 1.0
    x, out = torch.randn(4, 64), torch.empty(4, 64)
    f(x, out)
    close(out, x + 1)
    assert cann.ignored_options()[("loop_options", "parallel")] is True


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_writing_a_view_into_its_box_writes_its_valid_region(backend):
    @pypto.frontend.jit(backend=backend)
    def f(x: pypto.Tensor([], pypto.DT_FP32), out: pypto.Tensor([], pypto.DT_FP32), rows: int):
        pypto.set_vec_tile_shapes(8, 8)
        out[:] = pypto.view(x, [4, 8], [1, 8], valid_shape=[rows, 8])

    x = torch.randn(6, 16)
    for rows in (2, 4):
        out = torch.full((4, 8), 7.0)
        f(x, out, rows)
        want = torch.full((4, 8), 7.0)
        want[:rows] = x[1:1 + rows, 8:]
        close(out, want)

"""Out-params, CANN's style (``def f(x, out): out[:] = expr``): a full-box write builds the value straight in
the caller's tensor — no workspace, no copy task, the cycles of returning it (issue 20 item 2); a partial box
is written by the producer into the box; writes that read ``out`` keep torch's meaning (elementwise in place,
anything else through a copy); several writes in order, casts, broadcasts, tails, dynamic sizes; bad shapes
are the user's error at the user's line. Numbers are checked against torch, on sim and cpu."""
import inspect

import pytest
import torch

import pypto
import pypto.nn.functional as F
from pypto.passes.pipeline import lower
from .passes_helpers import TOL, gm_workspaces, rand

BACKENDS = ["sim", "cpu"]
# cpu builds cost seconds each: every case runs on sim, a representative few on cpu as well
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def run(fn, backend, *args):
    """``fn`` compiled for ``backend`` run on clones of ``args``; -> (the arguments after the call, tasks run)."""
    args = [a.clone() for a in args]
    pypto.jit(fn, backend=backend)(*args)
    return args, pypto.last_report().tasks


def close(got, want):
    rtol, atol = TOL[got.dtype]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def execution_graph(fn, *args):
    return lower(pypto.jit(fn, backend="reference").trace(*args))


def copy_kernels(eg):
    return [k for k in eg.kernels if k.startswith("copy")]


def cycles(fn, *args):
    pypto.jit(fn, backend="sim", timing_only=True)(*args)
    return pypto.last_report().cycles


# ------------------------------------------------------------------ full box: built straight in out
def full_colon(x, y, out):
    out[:] = x * y + 1


def full_ellipsis(x, y, out):
    out[...] = x * y + 1


def full_two_slices(x, y, out):
    out[:, :] = x * y + 1


def full_assemble(x, y, out):
    pypto.assemble(x * y + 1, [0, 0], out)


@pytest.mark.parametrize("form, dtype, backend", [
    *[(form, dtype, "sim") for form in (full_colon, full_ellipsis, full_two_slices, full_assemble) for dtype in FLOATS],
    (full_colon, torch.float32, "cpu"), (full_colon, torch.bfloat16, "cpu")],
    ids=lambda v: getattr(v, "__name__", str(v).replace("torch.", "")))
def test_full_box_write_is_the_producer_storing_into_out(backend, dtype, form):
    x, y = rand((67, 200), dtype, seed=1), rand((67, 200), dtype, seed=2)      # a row and a column tail
    (_, _, out), tasks = run(form, backend, x, y, torch.full((67, 200), 5.0, dtype=dtype))
    close(out, x * y + 1)
    assert tasks == 1                             # the one fused program; no copy tasks


def test_full_box_write_has_no_workspace_and_no_copy_kernel():
    args = (rand((64, 1024)), rand((64, 1024)), rand((64, 1024)))
    eg = execution_graph(full_colon, *args)
    assert not gm_workspaces(eg) and not copy_kernels(eg), eg.buffers
    assert eg.outputs == ["out"]                  # the argument's own buffer is the output
    (task,) = eg.program
    assert [base_of(eg, r.buffer) for r in task.writes] == ["out"]


def base_of(eg, name):
    while eg.buffers[name].view_of is not None:
        name = eg.buffers[name].view_of
    return name


@pytest.mark.parametrize("comp, shapes, dtype", [
    pytest.param(lambda x, y: x + y, [(64, 1024), (64, 1024)], torch.float32, id="add"),
    pytest.param(lambda x, y: F.softmax(x, -1) + y, [(512, 1024), (512, 1024)], torch.float32, id="softmax"),
    pytest.param(lambda x, y: pypto.matmul(x, y), [(256, 256), (256, 256)], torch.float16, id="matmul"),
])
def test_out_param_costs_what_returning_costs(comp, shapes, dtype):
    x, y = (torch.empty(*s, dtype=dtype) for s in shapes)
    out = torch.empty(shapes[0][0], shapes[1][1], dtype=dtype)

    def returned(x, y):
        return comp(x, y)

    def out_param(x, y, out):
        out[:] = comp(x, y)
    ret = cycles(returned, x, y)
    assert cycles(out_param, x, y, out) == pytest.approx(ret, rel=0.01)


@pytest.mark.parametrize("backend", ["sim"])
def test_dynamic_size_full_box(backend):
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 96], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 96], pypto.float32]):
        out[:] = x.exp() - 1
    jf = pypto.jit(f, backend=backend)
    for m in (5, 70):
        x, out = rand((m, 96), seed=m), torch.zeros(m, 96)
        jf(x, out)
        close(out, x.exp() - 1)
        assert pypto.last_report().tasks == 1
    assert jf.trace_count == 1


# ------------------------------------------------------------------ expressions that read out
@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_read_of_out_is_updated_in_place(backend):
    def f(x, out):
        out[:] = out * 2 + x
    x, o = rand((67, 130), seed=3), rand((67, 130), seed=4)
    (_, out), tasks = run(f, backend, x, o)
    close(out, o * 2 + x)
    assert tasks == 1


def read_row_reduction(w, out):
    out[:] = out - out.amax(-1, keepdim=True)


def read_column_reduction(w, out):
    out[:] = out * w.sum(0, keepdim=True) / out.abs().sum(0, keepdim=True)


def read_same_box(w, out):
    out[8:100, 16:] = out[8:100, 16:] * 2 + w[8:100, 16:]


IN_PLACE_READS = {
    read_row_reduction: lambda w, o: o - o.amax(-1, keepdim=True),
    read_column_reduction: lambda w, o: o * w.sum(0, keepdim=True) / o.abs().sum(0, keepdim=True),
    read_same_box: lambda w, o: torch.cat([o[:8], torch.cat([o[8:100, :16], o[8:100, 16:] * 2 + w[8:100, 16:]], 1),
                                           o[100:]]),
}


@pytest.mark.parametrize("fn, backend", [*[(fn, "sim") for fn in IN_PLACE_READS], (read_row_reduction, "cpu")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_reads_of_out_where_it_is_written_stay_in_place(backend, fn):
    """Reductions and elementwise ops over the box being written: each block reads out only where it
    writes it, so the program updates out in place."""
    w, o = rand((128, 640), seed=5), rand((128, 640), seed=6)
    (_, out), _ = run(fn, backend, w, o)
    close(out, IN_PLACE_READS[fn](w, o))
    assert not copy_kernels(execution_graph(fn, w, o))


def read_through_matmul(w, out):
    out[:] = out @ w


def read_through_transpose(w, out):
    out[:] = out.transpose(0, 1) + w


def read_through_shifted_view(w, out):
    out[1:] = out[:-1] * 2


def read_through_broadcast_column(w, out):
    out[:] = out[:, :1] + w


def copy_of_an_overlapping_box(w, out):
    out[1:] = out[:-1]


READS_OF_OUT = {
    read_through_matmul: lambda w, o: (o.float() @ w.float()).to(o.dtype),
    read_through_transpose: lambda w, o: o.t() + w,
    read_through_shifted_view: lambda w, o: torch.cat([o[:1], o[:-1] * 2]),
    read_through_broadcast_column: lambda w, o: o[:, :1] + w,
    copy_of_an_overlapping_box: lambda w, o: torch.cat([o[:1], o[:-1]]),
}


@pytest.mark.parametrize("fn, backend", [*[(fn, "sim") for fn in READS_OF_OUT], (read_through_shifted_view, "cpu")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_other_reads_of_out_see_its_old_value(backend, fn):
    """A tile of out read by other blocks too (a panel of rows for the matmul, a column for the
    transpose, the row before for the shift, column 0 for every tile): the new value is built elsewhere
    first and copied in after it (one copy task more than the program)."""
    dtype = torch.float16 if fn is read_through_matmul else torch.float32
    w, o = rand((128, 128), dtype, seed=5), rand((128, 128), dtype, seed=6)
    (_, out), tasks = run(fn, backend, w, o)
    close(out, READS_OF_OUT[fn](w, o))
    if fn is copy_of_an_overlapping_box:     # no program: a copy of out's rows aside, then into out's box
        assert tasks == 3
    else:
        assert tasks == 2 and len(copy_kernels(execution_graph(fn, w, o))) == 1


def transpose_of_itself(a, b):
    a[:] = a.transpose(0, 1)


def swap(a, b):
    t = a * 1
    a[:] = b
    b[:] = t


def takes_an_intermediate_value(a, b):
    a[0:2] = a[4:6] + 1
    b[:] = a                        # a as it is now: rows 2:4 are rewritten after
    a[2:4] = b[6:8] * 5


@pytest.mark.parametrize("fn", [transpose_of_itself, swap, takes_an_intermediate_value], ids=lambda f: f.__name__)
def test_arguments_that_take_old_values_of_arguments(fn):
    """Old values of the arguments are read before they are overwritten (torch runs the same code)."""
    a, b = rand((16, 16), seed=20), rand((16, 16), seed=21)
    want_a, want_b = a.clone(), b.clone()
    if fn is transpose_of_itself:
        want_a = a.t().clone()          # torch refuses the overlapping copy itself
    else:
        fn(want_a, want_b)
    (got_a, got_b), _ = run(fn, "sim", a, b)
    close(got_a, want_a)
    close(got_b, want_b)


@pytest.mark.parametrize("backend", ["sim"])
def test_old_value_read_before_the_write_is_traced(backend):
    def f(x, out):
        z = out * 3                 # the old value, read by a program before the one that replaces it
        out[:] = x + 1
        out[0:4] = z[0:4]
    x, o = rand((32, 64), seed=7), rand((32, 64), seed=8)
    (_, out), tasks = run(f, backend, x, o)
    want = x + 1
    want[0:4] = o[0:4] * 3
    close(out, want)
    assert tasks == 3               # z, x + 1 (into out), the copy of z's rows into out's box


# ------------------------------------------------------------------ partial boxes and several writes
@pytest.mark.parametrize("dtype, backend", [*[(dtype, "sim") for dtype in FLOATS], (torch.float16, "cpu")],
                         ids=str)
def test_partial_box_is_written_by_its_producer(backend, dtype):
    def f(x, out):
        out[2:35, 8:] = x[2:35, 8:].abs() + 1
    x, o = rand((40, 136), dtype, seed=9), rand((40, 136), dtype, seed=10)
    (_, out), tasks = run(f, backend, x, o)
    want = o.clone()
    want[2:35, 8:] = x[2:35, 8:].abs() + 1
    close(out, want)
    assert tasks == 1


def test_partial_box_needs_no_workspace():
    def f(x, out):
        out[2:5] = x[2:5] + 1
    eg = execution_graph(f, rand((8, 64)), rand((8, 64)))
    assert not gm_workspaces(eg) and not copy_kernels(eg)


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_writes_in_order(backend):
    def f(x, y, out):
        out[:] = x + 1
        out[2:5] = y[0:3]
        out[4:6, 0:16] = 7.0
        out[0] = y[7] * 2
    x, y, o = rand((16, 64), seed=11), rand((16, 64), seed=12), rand((16, 64), seed=13)
    (_, _, out), tasks = run(f, backend, x, y, o)
    want = x + 1
    want[2:5] = y[0:3]
    want[4:6, 0:16] = 7.0
    want[0] = y[7] * 2
    close(out, want)
    assert tasks == 4               # x + 1 into out, then one writer per box


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_param_written_through_a_loop_with_a_dynamic_tail(backend):
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32], out: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        n = x.shape[0]
        for i in pypto.loop(pypto.ceildiv(n, 16)):
            v = pypto.view(x, [16, 64], [i * 16, 0], valid_shape=[pypto.min(16, n - i * 16), 64])
            pypto.assemble(v.exp() * 2, [i * 16, 0], out)
    jf = pypto.jit(f, backend=backend)
    for m in (5, 40):
        x, out = rand((m, 64), seed=m), torch.zeros(m, 64)
        jf(x, out)
        close(out, x.exp() * 2)
        assert pypto.last_report().tasks == -(-m // 16)     # one task per block of rows, no copy in or out


@pytest.mark.parametrize("backend", ["sim"])
def test_loop_carried_tensor_read_by_a_matmul_is_not_overwritten_while_read(backend):
    """s @ w reads whole rows of s in every block: the new s is built aside and copied back each time
    (it was stored over s while other blocks still read it: wrong numbers on sim and cpu)."""
    def f(w, s0):
        s = s0 * 1
        for i in pypto.loop(3):
            s[:, :] = s @ w
        return s
    w, s0 = (rand((128, 128), seed=22) / 12).half(), rand((128, 128), torch.float16, seed=23)
    want = s0.float()
    for _ in range(3):
        want = (want @ w.float()).half().float()
    close(pypto.jit(f, backend=backend)(w, s0), want.half())


@pytest.mark.parametrize("backend", ["sim"])
def test_loop_carried_row_update_in_place(backend):
    def f(x, y):
        for i in pypto.loop(3):
            y[i] = x[i] + y[i]          # reads exactly the row it writes
    x, y = rand((3, 64), seed=24), rand((3, 64), seed=25)
    (_, got), tasks = run(f, backend, x, y)
    close(got, x + y)
    assert tasks == 3


# ------------------------------------------------------------------ casts and broadcasts
@pytest.mark.parametrize("backend", ["sim"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp32_value_into_a_narrower_out_is_cast(backend, dtype):
    def f(x, out):
        out[:] = x * 3
    x = rand((48, 96), seed=14)
    (_, out), tasks = run(f, backend, x, torch.zeros(48, 96, dtype=dtype))
    close(out, (x * 3).to(dtype))
    assert tasks == 1


def fill_zero(v, out):
    out[:] = 0


def fill_row(v, out):
    out[:] = v


@pytest.mark.parametrize("backend", ["sim"])
@pytest.mark.parametrize("fn, vshape", [(fill_zero, (72,)), (fill_row, (72,)), (fill_row, (1, 72)),
                                        (fill_row, (40, 1)), (fill_row, (1, 1))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_smaller_value_is_broadcast_into_out(backend, fn, vshape):
    v, o = rand(vshape, seed=15), rand((40, 72), seed=16)
    (_, out), tasks = run(fn, backend, v, o)
    close(out, torch.zeros_like(o) if fn is fill_zero else v.expand_as(o).clone())
    assert tasks == 1


# ------------------------------------------------------------------ the caller's tensors
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_sharing_memory_with_an_input_reads_the_input_before_it_is_overwritten(backend):
    def f(a, w, out):
        out[:] = a @ w
    a, w = rand((256, 256), torch.float16, seed=17), rand((256, 256), torch.float16, seed=18)
    want = (a.float() @ w.float()).half()
    pypto.jit(f, backend=backend)(a, w, a)                 # out is a
    close(a, want)


@pytest.mark.parametrize("backend", ["sim"])
def test_non_contiguous_out(backend):
    def f(x, out):
        out[:] = x * 2
    x, out = rand((32, 64), seed=19), torch.zeros(64, 32).t()
    pypto.jit(f, backend=backend)(x, out)
    close(out, x * 2)


# ------------------------------------------------------------------ bad input
def test_value_that_does_not_broadcast_is_the_users_error_at_their_line():
    def f(x, out):
        out[:] = x  # <- error
    line = next(i for i, text in enumerate(inspect.getsource(f).splitlines()) if "<- error" in text) \
        + f.__code__.co_firstlineno
    with pytest.raises(pypto.ShapeError) as info:
        pypto.jit(f, backend="sim")(torch.zeros(3, 5), torch.zeros(4, 6))
    e = info.value
    assert (e.loc.file, e.loc.line) == (__file__, line), e.loc
    assert "cannot write a value of shape [3, 5] into a box of shape [4, 6]" in str(e)

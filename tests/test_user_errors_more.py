"""No silent wrong answers, no raw Python errors (issue 18, items 7, 8, 10): an index out of range, a
zero-length reduction, an expanded input, a float for a tensor, a torch function or method pypto
lacks, a Tile or Professional-mode kernel mistake each give torch's answer or a pypto error naming
the user's line (marked ``# <- error``, checked as in test_user_errors.py); errors show the user's
frames, not pypto's (PYPTO_TRACEBACK=full shows them all); threads calling one new function trace it
once."""
import os
import threading
import traceback

import pytest
import torch

import pypto
import pypto.nn as nn
import pypto.tile as pt
import pypto_pro.language as pl
from test_user_errors import marked_line

PYPTO_ROOTS = tuple(os.path.dirname(m.__file__) + os.sep for m in (pypto, pl))


def raised(case, exc_type):
    """Run ``case``; it must raise ``exc_type`` at its marked line (e.loc and the message say so)."""
    with pytest.raises(pypto.PyptoError) as info:
        case()
    e = info.value
    assert isinstance(e, exc_type), f"{type(e).__name__} is not a {exc_type.__name__}: {e}"
    line = marked_line(case)
    assert e.loc is not None and (e.loc.file, e.loc.line) == (__file__, line), f"reported at {e.loc}: {e}"
    assert f"{__file__}:{line}" in str(e), str(e)
    return e


# ------------------------------------------------------------------ item 7: embedding index out of range
@pytest.mark.parametrize("backend", ["reference", "sim", "cpu"])
@pytest.mark.parametrize("bad", [10, -1])
def test_embedding_index_out_of_range_is_an_index_error(backend, bad):
    torch.manual_seed(0)
    emb = nn.Embedding(10, 8).compile(backend=backend)
    ids = torch.tensor([[1, 9, 3], [0, 2, 4]])
    expected = torch.nn.functional.embedding(ids, emb.weight.detach())
    torch.testing.assert_close(emb(ids), expected, rtol=0, atol=0)     # in range: torch's rows, exactly

    def lookup():
        emb(torch.tensor([[1, bad, 3], [0, 2, 4]]))  # <- error
    e = raised(lookup, pypto.IndexOutOfRangeError)
    assert isinstance(e, IndexError)                                   # as torch raises
    assert f"holds index {bad} at [0, 1]" in str(e) and "0 <= index < 10" in str(e)
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([bad]), emb.weight.detach())


def test_index_select_argument_out_of_range_on_sim():
    f = pypto.jit(lambda x, i: pypto.index_select(x, 1, i), backend="sim")

    def select():
        f(torch.randn(4, 6), torch.tensor([0, 6]))  # <- error
    e = raised(select, pypto.IndexOutOfRangeError)
    assert "holds index 6 at [1]" in str(e)


# ------------------------------------------------------------------ item 8: zero-length dims
def test_reduction_over_a_zero_length_dim_matches_torch():
    f = pypto.jit(lambda x: (x.sum(dim=1), x.prod(1), x.mean(-1, keepdim=True)), backend="sim")
    x = torch.randn(4, 0)
    for got, want in zip(f(x), (x.sum(dim=1), x.prod(1), x.mean(-1, keepdim=True))):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)
    xi = torch.ones(3, 0, dtype=torch.int32)
    got = pypto.jit(lambda x: x.sum(1), backend="sim")(xi)
    assert got.dtype == torch.int64 and torch.equal(got, xi.sum(1))


def amax_over_nothing():
    pypto.jit(lambda x: x.amax(dim=1))(torch.randn(4, 0))  # <- error


def zero_size_elementwise_on_sim():
    pypto.jit(lambda x: x * 2.0, backend="sim")(torch.randn(4, 0))  # <- error


def test_zero_length_errors():
    assert "has no value (torch raises too)" in str(raised(amax_over_nothing, pypto.ShapeError))
    assert "zero-size tensor [4, 0]" in str(raised(zero_size_elementwise_on_sim, pypto.ShapeError))
    assert torch.equal(pypto.jit(lambda x: x * 2.0, backend="reference")(torch.randn(4, 0)), torch.empty(4, 0))


def test_expanded_input_on_sim_matches_torch():
    base = torch.randn(1, 8)
    x = base.expand(4, 8)                                  # stride 0 in dim 0
    got = pypto.jit(lambda a: a * 2.0 + 1.0, backend="sim")(x)
    torch.testing.assert_close(got, x * 2.0 + 1.0)
    assert torch.equal(x, base.expand(4, 8))               # the input is not written


# ------------------------------------------------------------------ item 8: wrong kinds of values
@pypto.jit(backend="reference")
def doubled(x: pypto.Tensor[[4, 8], pypto.float32]):
    return x * 2.0


def float_for_a_tensor():
    doubled(1.5)  # <- error


def torch_function_pypto_lacks():
    def body(x):
        return torch.lgamma(x)  # <- error
    pypto.jit(body, backend="reference")(torch.randn(4, 8))


def torch_function_pypto_has():
    def body(x):
        return torch.exp(x)  # <- error
    pypto.jit(body, backend="reference")(torch.randn(4, 8))


def tensor_method_pypto_lacks():
    def body(x):
        return x.median()  # <- error
    pypto.jit(body, backend="reference")(torch.randn(4, 8))


def test_wrong_kinds_of_values():
    e = raised(float_for_a_tensor, pypto.TypeMismatchError)
    assert "'x' is declared pypto.Tensor[[4, 8], pypto.float32]" in str(e) and "found float 1.5" in str(e)
    e = raised(torch_function_pypto_lacks, pypto.UnsupportedOpError)
    assert "torch.lgamma" in str(e) and "pypto has no op 'lgamma'" in str(e) and isinstance(e, TypeError)
    assert "call pypto.exp" in str(raised(torch_function_pypto_has, pypto.UnsupportedOpError))
    e = raised(tensor_method_pypto_lacks, pypto.NoSuchMethodError)
    assert "pypto.Tensor has no method or attribute 'median'" in str(e) and isinstance(e, AttributeError)


def test_torch_operators_with_traced_tensors_still_work():
    seen = {}

    def body(x):
        seen["has_median"] = hasattr(x, "median")
        return torch.ones(4, 8) * x + torch.ones(4, 8) - (torch.zeros(4, 8) < x).float()
    x = torch.randn(4, 8)
    torch.testing.assert_close(pypto.jit(body, backend="reference")(x), x + 1 - (x > 0).float())
    assert seen["has_median"] is False


@pt.kernel(backend="reference")
def tile_add(X, Y, Z, BM: int = 16):
    i = pt.program_id(0)
    pt.store(Z.tile((BM, 128))[i, 0], pt.load(X.tile((BM, 128))[i, 0]) + pt.load(Y.tile((BM, 128))[i, 0]))  # <- error


def test_tile_kernel_given_a_float_for_a_tensor():
    x, z = torch.randn(32, 128), torch.zeros(32, 128)
    with pytest.raises(pypto.TypeMismatchError) as info:
        tile_add[(2,)](x, 1.5, z)
    e = info.value
    assert (e.loc.file, e.loc.line) == (__file__, marked_line(tile_add.fn)), str(e)
    assert "argument 'Y' is a constant (float 1.5)" in str(e) and "uses it as a tensor (.tile)" in str(e)
    tile_add[(2,)](x, x, z)
    torch.testing.assert_close(z, x + x)


F16, VEC = pl.DT_FP16, pl.MemorySpace.Vec


def staged_previous_by_a_variable(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16]):
    t = pl.TileType([16, 128], F16, VEC)
    inp = pl.make_tile_group(t, addrs=0x0000, depth=3)
    out = pl.make_tile_group(t, addrs=0x4000, depth=3)
    back = 1
    with pl.section_vector():
        for i in pl.range(0, pl.ceil_div(x.shape[0], 16)):
            with pl.stage(0):
                pl.load_tile(inp.next(), x, [i, 0])
            with pl.stage(1):
                pl.muls(out.next(), inp.previous(back), 3.0)  # <- error
            with pl.stage(2):
                pl.store_tile(y, out.current(), [i, 0])


def test_pro_parse_error_in_a_pipelined_stage_names_the_kernel_line():
    k = pl.jit(staged_previous_by_a_variable, pipeline=pl.PipelineConfig(preload=1))
    x = torch.randn(32, 128, dtype=torch.float16)
    with pytest.raises(pl.ParseError) as info:
        k[None, 1](x, torch.zeros_like(x))
    e = info.value
    assert (e.loc.file, e.loc.line) == (__file__, marked_line(staged_previous_by_a_variable)), str(e)
    assert f"{__file__}:{marked_line(staged_previous_by_a_variable)}" in str(e)


def test_gdn_on_meta_tensors_names_the_callers_line():
    from models.qwen3_next import GDNArgumentError, chunk_gated_delta_rule

    def meta(*shape, dtype=torch.float16):
        return torch.empty(*shape, device="meta", dtype=dtype)

    def call():
        chunk_gated_delta_rule(meta(1, 64, 2, 128), meta(1, 64, 2, 128), meta(1, 64, 2, 128), meta(1, 64, 2, dtype=torch.float32), meta(1, 64, 2), backend="sim")  # <- error
    assert "q is on meta" in str(raised(call, GDNArgumentError))


# ------------------------------------------------------------------ tracebacks: the user's frames first
def _nested_user_error():
    def body(x):
        return x.sum(dim=3)
    pypto.jit(body, backend="reference")(torch.randn(4, 8))


def _pypto_frames(e) -> list:
    return [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(PYPTO_ROOTS)]


@pytest.mark.parametrize("entry", ["jit", "module", "tile", "pro"])
def test_tracebacks_hide_pypto_frames_unless_asked(entry, monkeypatch):
    def run():
        if entry == "jit":
            _nested_user_error()
        elif entry == "module":
            nn.Linear(16, 8).compile(backend="reference")(torch.randn(3, 12))
        elif entry == "tile":
            tile_add[(2,)](torch.randn(32, 128), 1.5, torch.zeros(32, 128))
        else:
            x = torch.randn(32, 128, dtype=torch.float16)
            pl.jit(staged_previous_by_a_variable, pipeline=pl.PipelineConfig(preload=1))[None, 1](x, x.clone())

    def caught():
        with pytest.raises(pypto.PyptoError) as info:
            run()
        return info.value
    monkeypatch.delenv("PYPTO_TRACEBACK", raising=False)
    e = caught()
    frames = traceback.extract_tb(e.__traceback__)
    assert _pypto_frames(e) == [], [f"{f.filename}:{f.lineno}" for f in _pypto_frames(e)]
    assert frames and frames[-1].filename == __file__          # the user's line comes last, nearest the error
    assert str(e).startswith(f"{__file__}:") or f"--> {__file__}:" in str(e)   # the message is kept
    monkeypatch.setenv("PYPTO_TRACEBACK", "full")
    assert len(_pypto_frames(caught())) >= 3


def test_a_pypto_bug_keeps_its_frames():
    """An exception raised inside pypto that is not a pypto error (a bug) keeps every frame."""
    def body(x):
        return x * 2.0
    f = pypto.jit(body, backend="reference")
    f.fn = None                        # calling it fails inside pypto's tracing, not in user code
    with pytest.raises(TypeError) as info:
        f(torch.randn(2, 8))
    assert _pypto_frames(info.value)


# ------------------------------------------------------------------ item 10: one trace per new signature
def _call_at_once(fn, n=4):
    barrier, errors = threading.Barrier(n), []

    def worker():
        try:
            barrier.wait()
            fn()
        except Exception as e:           # noqa: BLE001  reported below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_threads_calling_a_new_jit_function_trace_it_once():
    def body(x):
        return pypto.exp(x) * 2.0
    f = pypto.jit(body, backend="sim")
    x = torch.randn(16, 32)
    results = []
    _call_at_once(lambda: results.append(f(x)))
    assert f.trace_count == 1 and len(f.cache) == 1
    for r in results:
        torch.testing.assert_close(r, torch.exp(x) * 2.0)


def scale_rows(x: pl.Tensor[[pl.DYNAMIC, 128], F16], y: pl.Tensor[[pl.DYNAMIC, 128], F16]):
    t = pl.TileType([16, 128], F16, VEC)
    g = pl.make_tile_group(t, addrs=0x0000, depth=2)
    with pl.section_vector():
        for i in pl.range(0, pl.ceil_div(x.shape[0], 16)):
            a = g.next()
            pl.load_tile(a, x, [i, 0])
            pl.mul(a, a, 3.0)
            pl.store_tile(y, a, [i, 0])


def test_threads_launching_new_tile_and_pro_kernels_compile_them_once():
    k = pt.kernel(tile_add.fn, backend="reference")
    x = torch.randn(32, 128)
    zs = []

    def tile_launch():
        z = torch.zeros(32, 128)
        k[(2,)](x, x, z)
        zs.append(z)
    _call_at_once(tile_launch)
    assert k.trace_count == 1 and len(zs) == 4
    for z in zs:
        torch.testing.assert_close(z, x + x)

    pk = pl.jit(scale_rows, backend="sim")
    xs = torch.randn(64, 128, dtype=torch.float16)
    ys = []

    def pro_launch():
        y = torch.zeros_like(xs)
        pk[None, 1](xs, y)
        ys.append(y)
    _call_at_once(pro_launch)
    assert pk.compile_count == 1 and len(ys) == 4
    for y in ys:
        torch.testing.assert_close(y, (xs.float() * 3).half())

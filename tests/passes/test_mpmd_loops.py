"""MPMD overlap at the Tensor level (issue 14 item 3): the iterations of a pypto.loop that do not
depend on each other run at the same time on different cores, because each iteration's GM
temporaries live in a copy of their own (passes/multibuffer.py); a loop-carried chain still runs in
order next to them. Results against torch on sim and cpu; the overlap read from the simulator's
task records (the Chrome trace's task slices)."""
from __future__ import annotations

import json
import re
import shutil
import types

import pytest
import torch

import pypto
import pypto.nn.functional as F
from pypto.passes.pipeline import lower
from pypto.runtime import sim
from .passes_helpers import assert_match

B = 32                                   # rows per iteration
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
DTYPES = {"fp32": pypto.float32, "fp16": pypto.float16}


def softmax_blocks(x, w):
    """(a) independent row blocks: out[block i] = softmax(x[block i] @ w); the last block a tail."""
    n = x.shape[0]
    out = pypto.zeros(n, w.shape[1], dtype=x.dtype)
    for i in pypto.loop(pypto.ceildiv(n, B)):
        rows = pypto.min(B, n - i * B)
        xb = pypto.view(x, [B, x.shape[1]], [i * B, 0], valid_shape=[rows, x.shape[1]])
        out[i * B:i * B + rows] = F.softmax(xb @ w, dim=-1)
    return out


def exp_blocks(x, w):
    """(a) with a temporary each iteration makes and reads: t = exp(x_i @ w); out_i = t / sum(t)."""
    n = x.shape[0]
    out = pypto.zeros(n, w.shape[1], dtype=x.dtype)
    for i in pypto.loop(pypto.ceildiv(n, B)):
        rows = pypto.min(B, n - i * B)
        xb = pypto.view(x, [B, x.shape[1]], [i * B, 0], valid_shape=[rows, x.shape[1]])
        t = (xb @ w).exp()
        out[i * B:i * B + rows] = t / t.sum(-1, keepdim=True)
    return out


def chain_and_blocks(x, w, a, b):
    """(b) a running state s = s * a_i + b_i (loop-carried) next to the independent blocks of (a)."""
    n = x.shape[0]
    out = pypto.zeros(n, w.shape[1], dtype=x.dtype)
    s = pypto.zeros(1, a.shape[1], dtype=a.dtype)
    for i in pypto.loop(pypto.ceildiv(n, B)):
        rows = pypto.min(B, n - i * B)
        xb = pypto.view(x, [B, x.shape[1]], [i * B, 0], valid_shape=[rows, x.shape[1]])
        out[i * B:i * B + rows] = F.softmax(xb @ w, dim=-1)
        s[:, :] = s * pypto.view(a, [1, a.shape[1]], [i, 0]) + pypto.view(b, [1, b.shape[1]], [i, 0])
    return out, s


def planted_chain(x, w):
    """A true loop-carried read: block i is computed from block i - 1's result (y is carried)."""
    y = pypto.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    y[0:B] = x[0:B]
    for i in pypto.loop(1, x.shape[0] // B):
        y[i * B:(i + 1) * B] = F.softmax(y[(i - 1) * B:i * B] @ w, dim=-1) + x[i * B:(i + 1) * B]
    return y


def _inputs(n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 64, generator=g).to(dtype)
    w = (torch.randn(64, 64, generator=g) * 0.125).to(dtype)
    a = torch.rand(n, 64, generator=g).to(dtype)
    b = torch.randn(n, 64, generator=g).to(dtype)
    return x, w, a, b


def _with_annotations(fn, ann):
    """A copy of ``fn`` whose parameters carry the pypto.Tensor annotations ``ann``."""
    typed = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    typed.__annotations__ = dict(zip(names, ann))
    return typed


# ---------------------------------------------------------------- results against torch
def _result_cases():
    """Every program x dtype on sim; on cpu (a cold g++ build of the kernels takes ~10-25 s each) the
    chain case in fp16 — it holds the independent blocks too — and the others behind --runslow."""
    for name, program, nargs in (("independent", softmax_blocks, 2), ("chain", chain_and_blocks, 4)):
        for dt in ("fp16", "fp32"):
            yield pytest.param(program, nargs, dt, "sim", id=f"{name}-{dt}-sim")
            marks = [needs_gxx] + ([] if (name, dt) == ("chain", "fp16") else [pytest.mark.slow])
            yield pytest.param(program, nargs, dt, "cpu", id=f"{name}-{dt}-cpu", marks=marks)


@pytest.mark.parametrize("program, nargs, dt, backend", list(_result_cases()))
def test_loop_results_match_torch(program, nargs, dt, backend):
    """One compilation for a dynamic row count; 100 rows end in a tail block of 4, 64 in none."""
    fn = _with_annotations(program, [pypto.Tensor[[pypto.DYNAMIC, 64], DTYPES[dt]],
                                     pypto.Tensor[[64, 64], DTYPES[dt]],
                                     pypto.Tensor[[pypto.DYNAMIC, 64], DTYPES[dt]],
                                     pypto.Tensor[[pypto.DYNAMIC, 64], DTYPES[dt]]][:nargs])
    f = pypto.jit(fn, backend=backend)
    torch_dt = torch.float16 if dt == "fp16" else torch.float32
    for n in (100, 64):
        args = _inputs(n, torch_dt, seed=n)[:nargs]
        x, w = args[0], args[1]
        blocks = torch.softmax((x.float() @ w.float()), dim=-1).to(torch_dt)
        if nargs == 2:
            assert_match(f(*args), blocks)
            continue
        a, b = args[2], args[3]
        s = torch.zeros(1, 64)
        for i in range(-(-n // B)):
            s = s * a[i:i + 1].float() + b[i:i + 1].float()
            s = s.to(torch_dt).float() if torch_dt == torch.float16 else s
        out, s_out = f(*args)
        assert_match(out, blocks)
        assert_match(s_out, s.to(torch_dt))
    assert f.trace_count == 1


def test_per_iteration_temporary_matches_torch_on_sim():
    fn = _with_annotations(exp_blocks, [pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32],
                                        pypto.Tensor[[64, 64], pypto.float32]])
    f = pypto.jit(fn, backend="sim")
    for n in (100, 32):
        x, w, _, _ = _inputs(n, torch.float32, seed=n)
        t = (x @ w).exp()
        assert_match(f(x, w), t / t.sum(-1, keepdim=True), tol=(1e-5, 1e-6))


# ---------------------------------------------------------------- overlap in simulated time
def _task_slices(path):
    """(task name, iteration, start, end, core) of every block the simulator ran in a loop."""
    out = []
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") != "X" or e.get("tid") != 0 or e["pid"] == 0:
            continue
        m = re.match(r"(\w+?)_\d+\[\w+=(\d+)\]", e["name"])
        if m:
            out.append((m.group(1), int(m.group(2)), e["ts"], e["ts"] + e["dur"], e["pid"]))
    return out


def _timing_run(fn, args, path, multibuffer=True):
    graph = lower(pypto.jit(fn, backend="reference").trace(*args), multibuffer=multibuffer)
    _, report = sim.run(graph, dict(zip(graph.inputs, args)), {}, timing_only=True, trace=str(path))
    return graph, report


EPS = 1e-6                               # us: the trace's times are floats


def _overlapping_iterations(slices):
    """(i, j), i < j, of iterations with blocks running at the same time on different cores."""
    return {(a[1], b[1]) for a in slices for b in slices
            if a[1] < b[1] and a[4] != b[4] and a[2] + EPS < b[3] and b[2] + EPS < a[3]}


@pytest.mark.parametrize("program, nargs", [(softmax_blocks, 2), (exp_blocks, 2), (chain_and_blocks, 4)],
                         ids=["independent", "temporary", "chain"])
def test_independent_iterations_overlap(program, nargs, tmp_path):
    """Tasks of different iterations run at the same time on different cores, and the loop takes less
    simulated time than with one copy of each workspace (where no two iterations overlap)."""
    args = _inputs(8 * B, torch.float16)[:nargs]
    graph, report = _timing_run(program, args, tmp_path / "mb.json")
    assert any(b.name.endswith("_copies") for b in graph.buffers.values())
    overlaps = _overlapping_iterations(_task_slices(tmp_path / "mb.json"))
    assert len({b - a for a, b in overlaps}) >= 1 and len(overlaps) >= 7
    _, single = _timing_run(program, args, tmp_path / "one.json", multibuffer=False)
    if program is not chain_and_blocks:      # (the chain's state is read by every iteration's task)
        assert not _overlapping_iterations([s for s in _task_slices(tmp_path / "one.json") if s[0] != "mul_add"])
    assert report.cycles < 0.8 * single.cycles


def test_loop_carried_chain_keeps_its_order(tmp_path):
    """The chain's task of iteration i starts after iteration i - 1's ended, in every iteration,
    while the independent blocks of other iterations run beside it."""
    args = _inputs(8 * B, torch.float16)
    _, _ = _timing_run(chain_and_blocks, args, tmp_path / "t.json")
    slices = _task_slices(tmp_path / "t.json")
    chain = {}
    for name, it, t0, t1, _ in slices:
        if name == "mul_add":
            s0, s1 = chain.get(it, (t0, t1))
            chain[it] = (min(s0, t0), max(s1, t1))
    assert sorted(chain) == list(range(8))
    for i in range(1, 8):
        assert chain[i][0] >= chain[i - 1][1] - EPS
    others = [s for s in slices if s[0] != "mul_add"]
    assert any(o[1] > i and o[2] + EPS < chain[i][1] and chain[i][0] + EPS < o[3] for i in chain for o in others)


def test_a_true_loop_carried_read_never_overlaps(tmp_path):
    """Block i reads what block i - 1 wrote: iteration i's first task starts after iteration i - 1's
    last ended, though its matmul result is a multi-buffered temporary."""
    x, w, _, _ = _inputs(8 * B, torch.float16)
    graph, _ = _timing_run(planted_chain, (x, w), tmp_path / "t.json")
    assert any(b.name.endswith("_copies") for b in graph.buffers.values())
    span = {}
    for _, it, t0, t1, _ in _task_slices(tmp_path / "t.json"):
        s0, s1 = span.get(it, (t0, t1))
        span[it] = (min(s0, t0), max(s1, t1))
    assert sorted(span) == list(range(1, 8))
    for i in range(2, 8):
        assert span[i][0] >= span[i - 1][1] - EPS
    assert not _overlapping_iterations(_task_slices(tmp_path / "t.json"))
    # and the result is still right
    ref = pypto.jit(planted_chain, backend="reference")(x.float(), w.float())
    assert_match(pypto.jit(planted_chain, backend="sim")(x.float(), w.float()), ref)


# ---------------------------------------------------------------- how many copies
def _copies(graph):
    return {b.name: b.shape[0] for b in graph.buffers.values() if b.name.endswith("_copies")}


def test_copies_are_bounded_by_the_trip_count_and_the_memory():
    x, w, _, _ = _inputs(2 * B, torch.float32)
    two = lower(pypto.jit(softmax_blocks, backend="reference").trace(x, w))
    assert _copies(two) and all(k == 2 for k in _copies(two).values())        # two iterations: two copies

    def huge(x):                         # temporaries of 64 MiB per iteration: more than L2 / 4
        out = pypto.zeros(4, 1, dtype=x.dtype)
        for i in pypto.loop(4):
            t = (x * (i + 1)).exp() @ x  # the exp is kept in GM for the matmul
            out[i:i + 1] = pypto.sum(pypto.sum(t, -1, keepdim=True), 0, keepdim=True)
        return out
    g = lower(pypto.jit(huge, backend="reference").trace(torch.empty(4096, 4096)))
    assert not _copies(g) and any(b.private_to for b in g.buffers.values())     # private, but one copy


def running_state(x, w):
    """A pure chain: every task of an iteration reads or writes the state s, or reads what one did."""
    s = pypto.zeros(32, 64, dtype=x.dtype)
    s[:, :] = x[0:32]
    for i in pypto.loop(6):
        t = s @ w
        s[:, :] = (t * 0.5).exp() - s
    return s


def test_a_running_state_loop_keeps_one_copy_and_its_result():
    """No iteration can start before the previous one ended, so copies would only take memory."""
    x, w, _, _ = _inputs(32, torch.float32)
    graph = lower(pypto.jit(running_state, backend="reference").trace(x, w))
    assert any(b.private_to for b in graph.buffers.values()) and not _copies(graph)
    s = x.clone()
    for _ in range(6):
        s = (s @ w * 0.5).exp() - s
    assert_match(pypto.jit(running_state, backend="sim")(x, w), s, tol=(1e-5, 1e-5))


def chains_per_head(x, w):
    """A running state per head (the inner loop is a chain), the heads independent of each other."""
    s = pypto.zeros(4 * 32, 64, dtype=x.dtype)
    for h in pypto.loop(4):
        for i in pypto.loop(3):
            t = pypto.view(s, [32, 64], [h * 32, 0]) @ w
            s[h * 32:(h + 1) * 32] = (t * 0.5).exp() + pypto.view(x, [32, 64], [(h * 3 + i) * 32, 0])
    return s


def test_chains_of_independent_heads_overlap(tmp_path):
    """Copies numbered over both loops: the chunk chains of different heads run at the same time,
    each head's chain stays in order, and the result is torch's."""
    x, w, _, _ = _inputs(12 * 32, torch.float32)
    graph, report = _timing_run(chains_per_head, (x, w), tmp_path / "t.json")
    assert _copies(graph)
    _, single = _timing_run(chains_per_head, (x, w), tmp_path / "one.json", multibuffer=False)
    assert report.cycles < 0.8 * single.cycles
    spans = {}
    for e in json.load(open(tmp_path / "t.json"))["traceEvents"]:
        m = re.match(r"\w+?_\d+\[\w+=(\d+), \w+=(\d+)\]", e.get("name", ""))
        if e.get("ph") == "X" and e.get("tid") == 0 and e["pid"] != 0 and m:
            key = (int(m.group(1)), int(m.group(2)))
            t0, t1 = spans.get(key, (e["ts"], e["ts"] + e["dur"]))
            spans[key] = (min(t0, e["ts"]), max(t1, e["ts"] + e["dur"]))
    assert sorted(spans) == [(h, i) for h in range(4) for i in range(3)]
    for h in range(4):
        for i in range(1, 3):
            assert spans[h, i][0] >= spans[h, i - 1][1] - EPS
    assert any(spans[a][0] + EPS < spans[b][1] and spans[b][0] + EPS < spans[a][1]
               for a in spans for b in spans if a[0] < b[0])
    s = x[0:128].clone() * 0
    for h in range(4):
        for i in range(3):
            s[h * 32:(h + 1) * 32] = (s[h * 32:(h + 1) * 32] @ w * 0.5).exp() + x[(h * 3 + i) * 32:(h * 3 + i + 1) * 32]
    assert_match(pypto.jit(chains_per_head, backend="sim")(x, w), s, tol=(1e-5, 1e-5))


def dynamic_chains_per_head(x, w):
    """chains_per_head over a DYNAMIC number of rows per head: chunk tails, block_dims of the size."""
    n = x.shape[0] // 4
    s = pypto.zeros(4, 64, dtype=x.dtype)
    for h in pypto.loop(4):
        for i in pypto.loop(pypto.ceildiv(n, 32)):
            rows = pypto.min(32, n - i * 32)
            xb = pypto.view(x, [32, 64], [h * n + i * 32, 0], valid_shape=[rows, 64])
            t = (xb @ (w * 0.5)).exp()               # w * 0.5: a task of a fixed block_dim
            s[h:h + 1] = pypto.view(s, [1, 64], [h, 0]) * 0.5 + pypto.sum(t, 0, keepdim=True)
    return s


def test_run_time_copies_of_dynamic_nested_loops_are_whole_numbers():
    """The number of copies and each copy's offset are integer expressions of the sizes (a float
    offset broke the dependency grid); results against torch at two sizes, one with tails."""
    fn = _with_annotations(dynamic_chains_per_head, [pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32],
                                                     pypto.Tensor[[64, 64], pypto.float32]])
    f = pypto.jit(fn, backend="sim")
    for n in (70, 32):
        x, w, _, _ = _inputs(4 * n, torch.float32, seed=n)
        s = torch.zeros(4, 64)
        for h in range(4):
            for i in range(-(-n // 32)):
                t = (x[h * n + i * 32:h * n + min(n, i * 32 + 32)] @ (w * 0.5)).exp()
                s[h] = s[h] * 0.5 + t.sum(0)
        assert_match(f(x, w), s, tol=(1e-5, 1e-5))
    graph = lower(pypto.jit(fn, backend="reference").trace(*_inputs(4 * 70, torch.float32)[:2]))
    assert _copies(graph)


def test_dynamic_trip_count_gets_a_run_time_number_of_copies():
    """With a DYNAMIC row count the number of copies is an expression of the size (at most the trip
    count), evaluated when the program runs: one block runs with one copy, many blocks with more."""
    fn = _with_annotations(softmax_blocks, [pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32],
                                            pypto.Tensor[[64, 64], pypto.float32]])
    x, w, _, _ = _inputs(B, torch.float32)
    graph = lower(pypto.jit(fn, backend="reference").trace(x, w))
    (k,) = _copies(graph).values()
    assert not isinstance(k, int) and k.free_symbols
    from pypto.runtime.host import GMBuffers, bind_sizes
    shapes = {}
    for n in (B, 40 * B):
        xs = torch.empty(n, 64)
        env = bind_sizes(graph, {"x": xs, "w": w}, {})
        shapes[n] = GMBuffers(graph, {"x": xs, "w": w}, env, timing_only=True).shapes
    name = next(iter(_copies(graph)))
    assert shapes[B][name][0] == 1 and shapes[40 * B][name][0] > 2

"""pypto.item of a tensor the same program computes (issue 16 item 3): the control program reads the
element once the tasks writing it are done (runtime/host/control.py stages the expansion; the sim
simulates what came before the read, cpu runs it). Each program on sim and cpu against torch, with
tails, a trip count of zero and dynamic sizes; the errors name the user's line."""

import pytest
import torch

import pypto
from pypto.testing.source import line_of
from pypto.errors import PyptoError

DYN = pypto.DYNAMIC
BACKENDS = ("sim", "cpu")
TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def close(got, want, dtype):
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), rtol=TOL[dtype], atol=TOL[dtype])


def counted_rows(backend, dt):
    """A count computed by a reduction, then a loop's trip count (rows in chunks of 16: tails)."""
    @pypto.jit(backend=backend)
    def f(flags: pypto.Tensor[[DYN], pypto.int32], x: pypto.Tensor[[DYN, 64], dt],
          out: pypto.Tensor[[DYN, 64], dt]):
        n = pypto.item(pypto.sum(flags, dim=0, keepdim=True), 0)
        for c in pypto.loop(pypto.ceildiv(n, 16)):
            rows = pypto.min(16, n - c * 16)
            xv = pypto.view(x, [16, 64], [c * 16, 0], valid_shape=[rows, 64])
            pypto.assemble(xv * 2.0 + 1.0, [c * 16, 0], out)
    return f


def counted_rows_ref(flags, x, out):
    n = int(flags.sum())
    out = out.clone()
    out[:n] = (x[:n].float() * 2.0 + 1.0).to(x.dtype)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_count_as_trip_count_sim(dtype):
    f = counted_rows("sim", dtype)
    for flags in ([1, 0, 1, 1, 0, 1, 1], [1] * 37 + [0] * 3, [0] * 5):     # tails, 37 rows, a count of zero
        flags = torch.tensor(flags, dtype=torch.int32)
        x = torch.randn(len(flags), 64).to(dtype)
        out = torch.full((len(flags), 64), -7.0).to(dtype)
        want = counted_rows_ref(flags, x, out)
        f(flags, x, out)
        close(out, want, dtype)
        notes = [n for n in pypto.last_report().notes if n.startswith("pypto.item at")]
        assert len(notes) == 1 and f":{line_of(f.fn, 'pypto.item(')}" in notes[0], notes
        assert "flags" not in notes[0] and "[0] of a tensor this program computes" in notes[0], notes
        waited = float(notes[0].split("waited ")[1].split()[0])
        assert waited > 0                   # the reduction runs after the launch: the AICPU waits for it


def test_count_as_trip_count_cpu():
    f = counted_rows("cpu", torch.float16)
    for flags in ([1] * 21 + [0] * 2, [0, 0, 0]):
        flags = torch.tensor(flags, dtype=torch.int32)
        x = torch.randn(len(flags), 64).half()
        out = torch.zeros(len(flags), 64).half()
        want = counted_rows_ref(flags, x, out)
        f(flags, x, out)
        close(out, want, torch.float16)
        assert any(n.startswith("pypto.item at") for n in pypto.last_report().notes)


def offset_view(backend):
    """An offset computed, then a view's offset (read) and an assemble's (write)."""
    @pypto.jit(backend=backend)
    def f(flags: pypto.Tensor[[DYN], pypto.int32], x: pypto.Tensor[[DYN, 32], pypto.float32],
          out: pypto.Tensor[[8, 32], pypto.float32], placed: pypto.Tensor[[DYN, 32], pypto.float32]):
        o = pypto.item(pypto.sum(flags, dim=0, keepdim=True), 0)
        xv = pypto.view(x, [8, 32], [o, 0])
        out[:, :] = xv + 1.0
        pypto.assemble(xv * 3.0, [o, 0], placed)
    return f


@pytest.mark.parametrize("backend", BACKENDS)
def test_offset_as_view_offset(backend):
    f = offset_view(backend)
    for flags, rows in (([1, 1, 0, 1], 19), ([0, 0], 8), ([1] * 9, 17)):   # offsets 3, 0, 9 (the last 8 rows)
        flags = torch.tensor(flags, dtype=torch.int32)
        x = torch.randn(rows, 32)
        out, placed = torch.zeros(8, 32), torch.zeros(rows, 32)
        f(flags, x, out, placed)
        o = int(flags.sum())
        want = torch.zeros(rows, 32)
        want[o:o + 8] = x[o:o + 8] * 3.0
        close(out, x[o:o + 8] + 1.0, torch.float32)
        close(placed, want, torch.float32)


def chained(backend):
    """Two reads in a chain: a count n (computed), then a sum over the first n values computed by a loop
    of n trips, read as m: the trip count of the rows written."""
    @pypto.jit(backend=backend)
    def f(flags: pypto.Tensor[[DYN], pypto.int32], vals: pypto.Tensor[[DYN], pypto.int32],
          x: pypto.Tensor[[DYN, 64], pypto.float32], out: pypto.Tensor[[DYN, 64], pypto.float32]):
        n = pypto.item(pypto.sum(flags, dim=0, keepdim=True), 0)
        acc = pypto.zeros(1, dtype=pypto.int32)
        for i in pypto.loop(n):
            acc[0:1] = acc + pypto.view(vals, [1], [i])
        m = pypto.item(acc, 0)
        for c in pypto.loop(pypto.ceildiv(m, 16)):
            rows = pypto.min(16, m - c * 16)
            xv = pypto.view(x, [16, 64], [c * 16, 0], valid_shape=[rows, 64])
            pypto.assemble(xv * 2.0, [c * 16, 0], out)
    return f


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_of_two_reads(backend):
    f = chained(backend)
    cases = [([1, 1, 1, 0, 0], [5, 9, 4, 30, 30], 40),       # n 3, m 18: a tail of 2
             ([0, 0, 0], [7, 7, 7], 8)]                       # n 0: the loop of n runs no trip, m 0
    for flags, vals, rows in cases:
        flags, vals = torch.tensor(flags, dtype=torch.int32), torch.tensor(vals, dtype=torch.int32)
        x, out = torch.randn(rows, 64), torch.full((rows, 64), 5.0)
        f(flags, vals, x, out)
        m = int(vals[:int(flags.sum())].sum())
        want = torch.full((rows, 64), 5.0)
        want[:m] = x[:m] * 2.0
        close(out, want, torch.float32)
        notes = [n for n in pypto.last_report().notes if n.startswith("pypto.item at")]
        assert len(notes) == 2, notes       # each read waited for its writers


def test_reference_backend_reads_the_computed_value():
    f = pypto.jit(counted_rows("sim", torch.float32).fn, backend="reference")
    flags = torch.tensor([1, 1, 0, 1], dtype=torch.int32)
    x, out = torch.randn(4, 64), torch.zeros(4, 64)
    f(flags, x, out)
    close(out, counted_rows_ref(flags, x, torch.zeros(4, 64)), torch.float32)


# ------------------------------------------------------------------------------------------ errors
def test_timing_only_reads_the_reference_values():
    """A timing-only sim run computes no data: the computed tensors it reads come from the reference
    interpreter (the report says so), and the trip count they give shows in the tasks run."""
    def body(flags, x, out):
        n = pypto.item(pypto.sum(flags, dim=0, keepdim=True), 0)
        for i in pypto.loop(n):
            out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0])
    f = pypto.jit(body, backend="sim", timing_only=True)
    tasks = []
    for n in (2, 5, 0):
        f(torch.tensor([1] * n + [0] * (8 - n), dtype=torch.int32), torch.randn(8, 64), torch.zeros(8, 64))
        r = pypto.last_report()
        assert r.timing_only and any("computed by the reference interpreter" in m for m in r.notes), r.notes
        tasks.append(r.tasks)
    assert tasks[0] - tasks[2] == 2 and tasks[1] - tasks[2] == 5          # one task per row read


def test_timing_only_names_a_read_it_cannot_know():
    """An argument's new value read in a timing-only run: no data, and the old data would be wrong."""
    def body(lens, x, out):
        lens[0:1] = pypto.sum(lens, dim=0, keepdim=True)
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 64], [i, 0])
    f = pypto.jit(body, backend="sim", timing_only=True)
    with pytest.raises(PyptoError, match="timing-only run computes no data") as e:
        f(torch.ones(2, dtype=torch.int32), torch.randn(4, 64), torch.zeros(4, 64))
    assert e.value.loc.line == line_of(body, "pypto.item(")


def test_computed_inside_a_loop_body_is_refused():
    def body(flags, x, out):
        for b in pypto.loop(2):
            s = pypto.view(flags, [2], [2 * b]) + 1
            k = pypto.item(s, 0)
            out[b:b + 1, :] = pypto.view(x, [1, 8], [k, 0])
    with pytest.raises(PyptoError, match="computed by 'add'.*inside a loop body") as e:
        pypto.jit(body, backend="sim")(torch.zeros(4, dtype=torch.int32), torch.randn(4, 8), torch.zeros(2, 8))
    assert e.value.loc.line == line_of(body, "pypto.item(s, 0)")


def test_argument_written_after_the_read():
    """An argument read, then written by a later task: the read would race the write (the old error)."""
    def body(lens, x, out):
        for i in pypto.loop(pypto.item(lens, 0)):
            out[i:i + 1, :] = pypto.view(x, [1, 8], [i, 0])
        lens[0:1] = pypto.sum(lens, dim=0, keepdim=True)
    with pytest.raises(PyptoError, match="which a task of this program writes") as e:
        pypto.jit(body, backend="sim")(torch.ones(2, dtype=torch.int32), torch.randn(4, 8), torch.zeros(4, 8))
    assert e.value.loc.line == line_of(body, "pypto.item(lens, 0)")


def _lowered(f, args):
    from pypto.passes.pipeline import lower
    from pypto.runtime.host import GMBuffers, Geometry, bind_sizes
    eg = lower(f.trace(*args))
    tensors = dict(zip(eg.inputs, args))
    env = bind_sizes(eg, tensors, {})
    return eg, env, Geometry(GMBuffers(eg, tensors, env))


def test_element_no_task_writes():
    """The host reads a computed element only after a task wrote it: with its writer taken out of the
    control program the read is an error at its line, not a read of an unwritten buffer."""
    from pypto.runtime.host import expand
    f = counted_rows("sim", torch.float32)
    eg, env, geo = _lowered(f, (torch.tensor([1, 1], dtype=torch.int32), torch.randn(2, 64), torch.zeros(2, 64)))
    source = next(iter(eg.scalar_reads.values())).buffer
    eg.program = [it for it in eg.program if getattr(it, "gm_args", {}).get("out0") != source]
    with pytest.raises(PyptoError, match="no task has written it") as e:
        expand(eg, env, geo, sync=lambda *a: None)
    assert e.value.loc.line == line_of(f.fn, "pypto.item(")


def test_backend_without_staging_says_so():
    """npu's run expands the control program without a ``sync`` (host/control.expand): a read of a
    computed tensor is a clear error there, not a read of stale data."""
    from pypto.runtime.host import expand
    f = counted_rows("sim", torch.float32)
    eg, env, geo = _lowered(f, (torch.tensor([1, 1], dtype=torch.int32), torch.randn(2, 64), torch.zeros(2, 64)))
    with pytest.raises(PyptoError, match="not supported on npu yet") as e:
        expand(eg, env, geo)
    assert e.value.loc.line == line_of(f.fn, "pypto.item(")


# ------------------------------------------------------------------------------------------ the MoE block
@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_block_as_one_program(backend):
    """models/qwen3_next/moe.py's block as one program (its experts' trip counts read from the dispatch
    it computes) gives the two programs' answer exactly, and the oracle's; on sim it takes fewer cycles
    than the two launches (one launch's start and drain fewer)."""
    from models.qwen3_next import moe_reference as R
    from models.qwen3_next.config import Qwen3NextConfig
    from models.qwen3_next.moe import Qwen3NextSparseMoeBlock, build_block_program
    c = Qwen3NextConfig.tiny()
    st = R.random_state(c, generator=torch.Generator().manual_seed(0))
    m = Qwen3NextSparseMoeBlock(c, dtype=torch.float32, rows_per_chunk=16)
    m.load_state_dict(st)
    m.compile(backend=backend)
    T, H, k = 37, c.hidden_size, c.num_experts_per_tok
    x = torch.randn(1, T, H, generator=torch.Generator().manual_seed(1))
    two = m(x)
    block = build_block_program(c, pypto.float32, 16, backend=backend)
    gu, dn = m.experts.gate_up_proj.data, m.experts.down_proj.data
    out, _ = block(x.reshape(T, H), m.gate.weight.data, gu.reshape(-1, H), dn.reshape(-1, dn.shape[-1]),
                   m.shared_expert.gate_proj.weight.data, m.shared_expert.up_proj.weight.data,
                   m.shared_expert.down_proj.weight.data, m.shared_expert_gate.weight.data, torch.empty(T * k, H))
    assert torch.equal(out.reshape(1, T, H), two)
    want = R.sparse_moe_block(x, st, k, c.norm_topk_prob)
    assert ((two - want).pow(2).mean() / want.pow(2).mean()).sqrt().item() <= 1e-4
    notes = [n for n in pypto.last_report().notes if n.startswith("pypto.item at")]
    assert len(notes) == 2 and all(f"read {c.num_experts} elements" in n for n in notes), notes
    if backend == "sim":
        assert pypto.last_report().cycles < sum(r.cycles for r in m.last_reports)

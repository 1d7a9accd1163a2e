"""Loops with run-time trip counts, writes into tensors (assemble / setitem, in place), concat, pad,
views, and the ExecutionGraph structure they lower to."""
import torch

import pypto
from pypto.ir.execution import Loop
from .passes_helpers import gm_workspaces, lowered, rand, sim_vs_reference


def row_blocks(x):
    n = x.shape[0]
    out = pypto.zeros(n, 64)
    for i in pypto.loop(pypto.ceildiv(n, 16)):
        v = pypto.view(x, [16, 64], [i * 16, 0], valid_shape=[pypto.min(16, n - i * 16), 64])
        pypto.assemble(v.exp() * 2, [i * 16, 0], out)
    return out


def test_loop_over_row_blocks_with_tail_runtime_trip_count():
    @pypto.jit(backend="sim")
    def f(x: pypto.Tensor[[pypto.DYNAMIC, 64], pypto.float32]):
        return row_blocks(x)
    for m in (5, 16, 40):
        x = rand((m, 64), seed=m)
        torch.testing.assert_close(f(x), (x.exp() * 2), rtol=1e-6, atol=1e-6)
    assert f.trace_count == 1


def test_loop_lowers_to_execution_loop_writing_in_place():
    eg = lowered(row_blocks, rand((40, 64)))
    loops = [it for it in eg.program if isinstance(it, Loop)]
    assert len(loops) == 1 and str(loops[0].stop) == "3"
    (task,) = loops[0].body
    assert task.writes[0].buffer.startswith("out0")          # straight into the output, no copy
    assert not gm_workspaces(eg)


def test_setitem_in_loop_reads_and_writes_the_carried_tensor():
    def h(x, y):
        for i in pypto.loop(3):
            y[i] = x[i] + y[i]
        return y * 1
    sim_vs_reference(h, rand((3, 8), seed=1), rand((3, 8), seed=2))


def test_inplace_argument_write():
    def h(x, out):
        out[1:3, :] = x[0:2, :] * 3
    sim_vs_reference(h, rand((4, 8), seed=3), rand((4, 8), seed=4))


def test_concat_pad_and_views():
    def c(x, y):
        return pypto.concat([x * 2, y], 0), pypto.pad(x, (1, 2), value=3.0), x[1:, 2:5] + 1
    sim_vs_reference(c, rand((3, 8), seed=5), rand((5, 8), seed=6))


def test_nested_loops_accumulate():
    def f(x):
        acc = pypto.zeros(4, 32)
        for i in pypto.loop(2):
            for j in pypto.loop(3):
                acc[:, :] = acc + x[i * 3 + j]
        return acc
    sim_vs_reference(f, rand((6, 4, 32), seed=7))

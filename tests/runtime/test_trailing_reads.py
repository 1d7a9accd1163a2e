"""Data scalars read after the control program's last task (issue 16): the sim charges them at the run's end
(runtime/host/control.Submissions.trailing_reads), once; a read before a task is charged to that task."""
import dataclasses

import torch

import pypto
from pypto.ir.execution import Loop, Task
from pypto.passes.pipeline import lower
from pypto.runtime import sim

BIG = 10 ** 6      # cycles per read: far above the program's own time, so the read decides the end


@pypto.jit(backend="sim")
def f(lens: pypto.Tensor[[2], pypto.int32], x: pypto.Tensor[[8, 64], pypto.float32],
      out: pypto.Tensor[[8, 64], pypto.float32]):
    pypto.assemble(x * 2.0, [0, 0], out)                     # the first task: no read before it
    for i in pypto.loop(pypto.item(lens, 0)):                # read after it; 0 trips: no task of the loop
        pypto.assemble(pypto.view(x, [1, 64], [i, 0]) + 1.0, [i, 0], out)


def _program(ends_with_the_loop: bool):
    x = torch.randn(8, 64)
    eg = lower(f.trace(torch.zeros(2, dtype=torch.int32), x, torch.zeros(8, 64)))
    kinds = [type(it) for it in eg.program]
    assert kinds[0] is Task and Loop in kinds and kinds[-1] is Task, kinds   # the loop result's copy last
    if ends_with_the_loop:       # without that copy the loop, and so the read, is the program's end
        eg = dataclasses.replace(eg, program=eg.program[:-1])
    return eg, x


def cycles(lens, read_cycles, ends_with_the_loop=True):
    spec = pypto.get_machine()
    machine = dataclasses.replace(spec, dispatch={**spec.dispatch, "scalar_read_cycles": read_cycles})
    eg, x = _program(ends_with_the_loop)
    args = dict(zip(eg.inputs, (torch.tensor(lens, dtype=torch.int32), x, torch.zeros(8, 64))))
    _, report = sim.run(eg, args, {}, machine=machine)
    return report.cycles


def test_a_read_after_the_last_task_is_charged_at_the_end():
    extra = cycles([0, 0], BIG) - cycles([0, 0], 0)
    # the control thread ends BIG after its last submission; the run waits for it (was: 0 extra)
    assert 0.9 * BIG < extra <= BIG


def test_a_read_before_a_task_is_charged_once():
    # a task follows the read (the loop's one trip, or the copy after a loop of 0 trips): it is submitted
    # BIG later, less the time it waited anyway for the first task; nothing is charged again at the end
    for lens, whole in (([1, 0], True), ([0, 0], False), ([1, 0], False)):
        extra = cycles(lens, BIG, ends_with_the_loop=whole) - cycles(lens, 0, ends_with_the_loop=whole)
        assert 0.9 * BIG < extra <= BIG, (lens, whole)


def test_the_jit_run_still_gives_torchs_answer():
    for n in (0, 3):
        x, out = torch.randn(8, 64), torch.zeros(8, 64)
        f(torch.tensor([n, 0], dtype=torch.int32), x, out)
        ref = x * 2.0
        ref[:n] = x[:n] + 1.0
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)

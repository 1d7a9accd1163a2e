"""The control program as the sim's scheduler sees it: the host's task instances
(runtime/host/control.py) with their scheduling state, each knowing the instances that wait for it,
and the submissions (``Batch``) the AICPU makes of them."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..host import TaskInstance, expand as expand_program
from ..host.control import Submissions


class SimTask(TaskInstance):
    """A task instance and where the scheduler has it: submitted, blocks left to start, producers
    still running (``deps_left``), when the latest of them finished (``fresh``)."""
    __slots__ = ("dependents", "deps_left", "batch", "submitted", "remaining", "fresh", "ready", "done_at")

    def __init__(self, *args):
        super().__init__(*args)
        self.dependents: list = []
        self.deps_left = 0
        self.batch = None
        self.submitted = False
        self.remaining = self.block_dim
        self.fresh = 0.0
        self.ready = False
        self.done_at = None             # the cycle it finished


@dataclass
class Batch:
    """One submission of the control program: a task, or ``stitch`` iterations of a loop."""
    instances: list = field(default_factory=list)
    dispatched: bool = False
    requested: bool = False


def expand(graph, env: dict, geo, stitch: int = 1, sched=None) -> tuple[list, list]:
    """(SimTasks in program order, the Batches not yet handed to ``sched``: a ``Submissions`` with the
    reads after the last task). With ``sched`` (a Scheduler inside ``staged``) a control program that reads a
    tensor it computes hands the batches expanded so far to it and simulates them until the writers are done."""
    wired = [0]

    def batches(groups, instances):
        for inst in instances[wired[0]:]:
            for d in inst.deps:
                if instances[d].done_at is None:
                    inst.deps_left += 1
                    instances[d].dependents.append(inst)
        wired[0] = len(instances)
        out = []
        for group in groups:
            batch = Batch(group)
            for inst in group:
                inst.batch = batch
            out.append(batch)
        return out

    def sync(pending, producers, instances):
        sched.submit(batches(pending, instances))
        return sched.wait_for([instances[p] for p in producers])

    instances, submissions = expand_program(graph, env, geo, stitch, instance=SimTask,
                                            sync=sync if sched is not None else None)
    rest = Submissions(batches(submissions[submissions.staged:], instances))
    rest.trailing_reads, rest.syncs = submissions.trailing_reads, submissions.syncs
    return instances, rest

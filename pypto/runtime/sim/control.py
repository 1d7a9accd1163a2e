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
    __slots__ = ("dependents", "deps_left", "batch", "submitted", "remaining", "fresh", "ready")

    def __init__(self, *args):
        super().__init__(*args)
        self.dependents: list = []
        self.deps_left = 0
        self.batch = None
        self.submitted = False
        self.remaining = self.block_dim
        self.fresh = 0.0
        self.ready = False


@dataclass
class Batch:
    """One submission of the control program: a task, or ``stitch`` iterations of a loop."""
    instances: list = field(default_factory=list)
    dispatched: bool = False
    requested: bool = False


def expand(graph, env: dict, geo, stitch: int = 1) -> tuple[list, list]:
    """(SimTasks in program order, their Batches: a ``Submissions`` with the reads after the last task)."""
    instances, submissions = expand_program(graph, env, geo, stitch, instance=SimTask)
    for inst in instances:
        inst.deps_left = len(inst.deps)
        for d in inst.deps:
            instances[d].dependents.append(inst)
    batches = Submissions()
    batches.trailing_reads = submissions.trailing_reads
    for group in submissions:
        batch = Batch(group)
        for inst in group:
            inst.batch = batch
        batches.append(batch)
    return instances, batches

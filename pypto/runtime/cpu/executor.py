"""The cpu backend's run order: task instances (runtime/host/control.py, with their dependencies)
launched on host threads, each after the instances it depends on, independent ones side by side."""
from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ...errors import PyptoError
from ..host import TaskInstance


class CpuTask(TaskInstance):
    """A task instance and its marshalled launch (library.PreparedLaunch), made on first use and
    kept with the run plan."""
    __slots__ = ("launch",)

    def __init__(self, *args):
        super().__init__(*args)
        self.launch = None


def execute(instances: list, launch, threads: int) -> None:
    """Launch every instance after its dependencies; ``launch(inst, n_threads)`` runs one."""
    if threads <= 1 or len(instances) <= 1 or all(i.block_dim >= threads for i in instances):
        for inst in instances:
            launch(inst, threads)
        return
    ids = {i.id for i in instances}
    done: set[int] = {d for i in instances for d in i.deps} - ids    # run before (a staged control program)
    free = threads
    lock = threading.Lock()
    pending = list(instances)
    running = {}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while pending or running:
            started = True
            while started:
                started = False
                for inst in pending:
                    if free <= 0:
                        break
                    if inst.deps <= done:
                        n = max(1, min(free, inst.block_dim))
                        with lock:
                            free -= n
                        running[pool.submit(launch, inst, n)] = (inst, n)
                        pending.remove(inst)
                        started = True
                        break
            if not running:
                raise PyptoError("the cpu backend's task order has a cycle")
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in finished:
                inst, n = running.pop(fut)
                fut.result()
                done.add(inst.id)
                free += n

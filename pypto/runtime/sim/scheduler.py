"""MPMD scheduling: the AICPU control thread submits task instances, dispatcher threads hand them to
free cores, cores run them; time advances event by event (submissions, dispatches, block ends).

* Launch (machine [launch]): the control thread starts ``start_cycles`` after the host's launch, and
  the host sees the end ``drain_cycles`` after the last block finished.
* Control thread (AICPU 0): submits the submissions in program order, ``submit_cycles`` each, plus
  ``scalar_read_cycles`` for each data scalar (``pypto.item``) it read from GM to expand the submission
  (those read after the last submission, ``trailing_reads`` of the batches, at the end: the run waits for them).
  A read of a tensor the program computes stages the run (``staged``): the submissions so far are
  simulated until the tasks writing the element have finished (``wait_for``), the control thread waits
  for them, then reads it at the same ``scalar_read_cycles`` and goes on submitting.
* Dispatchers (the other AICPU threads): a submission whose first task is ready (submitted, all
  producers finished) takes the earliest-free dispatcher for ``task_dispatch_cycles``; once
  dispatched, each of its tasks goes to the cores as soon as its producers finished.
* Cores: a task of ``block_dim`` n runs n block instances, each on a free core of its kernel's type —
  one AIV, one AIC, or a whole cluster (1 AIC + its AIV sub-blocks) for a cube+vector kernel.
* Running block instances (engine.Unit) advance a quantum of statements at a time, always the one
  furthest behind in simulated time, interleaved with the scheduler's events in time order — so
  every core's GM transfers claim shared bandwidth in (nearly) time order.

A run longer than a few seconds shows a progress bar of task instances finished (runtime/progress.py).
Where a kernel launch's fixed costs belong: the first submission's time (``_run``: ``t`` before the loop)
and the end of the run (``self.end``, returned by ``_run``).

Policies choose among the block instances waiting for cores (one queue per kind of cores needed):
  ``fifo``      oldest first (one that cannot get its core type lets later ones pass);
  ``locality``  the one whose producers finished most recently first (its inputs are the likeliest
                to be in L2), on the core that ran one of its producers when that core is free.
"""
from __future__ import annotations

import heapq
from contextlib import contextmanager

from ...errors import PyptoError, SimError
from ..progress import progress

POLICIES = ("fifo", "locality")
_SUBMIT, _DISPATCHED, _BLOCK_DONE = 0, 1, 2


class Scheduler:
    def __init__(self, state, spec, launch, policy: str):
        if policy not in POLICIES:
            raise PyptoError(f"unknown scheduling policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.state, self.spec, self.launch, self.policy = state, spec, launch, policy
        d = spec.dispatch
        self.submit_cycles = d.get("submit_cycles", 0)
        self.dispatch_cycles = d.get("task_dispatch_cycles", 0)
        self.read_cycles = d.get("scalar_read_cycles", 0)
        self.start_cycles = spec.launch.get("start_cycles", 0)
        self.drain_cycles = spec.launch.get("drain_cycles", 0)
        self.threads = [0.0] * max(1, spec.cores.get("aicpu", 2) - 1)
        self.aic_busy = [False] * len(state.aic)
        self.aiv_busy = [False] * len(state.aiv)
        self.n_free_aic, self.n_free_aiv = len(state.aic), len(state.aiv)
        self.per = state.aiv_per_aic
        # block instances waiting for cores, one priority queue per kind of cores they need
        self.queues: dict = {"AIV": [], "AIC": [], "cluster": []}
        self.enqueued = 0
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.end = 0.0
        self.ctrl = 0.0
        self.dispatch_slices: list = []
        self.running: list = []          # heap of (unit time, seq, unit)
        self.bar, self.grow_bar = None, False

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self, batches) -> float:
        """Simulate every submission; the cycle the last event happened. A long run shows a progress bar
        of task instances finished (runtime/progress.py: only on a terminal, only after a few seconds)."""
        with self.staged(sum(len(b.instances) for b in batches)):
            self.submit(batches)
            return self.finish(getattr(batches, "trailing_reads", 0))

    @contextmanager
    def staged(self, total=None):
        """A run handed its submissions in stages (``submit``, ``wait_for``, ``finish``): a control
        program that reads a tensor it computes (runtime/host/control.py's ``sync``)."""
        with progress(total=total, desc="simulating", unit="task") as bar:
            self.bar, self.grow_bar = bar, total is None     # the total grows with each submit
            self.ctrl = float(self.start_cycles)       # the control thread's clock
            if self.ctrl:
                self.dispatch_slices.append((0, 0.0, self.ctrl, "launch", 0))   # the AICPU's control thread starting
            self.end = self.ctrl
            try:
                yield self
            finally:
                self.bar = None

    def submit(self, batches) -> None:
        if self.grow_bar:
            self.bar.total = (getattr(self.bar, "total", None) or 0) + sum(len(b.instances) for b in batches)
        read = self.read_cycles
        for b in batches:
            # the data scalars the control thread read to expand this submission (pypto.item) come first
            self.ctrl += self.submit_cycles + (read * sum(i.control_reads for i in b.instances) if read else 0)
            self.push(self.ctrl, _SUBMIT, b)
        self.end = max(self.end, self.ctrl)

    def wait_for(self, insts) -> float:
        """Simulate until every one of ``insts`` (submitted) has finished; the control thread waits for
        them. Returns the cycles it waited."""
        self._advance(lambda: all(i.done_at is not None for i in insts))
        if any(i.done_at is None for i in insts):
            raise SimError("internal: the control program waits for a task that never runs")
        t = max(i.done_at for i in insts)
        waited = max(0.0, t - self.ctrl)
        self.ctrl = max(self.ctrl, t)
        self.end = max(self.end, self.ctrl)
        return waited

    def finish(self, trailing_reads: int = 0) -> float:
        self.ctrl += self.read_cycles * trailing_reads      # reads after the last task: the run's end
        self.end = max(self.end, self.ctrl)
        self._advance(None)
        if self.drain_cycles:
            self.dispatch_slices.append((0, self.end, self.end + self.drain_cycles, "drain", 0))
        return self.end + self.drain_cycles

    def _advance(self, stop) -> None:
        """Process events and running blocks in time order until none is left or ``stop()`` holds."""
        events, running = self.events, self.running
        while events or running:
            if running and (not events or running[0][0] < events[0][0]):
                _, _, unit = heapq.heappop(running)
                try:
                    finished = unit.step()
                    end = unit.finish() if finished else None
                except SimError as e:
                    raise _in_context(e, unit) from None
                if finished:
                    self.launch.end_block(unit, end)
                    self.push(end, _BLOCK_DONE, (unit.inst, unit.cores))
                else:
                    self.seq += 1
                    heapq.heappush(running, (unit.time(), self.seq, unit))
                continue
            t, _, kind, payload = heapq.heappop(events)
            self.now = t
            if t > self.end:
                self.end = t
            if kind == _SUBMIT:
                for inst in payload.instances:
                    inst.submitted = True
                    if inst.deps_left == 0:
                        self.ready(inst)
            elif kind == _DISPATCHED:
                payload.dispatched = True
                for inst in payload.instances:
                    if inst.submitted and inst.deps_left == 0:
                        self.enqueue(inst)
            else:
                inst, cores = payload
                self.release(cores)
                inst.remaining -= 1
                if inst.remaining == 0:
                    self.finished(inst)
            self.assign()
            if stop is not None and stop():
                return

    # ------------------------------------------------------------------ task life cycle
    def ready(self, inst):
        inst.ready = True
        b = inst.batch
        if b.dispatched:
            self.enqueue(inst)
        elif not b.requested:
            b.requested = True
            i = min(range(len(self.threads)), key=self.threads.__getitem__)
            start = max(self.now, self.threads[i])
            end = start + self.dispatch_cycles
            self.threads[i] = end
            self.dispatch_slices.append((i + 1, start, end, b.instances[0].label, len(b.instances)))
            self.push(end, _DISPATCHED, b)

    def enqueue(self, inst):
        if inst.block_dim <= 0:
            self.finished(inst)
            return
        queue = self.queues[self.launch.kind(inst)]
        for k in range(inst.block_dim):
            self.enqueued += 1
            key = (-inst.fresh, inst.id, k) if self.policy == "locality" else (self.enqueued,)
            heapq.heappush(queue, (key, self.enqueued, inst, k))

    def finished(self, inst):
        self.bar.update(1)
        inst.done_at = self.now
        for d in inst.dependents:
            d.deps_left -= 1
            if self.now > d.fresh:
                d.fresh = self.now
            if d.deps_left == 0 and d.submitted:
                self.ready(d)

    # ------------------------------------------------------------------ cores
    def cluster_free(self, c) -> bool:
        if self.aic_busy[c]:
            return False
        vs = range(c * self.per, (c + 1) * self.per)
        return all(v < len(self.aiv_busy) and not self.aiv_busy[v] for v in vs)

    def free_cores(self, kind, inst):
        """The cores the block instance would take now — (kind, index) — or None."""
        st = self.state
        if (kind != "AIV" and not self.n_free_aic) or (kind != "AIC" and self.n_free_aiv < (self.per if kind == "cluster" else 1)):
            return None
        if kind == "cluster":
            pool = st.aic
            cands = [c for c in range(len(st.aic)) if self.cluster_free(c)]
        else:
            pool, busy = (st.aiv, self.aiv_busy) if kind == "AIV" else (st.aic, self.aic_busy)
            cands = [i for i, b in enumerate(busy) if not b]
        if not cands:
            return None
        if self.policy == "locality" and inst.deps:
            for c in cands:
                if pool[c].last_task in inst.deps:
                    return (kind, c)
        return (kind, cands[0])

    def occupy(self, cores, flag: bool):
        kind, i = cores
        d = -1 if flag else 1
        if kind in ("AIC", "cluster"):
            self.aic_busy[i] = flag
            self.n_free_aic += d
        if kind == "AIV":
            self.aiv_busy[i] = flag
            self.n_free_aiv += d
        elif kind == "cluster":
            for v in range(i * self.per, (i + 1) * self.per):
                self.aiv_busy[v] = flag
            self.n_free_aiv += d * self.per

    def release(self, cores):
        self.occupy(cores, False)

    def assign(self):
        """Start waiting block instances while cores are free: the best head among the queues whose
        cores are available (fifo: the oldest; locality: the freshest inputs)."""
        queues = self.queues
        while True:
            best = None
            for kind, q in queues.items():
                if q and (best is None or q[0][0] < best[1][0][0]):
                    cores = self.free_cores(kind, q[0][2])
                    if cores is not None:
                        best = (kind, q, cores)
            if best is None:
                return
            kind, q, cores = best
            _, _, inst, k = heapq.heappop(q)
            self.start(inst, k, cores)

    def start(self, inst, k, cores):
        self.occupy(cores, True)
        unit = self.launch.start_block(inst, k, cores, self.now)
        self.seq += 1
        heapq.heappush(self.running, (self.now, self.seq, unit))


def _in_context(e: SimError, unit) -> SimError:
    """The same error, saying which task instance, block and cores it happened in."""
    inst = unit.inst
    cores = ", ".join(core.name for core, _, _ in unit.parts)
    where = f"while running task {inst.label}, block {unit.k} of {inst.block_dim}, on {cores}"
    return SimError(f"{e.message}\n  {where}", loc=e.loc, hint=e.hint)

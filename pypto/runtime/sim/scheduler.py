"""MPMD scheduling: the AICPU control thread submits task instances, dispatcher threads hand them to
free cores, cores run them; time advances event by event (submissions, dispatches, block ends).

* Control thread (AICPU 0): submits the submissions in program order, ``submit_cycles`` each.
* Dispatchers (the other AICPU threads): a submission whose first task is ready (submitted, all
  producers finished) takes the earliest-free dispatcher for ``task_dispatch_cycles``; once
  dispatched, each of its tasks goes to the cores as soon as its producers finished.
* Cores: a task of ``block_dim`` n runs n block instances, each on a free core of its kernel's type —
  one AIV, one AIC, or a whole cluster (1 AIC + its AIV sub-blocks) for a cube+vector kernel.
* Running block instances (engine.Unit) advance a quantum of statements at a time, always the one
  furthest behind in simulated time, interleaved with the scheduler's events in time order — so
  every core's GM transfers claim shared bandwidth in (nearly) time order.

Policies choose among the block instances waiting for cores:
  ``fifo``      oldest first (one that cannot get its core type lets later ones pass);
  ``locality``  the one whose producers finished most recently first (its inputs are the likeliest
                to be in L2), on the core that ran one of its producers when that core is free.
"""
from __future__ import annotations

import heapq

from ...errors import PyptoError, SimError
from ...ir.block import CoreType

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
        self.threads = [0.0] * max(1, spec.cores.get("aicpu", 2) - 1)
        self.aic_busy = [False] * len(state.aic)
        self.aiv_busy = [False] * len(state.aiv)
        self.per = state.aiv_per_aic
        self.waiting: list = []          # (instance, block_idx) waiting for cores
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.end = 0.0
        self.dispatch_slices: list = []
        self.running: list = []          # heap of (unit time, seq, unit)

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self, batches) -> float:
        t = 0.0
        for b in batches:
            t += self.submit_cycles
            self.push(t, _SUBMIT, b)
        self.end = t
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
        return self.end

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
        for k in range(inst.block_dim):
            self.waiting.append((inst, k))

    def finished(self, inst):
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
        if kind == "AIV":
            self.aiv_busy[i] = flag
        elif kind == "AIC":
            self.aic_busy[i] = flag
        else:
            self.aic_busy[i] = flag
            for v in range(i * self.per, (i + 1) * self.per):
                self.aiv_busy[v] = flag

    def release(self, cores):
        self.occupy(cores, False)

    def assign(self):
        waiting = self.waiting
        if not waiting:
            return
        if self.policy == "locality" and len(waiting) > 1:
            waiting.sort(key=lambda e: (-e[0].fresh, e[0].id, e[1]))
        free_aiv = self.aiv_busy.count(False)
        free_aic = self.aic_busy.count(False)
        i = 0
        while i < len(waiting) and (free_aiv or free_aic):
            inst, k = waiting[i]
            kind = self.launch.kind(inst)
            if (kind == "AIV" and not free_aiv) or (kind == "AIC" and not free_aic) or \
                    (kind == "cluster" and (not free_aic or free_aiv < self.per)):
                i += 1
                continue
            cores = self.free_cores(kind, inst)
            if cores is None:
                i += 1
                continue
            waiting.pop(i)
            self.start(inst, k, cores)
            free_aiv = self.aiv_busy.count(False)
            free_aic = self.aic_busy.count(False)

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

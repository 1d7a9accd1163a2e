"""Chrome-trace JSON (Perfetto and chrome://tracing open it): one process per core (and one for the
AICPU), one thread per pipe (thread 0 = the tasks the core ran); tasks, dispatches and instructions
are complete ("X") slices, with the block name and the user's source line in their args (the launch's
start and drain are two more on the AICPU's control thread, machine [launch]); a pipe
stalled on a wait_flag shows a grey "wait_flag" slice for the stall; counter tracks show the HBM and
L2 bandwidth in use over time.

``PYPTO_TRACE=<file>`` traces every simulated run of the process: run k writes ``<stem>-<k><suffix>``
(``t.json`` -> ``t-1.json``, ``t-2.json``, ...; ``run_path``), so no run overwrites another; an explicit
``trace=<file>`` of one run writes that file."""
from __future__ import annotations

import json
import threading
from pathlib import Path

from .program import INSTR
from .timing import PIPES

MAX_INSTR_EVENTS = 2_000_000


def _loc(loc) -> str:
    return str(loc) if loc else ""


def build_trace(state, spec, dispatch_slices) -> dict:
    us = 1.0 / (spec.clock_ghz * 1e3)
    pids: dict = {"AICPU": 0}
    for c in state.aic + state.aiv:
        pids[c.name] = len(pids)
    events = []
    used_pids: set = {0}

    def meta(pid, tid, kind, name, sort=None):
        events.append({"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        if sort is not None:
            events.append({"name": "process_sort_index" if kind == "process_name" else "thread_sort_index",
                           "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort}})

    for thread, start, end, label, n in dispatch_slices:
        # n = 0: the launch's start or drain (scheduler.py), not a dispatch
        name = label if n == 0 else f"dispatch {label}" + (f" (+{n - 1} stitched)" if n > 1 else "")
        events.append({"name": name, "ph": "X",
                       "ts": start * us, "dur": (end - start) * us, "pid": 0, "tid": thread,
                       "args": {"tasks": n}})
    for core, start, end, label, block, loc in state.task_slices:
        pid = pids[core]
        used_pids.add(pid)
        events.append({"name": label, "ph": "X", "ts": start * us, "dur": (end - start) * us, "pid": pid,
                       "tid": 0, "args": {"block": block, "loc": _loc(loc)}})
    dropped = 0
    for k, (core, p, start, end, cop) in enumerate(state.trace_events or ()):
        if k >= MAX_INSTR_EVENTS:
            dropped = len(state.trace_events) - k
            break
        pid = pids[core]
        used_pids.add(pid)
        events.append({"name": cop.op, "ph": "X", "ts": start * us, "dur": (end - start) * us, "pid": pid,
                       "tid": 1 + p, "args": {"block": cop.block.name, "instr": cop.text, "loc": _loc(cop.loc)},
                       **({"cname": "grey"} if cop.kind != INSTR else {})})
    _bandwidth_counters(events, state.gmem, spec, len(pids), meta)
    meta(0, 0, "process_name", "AICPU", 0)
    meta(0, 0, "thread_name", "control")
    for t in range(1, spec.cores.get("aicpu", 2)):
        meta(0, t, "thread_name", f"dispatcher {t}")
    for name, pid in pids.items():
        if pid == 0 or pid not in used_pids:
            continue
        meta(pid, 0, "process_name", name, pid)
        meta(pid, 0, "thread_name", "tasks", 0)
        for i, p in enumerate(PIPES):
            meta(pid, 1 + i, "thread_name", str(p), 1 + i)
    out = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"machine": spec.name, "clock_ghz": spec.clock_ghz}}
    if dropped:
        out["otherData"]["dropped_instruction_events"] = dropped
    return out


def _bandwidth_counters(events, gmem, spec, pid, meta, max_samples=2000):
    """HBM and L2 bandwidth in use over time, as counter tracks (from the shared-memory calendar)."""
    n = len(gmem.hbm)
    if not n:
        return
    step = max(1, -(-n // max_samples))
    cycles_per_s = spec.clock_ghz * 1e9
    us = 1.0 / (spec.clock_ghz * 1e3)
    for name, cal, cap in (("HBM GB/s", gmem.hbm, gmem.hbm_cap), ("L2 GB/s", gmem.l2, gmem.l2_cap)):
        for b in range(0, n, step):
            used = sum(cap - left for left in cal[b:b + step])
            gbps = used / (step * gmem.W) * cycles_per_s / 1e9
            events.append({"name": name, "ph": "C", "ts": b * gmem.W * us, "pid": pid, "args": {"GB/s": gbps}})
    meta(pid, 0, "process_name", "shared memory", pid)


_runs: dict = {}             # PYPTO_TRACE path -> runs traced to it so far in this process
_runs_lock = threading.Lock()


def run_path(path: str) -> str:
    """The file of the next run traced to the series ``path`` (PYPTO_TRACE): ``<stem>-<k><suffix>``."""
    with _runs_lock:
        k = _runs[path] = _runs.get(path, 0) + 1
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{k}{p.suffix}"))


def write_trace(path: str, state, spec, dispatch_slices) -> str:
    with open(path, "w") as f:
        json.dump(build_trace(state, spec, dispatch_slices), f)
    return path

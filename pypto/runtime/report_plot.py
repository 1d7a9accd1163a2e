"""The timeline of one simulated run as a picture (a Gantt chart) for those who do not open Perfetto:
``pypto.last_report().plot_timeline("t.png")``.

Where the data comes from: the simulator keeps per-instruction timing only when a run is traced
(it costs time and memory), and then writes it as the Chrome trace of ``runtime/sim/trace.py``; the
Report names that file (``Report.trace_file``). So a run to be drawn must be traced:
``pypto.jit(..., trace="t.json")``, ``pl.jit(..., trace=...)``, ``pt.kernel(..., trace=...)`` or
``PYPTO_TRACE=t.json``. Drawing reads that file back; it never changes the simulator.

The chart: x is simulated time in microseconds (cycles on the top axis); one row per core and pipe
that did something (MTE2, MTE1, M = cube, V, MTE3, FIX, S = scalar), each core headed by a row of its
tasks (coloured by kernel, black edges: the task boundaries, also drawn as dotted lines across the
core's pipe rows), the AICPU's dispatches on top. Instructions are coloured by pipe (or by kernel);
waits on a flag are grey. With more than ``max_bars`` instructions, neighbouring instructions of the
same kernel on one row are merged into one bar where the idle gap between them is under about a pixel
(``span / 2000``); the title says so. With more than ``max_cores`` cores that ran, an equal share of
each core type is shown (the title says how many); ``cores=[...]`` picks them by name.

Every row's bars are one or two PolyCollections of the Axes with ``gid`` "row:<row label>" (and
"row:<row label>:wait" for the waits), in the trace's microseconds.
"""
from __future__ import annotations

import json
import os
import re

from ..errors import PyptoError, user_entry
from .plots import figure_class, save

PIPE_COLORS = {"MTE2": "tab:blue", "MTE1": "tab:cyan", "M": "tab:red", "V": "tab:green", "MTE3": "tab:purple",
               "FIX": "tab:brown", "S": "tab:olive"}
WAIT_COLOR = "lightgrey"
MERGE_PIXELS = 2000          # merged bars keep gaps wider than span / MERGE_PIXELS


def load_trace(report) -> dict:
    """The Chrome trace of ``report``'s run, checked to be that run's."""
    if report.backend != "sim":
        raise PyptoError(f"a timeline comes from the simulator; this report is of the '{report.backend}' backend",
                         hint="run on backend='sim' with trace='t.json' (or PYPTO_TRACE=t.json)")
    path = report.trace_file
    if not path:
        raise PyptoError("this run kept no timeline: the simulator records one only when the run is traced",
                         hint="pypto.jit(..., trace='t.json') / pl.jit(..., trace=...) / pt.kernel(..., trace=...), "
                              "or PYPTO_TRACE=t.json in the environment")
    if not os.path.exists(path):
        raise PyptoError(f"the run's trace file {path} is gone", hint="run it again with trace=<file>")
    with open(path) as f:
        trace = json.load(f)
    end = max((e["ts"] + e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X"), default=0.0)
    if report.time_us is not None and end > report.time_us * (1 + 1e-6) + 1e-6:
        raise PyptoError(f"the trace file {path} ends at {end:,.3f} us, after this run ({report.time_us:,.3f} us): "
                         "a later run wrote over it", hint="give each run its own trace file")
    return trace


def _parse(trace: dict):
    """(cores {pid: name} in order, pipe names {(pid, tid): name}, task slices, instruction slices,
    dispatch slices); a slice is (pid, tid, start us, duration us, kernel, is a wait)."""
    proc, thread = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            proc[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_name":
            thread[(e["pid"], e["tid"])] = e["args"]["name"]
    cores = {pid: proc[pid] for pid in sorted(proc) if thread.get((pid, 0)) == "tasks"}
    tasks, instrs, dispatches = [], [], []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        pid, tid = e["pid"], e["tid"]
        kernel = e.get("args", {}).get("block", "")
        s = (pid, tid, e["ts"], e["dur"], kernel, e.get("cname") == "grey")
        if pid in cores:
            (tasks if tid == 0 else instrs).append(s)
        elif proc.get(pid) == "AICPU":
            dispatches.append(s)
    return cores, thread, tasks, instrs, dispatches


def _pick_cores(ran: dict, names, max_cores: int) -> tuple[dict, str]:
    if names is not None:
        wanted = set(names)
        unknown = wanted - set(ran.values())
        if unknown:
            raise PyptoError(f"no core named {', '.join(sorted(unknown))} ran in this trace; "
                             f"these did: {', '.join(ran.values())}")
        return {pid: n for pid, n in ran.items() if n in wanted}, ""
    if len(ran) <= max_cores:
        return ran, ""
    by_type: dict = {}
    for pid, name in ran.items():
        by_type.setdefault(re.sub(r"\d+$", "", name), []).append(pid)
    share = max(1, max_cores // len(by_type))
    keep = {pid for pids in by_type.values() for pid in pids[:share]}
    return {pid: n for pid, n in ran.items() if pid in keep}, f"{len(keep)} of {len(ran)} cores shown"


def _merge(bars, tol):
    """Neighbouring bars of one kernel (sorted by start) joined where the gap between them is <= tol."""
    out = []
    for start, dur, kernel in sorted(bars):
        if out and out[-1][2] == kernel and start - (out[-1][0] + out[-1][1]) <= tol:
            last = out[-1]
            out[-1] = (last[0], max(last[1], start + dur - last[0]), kernel)
        else:
            out.append((start, dur, kernel))
    return out


def timeline_figure(trace: dict, *, cores=None, max_cores: int = 16, color_by: str = "pipe",
                    max_bars: int = 20_000, title: str | None = None):
    """The Gantt chart of a Chrome trace written by the simulator (see the module docstring)."""
    if color_by not in ("pipe", "kernel"):
        raise PyptoError(f"color_by must be 'pipe' or 'kernel', not {color_by!r}")
    Figure = figure_class()
    all_cores, thread, tasks, instrs, dispatches = _parse(trace)
    busy = {s[0] for s in tasks}
    ran = {pid: n for pid, n in all_cores.items() if pid in busy}
    shown, note = _pick_cores(ran, cores, max_cores)
    clock_ghz = trace.get("otherData", {}).get("clock_ghz", 1.0)
    span = max((s[2] + s[3] for s in tasks + instrs + dispatches), default=1.0) or 1.0

    kernels = sorted({s[4] for s in tasks + instrs if s[4]})
    from matplotlib import colormaps
    palette = colormaps["Set3"].colors          # pastel: kernels never look like a pipe's colour
    kernel_color = {k: palette[i % len(palette)] for i, k in enumerate(kernels)}
    n_instr = sum(1 for s in instrs if s[0] in shown and not s[5])
    tol = span / MERGE_PIXELS if n_instr > max_bars else None

    by_row: dict = {}
    for s in tasks + instrs:
        if s[0] in shown:
            by_row.setdefault((s[0], s[1]), []).append(s)
    rows = []          # (label, [(start, dur, kernel)], colour of the row's bars or None = by kernel, waits)
    if dispatches:
        rows.append(("AICPU dispatch", [(s[2], s[3], s[4]) for s in dispatches], "dimgrey", []))
    task_rows = {}
    for pid, name in shown.items():
        task_rows[pid] = len(rows)
        rows.append((f"{name} tasks", [(s[2], s[3], s[4]) for s in by_row[(pid, 0)]], None, []))
        for tid in sorted(t for p, t in by_row if p == pid and t != 0):
            pipe = thread.get((pid, tid), str(tid))
            mine = by_row[(pid, tid)]
            bars = [(s[2], s[3], s[4]) for s in mine if not s[5]]
            waits = [(s[2], s[3], s[4]) for s in mine if s[5]]
            if tol is not None:
                bars, waits = _merge(bars, tol), _merge(waits, tol)
            colour = PIPE_COLORS.get(pipe, "tab:gray") if color_by == "pipe" else None
            rows.append((f"{name} {pipe}", bars, colour, waits))

    height = min(60.0, 1.6 + 0.22 * len(rows))
    fig = Figure(figsize=(14, height), layout="constrained")
    ax = fig.add_subplot()
    for r, (label, bars, colour, waits) in enumerate(rows):
        is_task_row = label.endswith(" tasks")
        if waits:
            ax.broken_barh([(s, d) for s, d, _ in waits], (r - 0.3, 0.6), facecolors=WAIT_COLOR,
                           gid=f"row:{label}:wait")
        if bars:
            colours = colour if colour is not None else [kernel_color.get(k, "tab:gray") for _, _, k in bars]
            ax.broken_barh([(s, d) for s, d, _ in bars], (r - 0.4, 0.8), facecolors=colours,
                           edgecolors="black" if is_task_row else "none", linewidth=0.5 if is_task_row else 0,
                           gid=f"row:{label}")
    _task_boundaries(ax, task_rows, rows)

    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=6)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("simulated time (us)")
    top = ax.secondary_xaxis("top", functions=(lambda us: us * clock_ghz * 1e3, lambda cyc: cyc / (clock_ghz * 1e3)))
    top.set_xlabel(f"cycles at {clock_ghz:g} GHz")
    ax.grid(True, axis="x", alpha=0.3)
    notes = [n for n in (note, f"{n_instr:,} instructions merged where idle under {tol * 1e3:,.1f} ns"
                         if tol is not None else "") if n]
    machine = trace.get("otherData", {}).get("machine", "")
    ax.set_title((title or f"simulated timeline{f' on {machine}' if machine else ''}")
                 + (f" ({'; '.join(notes)})" if notes else ""), fontsize=9)
    _legend(ax, color_by, kernels, kernel_color)
    return fig


def _task_boundaries(ax, task_rows, rows, max_lines: int = 2000):
    """Dotted lines at every task's start and end across the rows of its core."""
    xs, y0, y1 = [], [], []
    for first in task_rows.values():
        last = first
        while last + 1 < len(rows) and not rows[last + 1][0].endswith(" tasks"):
            last += 1
        for start, dur, _ in rows[first][1]:
            xs += [start, start + dur]
            y0 += [first - 0.5] * 2
            y1 += [last + 0.5] * 2
    if 0 < len(xs) <= max_lines:
        ax.vlines(xs, y0, y1, colors="black", linestyles="dotted", linewidth=0.6, gid="task boundaries")


def _legend(ax, color_by, kernels, kernel_color):
    from matplotlib.patches import Patch
    handles = [Patch(color=kernel_color[k], label=f"kernel {k}") for k in kernels[:12]]
    if color_by == "pipe":
        handles += [Patch(color=c, label=p) for p, c in PIPE_COLORS.items()]
    handles.append(Patch(color=WAIT_COLOR, label="wait on a flag"))
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))


@user_entry
def plot_timeline(report, path=None, **options):
    """The Gantt chart of ``report``'s run (options: those of ``timeline_figure``); a PNG at ``path``
    when given. Returns the matplotlib Figure."""
    figure_class()                          # a missing matplotlib is said before the trace is read
    fig = timeline_figure(load_trace(report), **options)
    if path is not None:
        save(fig, path)
    return fig

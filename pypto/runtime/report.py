"""Report: what one run of a program cost, the one record every backend fills (``last_report()``).

sim fills everything: simulated cycles and time, the roofline, pipe utilisation, and the work the
simulator counted. cpu fills what the host measured (wall time of the run and, per kernel, of its
ctypes calls) and the work counted from the Block IR (runtime/host/work.py: GM bytes, cube FLOPs,
vector ops, PTO instructions, the simulator's definitions); the simulated figures stay None.

The roofline bound is the time the program could not beat on the machine: the largest of its cube
FLOPs over the cube peak, its vector work over the vector peak, and its minimal GM bytes (inputs read
once + outputs written once) over the HBM bandwidth. ``roofline_fraction`` = bound / simulated time.
Achieved GB/s and GFLOP/s are the counted work over the simulated time (sim) or the host's wall time
of the run (cpu).

Decisions (``decisions``: kernel name -> dict, every backend; ``decisions_table()``): what the compiler
chose for each kernel, read from ``Kernel.attrs["decisions"]`` where the passes record them (this
module only reads): ``tile`` (axis -> tile size, of ``sizes``; passes/tiling.py, to_blocks.py) and
``tile_source`` ("chooser" or "hint"), ``memory`` (core -> on-chip space -> bytes the memory plan
uses; passes/pipeline.py), ``pipelining`` (2: ping-pong copies of its tiles; 1: single-buffered),
``gm_copies`` (loop workspace -> copies; passes/multibuffer.py), ``block_dim`` (per task) and ``hint``
(the call that changes the tile choice). Kernels built by hand or by the Tile / Professional front
ends record no tile or pipelining decisions ("not recorded").

sim adds what the kernel's launches did: ``cores`` (distinct cores used), ``span_cycles`` (first start
to last end), ``pipe_busy`` (pipe -> busy cycles over the span and the cores that have the pipe) and
``bound``, the first that applies:
  "dispatch"  its blocks held their cores under DISPATCH_BOUND of the span (launches wait to start);
  "hbm"       its GM reads over the span are a share of the HBM bandwidth (``hbm_share``) of at least
              HBM_BOUND and above every pipe's (waiting for bandwidth is no pipe's busy time; stores
              land in the write-back L2); reads above the HBM bandwidth were L2 hits: "l2", their
              share of the L2 bandwidth (``l2_share``) compared the same way;
  "latency"   no pipe busy LATENCY_BOUND of the span (each step waits on the one before);
  else the busiest pipe: M "cube", V "vector", S "scalar", MTE2 / MTE3 / MTE1 / FIX by name.

The table (``table()``, ``str()``) shows the rows the run measured: a figure that has no meaning on
the backend (simulated cycles on cpu) is left out, never shown as '-'. ``str()`` is as wide as the
terminal (rich decides; COLUMNS overrides), 100 columns when there is none (piped, a log file).
"""
from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from typing import Callable

PIPED_WIDTH = 100     # str(report) without a terminal
HBM_BOUND = 0.7       # a kernel whose GM traffic reaches this fraction of the HBM bandwidth is HBM-bound
DISPATCH_BOUND = 0.5  # ... whose blocks held their cores under this fraction of its span waits on dispatch
LATENCY_BOUND = 0.25  # ... whose busiest pipe is busy under this fraction of the span waits on latencies
_PIPE_BOUND = {"M": "cube", "V": "vector", "S": "scalar"}
_AIC_ONLY = {"M", "MTE1", "FIX"}


@dataclass
class Report:
    backend: str = "sim"
    machine: str = ""
    cycles: float | None = None            # simulated makespan
    time_us: float | None = None
    roofline_us: float | None = None       # the bound described above
    roofline_fraction: float | None = None
    bound_by: str | None = None            # "cube" | "vector" | "hbm": which term sets the bound
    flops: float = 0.0                     # cube FLOPs (2MNK) + vector element operations
    cube_flops: float = 0.0
    vector_ops: float = 0.0
    gm_bytes: int = 0                      # bytes actually moved between GM and the cores
    min_gm_bytes: int = 0                  # inputs once + outputs once
    l2_hit_bytes: int = 0
    tasks: int = 0                         # task instances run (loops expanded)
    blocks: int = 0                        # core programs run (block_dim instances)
    instructions: int = 0                  # simulated PTO instructions
    utilization: dict = field(default_factory=dict)   # "AIC"/"AIV" -> {"core": f, "MTE2": f, ...}
    wall_s: float = 0.0                    # the backend's own wall time (cpu: the run's kernel launches)
    timing_only: bool = False
    trace_file: str | None = None
    notes: list = field(default_factory=list)
    kernels: dict = field(default_factory=dict)   # cpu: kernel -> {"launches", "wall_s", "gm_bytes",
                                                  #   "cube_flops", "vector_ops", "instructions"}
    decisions: dict = field(default_factory=dict)  # kernel -> what was chosen and why (module docstring)

    @property
    def instr_per_s(self) -> float | None:
        """Simulated PTO instructions per second of the simulator's wall time (sim only)."""
        return self.instructions / self.wall_s if self.cycles is not None and self.wall_s > 0 \
            and self.instructions else None

    def _seconds(self) -> float | None:
        """The time the achieved rates are over: simulated on sim, the host's wall time elsewhere."""
        if self.cycles is not None:
            return self.time_us * 1e-6 if self.time_us else None
        return self.wall_s if self.wall_s > 0 else None

    @property
    def gb_per_s(self) -> float | None:
        t = self._seconds()
        return self.gm_bytes / t / 1e9 if t and self.instructions else None

    @property
    def gflop_per_s(self) -> float | None:
        t = self._seconds()
        return self.flops / t / 1e9 if t and self.instructions else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["instr_per_s"] = self.instr_per_s
        d["gb_per_s"], d["gflop_per_s"] = self.gb_per_s, self.gflop_per_s
        return d

    def plot_timeline(self, path=None, **options):
        """The run's per-core, per-pipe timeline as a Gantt chart: a matplotlib Figure, saved as a PNG at
        ``path`` when given. Needs a traced sim run (``trace="t.json"`` or PYPTO_TRACE) and matplotlib
        (``pip install pypto[plot]``); options and details in runtime/report_plot.py."""
        from .report_plot import plot_timeline
        return plot_timeline(self, path, **options)

    def table(self):
        """A rich Table of the figures the run measured (utilisation per core type and pipe included)."""
        from rich.table import Table
        t = Table(title=f"pypto {self.backend} report" + (f" ({self.machine})" if self.machine else ""),
                  show_header=True)
        t.add_column("metric")
        t.add_column("value", justify="right", overflow="fold")
        simulated = self.cycles is not None
        counted = self.instructions > 0
        where = "simulated" if simulated else "host"

        def row(name, value, fmt="{:,.3f}"):
            if value is not None:
                t.add_row(name, fmt.format(value) if fmt else str(value))
        row("simulated cycles", self.cycles, "{:,.0f}")
        row("simulated time (us)", self.time_us)
        row("roofline bound (us)", self.roofline_us)
        row("roofline fraction", self.roofline_fraction)
        row("bound by", self.bound_by, None)
        row("cube GFLOP", self.cube_flops / 1e9 if counted else None)
        row("vector Gop", self.vector_ops / 1e9 if counted else None)
        row("GM bytes moved (MB)", self.gm_bytes / 1e6 if counted else None)
        row("minimal GM bytes (MB)", self.min_gm_bytes / 1e6 if self.min_gm_bytes else None)
        row("L2 hit bytes (MB)", self.l2_hit_bytes / 1e6 if simulated else None)
        row(f"achieved GB/s ({where})", self.gb_per_s, "{:,.2f}")
        row(f"achieved GFLOP/s ({where})", self.gflop_per_s, "{:,.2f}")
        row("tasks / blocks", f"{self.tasks} / {self.blocks}", None)
        row("PTO instructions", self.instructions if counted else None, "{:,}")
        row("simulator wall time (s)" if simulated else "run wall time (ms)",
            self.wall_s if simulated else self.wall_s * 1e3)
        row("simulated instr / s", self.instr_per_s, "{:,.0f}")
        for core, pipes in self.utilization.items():
            shown = ", ".join(f"{k} {v:.0%}" for k, v in pipes.items())
            t.add_row(f"utilisation {core}", shown)
        for name, k in self.kernels.items():
            rates = ""
            if k.get("wall_s", 0) > 0 and k.get("instructions"):
                rates = (f", {k['gm_bytes'] / k['wall_s'] / 1e9:,.2f} GB/s, "
                         f"{(k['cube_flops'] + k['vector_ops']) / k['wall_s'] / 1e9:,.2f} GFLOP/s")
            t.add_row(f"kernel {name}", f"{k.get('launches', 0)} launch(es), {k.get('wall_s', 0.0) * 1e3:,.3f} ms"
                      + rates)
        row("trace file", self.trace_file, None)
        for n in self.notes:
            t.add_row("note", str(n))
        return t

    def decisions_table(self):
        """A rich Table: per kernel, its tile shape, buffers, pipelining, cores, bound and the hint."""
        from rich.markup import escape
        from rich.table import Table
        t = Table(title="kernel decisions", show_header=True)
        simulated = self.cycles is not None
        for col in ("kernel", "tile (source)", "on-chip bytes / GM copies", "pipelining", "cores",
                    *(("bound (busiest pipes)",) if simulated else ()), "hint"):
            t.add_column(col, overflow="fold")
        for name, d in self.decisions.items():
            tile = " x ".join(f"{a} {d['tile'][a]}/{d['sizes'][a]}" for a in d.get("tile", {}))
            mem = "; ".join(f"{core} " + ", ".join(f"{sp} {b:,}" for sp, b in spaces.items())
                            for core, spaces in d.get("memory", {}).items())
            if d.get("gm_copies"):
                mem += "; " + ", ".join(f"{w} x{c}" for w, c in d["gm_copies"].items())
            cores = f"block_dim {d['block_dim']}" + (f", {d['cores']} used" if "cores" in d else "")
            n = d.get("pipelining")
            depth = {1: "single", 2: "ping-pong"}.get(n, f"{n} stages" if isinstance(n, int) else "not recorded")
            row = [name, f"{tile} ({d['tile_source']})" if tile else "not recorded", mem, depth, cores]
            if simulated:
                busy = ", ".join(f"{p} {f:.0%}" for p, f in list(d.get("pipe_busy", {}).items())[:3])
                row.append(f"{d.get('bound', '-')} ({busy})")
            t.add_row(*(escape(c) for c in row), escape(d.get("hint", "")))
        return t

    def __str__(self) -> str:
        from rich.console import Console
        console = Console(record=True, file=_NullFile(), width=_width())
        console.print(self.table())
        if self.decisions:
            console.print(self.decisions_table())
        return console.export_text()


def kernel_decisions(graph, spec, stats: dict | None = None, work: dict | None = None) -> dict:
    """``Report.decisions`` of a run of ``graph`` (an ExecutionGraph) on ``spec``: the kernels' recorded
    decisions, the block_dim of the tasks that launch them and, from a sim run, ``stats`` (kernel ->
    sim/launch.KernelStats) and ``work`` (kernel -> host/work.Work) for cores, pipe busy and the bound.
    Without stats the decisions are the same at every run: built (and their sizes printed) once per graph."""
    if stats is None and work is None:
        cached = getattr(graph, "_static_decisions", None)
        if cached is None or cached[0] != spec.name:
            cached = (spec.name, _kernel_decisions(graph, spec, None, None))
            graph._static_decisions = cached
        return {name: dict(d) for name, d in cached[1].items()}
    return _kernel_decisions(graph, spec, stats, work)


def _kernel_decisions(graph, spec, stats, work) -> dict:
    block_dims: dict = {}
    for task in graph.tasks():
        block_dims.setdefault(task.kernel, []).append(task.block_dim)
    out = {}
    for name, kernel in graph.kernels.items():
        d = dict(kernel.attrs.get("decisions", {}))
        d["memory"] = {core: {str(sp): int(b) for sp, b in spaces.items()}
                       for core, spaces in d.get("memory", {}).items()}
        dims = list(dict.fromkeys(str(b) for b in block_dims.get(name, [d.get("block_dim", 1)])))
        d["block_dim"] = ", ".join(dims)
        for key in ("tile", "sizes"):           # sizes may be symbolic: printed, so to_dict() stays JSON
            d[key] = {a: v if isinstance(v, int) else str(v) for a, v in d.get(key, {}).items()}
        tile = d.get("tile", {})
        if d.get("kind") == "matmul":
            m, n, k = (tile.get(a, "?") for a in ("m", "n", "k"))
            d["hint"] = f"pypto.set_cube_tile_shapes([{m}, {m}], [{k}, {k}], [{n}, {n}])"
        elif d.get("kind") == "vector":
            d["hint"] = "pypto.set_vec_tile_shapes(<a size per dim of its ops>)"
        if stats and name in stats:
            d.update(_sim_bound(stats[name], work.get(name) if work else None, spec))
        out[name] = d
    return out


def _sim_bound(ks, work, spec) -> dict:
    span = max(ks.end - ks.start, 1e-9)
    n_aic = sum(1 for c in ks.cores if c.startswith("AIC"))
    busy = {}
    for p, cycles in ks.pipe_cycles().items():
        n = n_aic if p in _AIC_ONLY else (len(ks.cores) - n_aic if p == "V" else len(ks.cores))
        if cycles > 0 and n:
            busy[p] = cycles / (span * n)
    busy = dict(sorted(busy.items(), key=lambda kv: -kv[1]))
    held = ks.held / (span * max(1, len(ks.cores)))
    # GM reads over the span against the HBM bandwidth (waiting for bandwidth is no pipe's busy
    # time; stores land in the write-back L2); reads above it were L2 hits, against the L2's bandwidth
    traffic = {}
    if work is not None:
        per_cycle = work.load_bytes / span
        hbm = per_cycle / spec.hbm_bytes_per_cycle
        if hbm <= 1.0:
            traffic["hbm"] = hbm
        elif spec.memory.get("l2_bytes_per_s"):
            traffic["l2"] = per_cycle * spec.clock_ghz * 1e9 / spec.memory["l2_bytes_per_s"]
    top = max(busy, key=busy.get, default=None)
    if top is None or held < DISPATCH_BOUND:
        bound = "dispatch"
    elif traffic and max(traffic.values()) >= max(HBM_BOUND, busy[top]):
        bound = max(traffic, key=traffic.get)
    elif busy[top] < LATENCY_BOUND:
        bound = "latency"
    else:
        bound = _PIPE_BOUND.get(top, top)
    return {"cores": len(ks.cores), "blocks": ks.blocks, "span_cycles": span, "held": held,
            "pipe_busy": busy, **{f"{k}_share": v for k, v in traffic.items()}, "bound": bound}


def _width() -> int | None:
    """None (rich decides: the terminal's width, or COLUMNS) where there is a terminal or COLUMNS is
    set (shutil reads COLUMNS first); else PIPED_WIDTH."""
    return None if shutil.get_terminal_size(fallback=(0, 0)).columns > 0 else PIPED_WIDTH


class _NullFile:
    def write(self, s):
        return len(s)

    def flush(self):
        pass


_last: dict = {"report": None}
_listeners: list = []


def set_last_report(report: Report | None) -> None:
    """Record the Report of a run that just ended (None: a run with no report, e.g. on the reference
    backend) and pass it to every ``on_report`` callback."""
    _last["report"] = report
    for callback in list(_listeners):
        callback(report)


def on_report(callback) -> Callable[[], None]:
    """Call ``callback(report)`` after every run on any backend (``report`` is None for a run with no
    report); returns the function that unsubscribes it."""
    _listeners.append(callback)

    def unsubscribe() -> None:
        if callback in _listeners:
            _listeners.remove(callback)
    return unsubscribe


def last_report() -> Report | None:
    """The Report of the most recent run on any backend (``pypto.last_report()`` re-exports this)."""
    return _last["report"]

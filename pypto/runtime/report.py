"""Report: what one run of a program cost — shared by the sim backend (everything filled) and the cpu
backend (wall time only; the simulated figures stay None).

The roofline bound is the time the program could not beat on the machine: the largest of its cube
FLOPs over the cube peak, its vector work over the vector peak, and its minimal GM bytes (inputs read
once + outputs written once) over the HBM bandwidth. ``roofline_fraction`` = bound / simulated time.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


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
    wall_s: float = 0.0                    # the backend's own wall time
    timing_only: bool = False
    trace_file: str | None = None
    notes: list = field(default_factory=list)

    @property
    def instr_per_s(self) -> float | None:
        return self.instructions / self.wall_s if self.wall_s > 0 and self.instructions else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["instr_per_s"] = self.instr_per_s
        return d

    def table(self):
        """A rich Table of the figures (utilisation per core type and pipe included)."""
        from rich.table import Table
        t = Table(title=f"pypto {self.backend} report" + (f" ({self.machine})" if self.machine else ""),
                  show_header=True)
        t.add_column("metric")
        t.add_column("value", justify="right")

        def row(name, value, fmt="{:,.3f}"):
            t.add_row(name, "-" if value is None else (fmt.format(value) if fmt else str(value)))
        row("simulated cycles", self.cycles, "{:,.0f}")
        row("simulated time (us)", self.time_us)
        row("roofline bound (us)", self.roofline_us)
        row("roofline fraction", self.roofline_fraction)
        row("bound by", self.bound_by, None)
        row("cube GFLOP", self.cube_flops / 1e9 if self.cycles is not None else None)
        row("vector Gop", self.vector_ops / 1e9 if self.cycles is not None else None)
        row("GM bytes moved (MB)", self.gm_bytes / 1e6 if self.cycles is not None else None)
        row("minimal GM bytes (MB)", self.min_gm_bytes / 1e6 if self.cycles is not None else None)
        row("L2 hit bytes (MB)", self.l2_hit_bytes / 1e6 if self.cycles is not None else None)
        row("tasks / blocks", f"{self.tasks} / {self.blocks}", None)
        row("instructions", self.instructions, "{:,}")
        row("wall time (s)", self.wall_s)
        row("simulated instr / s", self.instr_per_s, "{:,.0f}")
        for core, pipes in self.utilization.items():
            shown = ", ".join(f"{k} {v:.0%}" for k, v in pipes.items())
            t.add_row(f"utilisation {core}", shown)
        for n in self.notes:
            t.add_row("note", str(n))
        return t

    def __str__(self) -> str:
        from rich.console import Console
        console = Console(width=110, record=True, file=_NullFile())
        console.print(self.table())
        return console.export_text()


class _NullFile:
    def write(self, s):
        return len(s)

    def flush(self):
        pass


_last: dict = {"report": None}


def set_last_report(report: Report) -> None:
    _last["report"] = report


def last_report() -> Report | None:
    """The Report of the most recent run on any backend (``pypto.last_report()`` re-exports this)."""
    return _last["report"]

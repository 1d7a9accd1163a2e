"""Pictures of runs: the roofline chart the benchmarks save beside their tables, and the one way pypto
loads matplotlib (an optional extra: ``pip install pypto[plot]``).

Contract:
  * ``import pypto`` never imports matplotlib; only asking for a picture does (``figure_class()``), and
    without it that raises ``PlotUnavailableError`` (a PyptoError naming the caller's line) saying
    how to install it.
  * ``roofline_chart(points, machine, path)`` draws a log-log roofline: operational intensity (FLOP per
    GM byte) on x, achieved FLOP/s on y, one labelled marker per ``RooflinePoint``; the roofs come
    from the MachineSpec only (``roofs``): the cube peak of each input dtype, the vector peak of fp16
    and fp32 elements, and the HBM bandwidth as the slanted roof. It returns the matplotlib Figure and
    writes a PNG when ``path`` is given.
  * ``point_from_report`` places a Report the way the Report's own roofline bound counts: FLOPs = cube
    FLOPs + vector element operations, bytes = the minimal GM bytes (inputs read once, outputs written
    once), time = the simulated time.

The per-core, per-pipe timeline of one run is ``report_plot.py`` (``Report.plot_timeline``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import PyptoError, user_entry

INSTALL_HINT = "pip install pypto[plot]   (or: pip install matplotlib)"


class PlotUnavailableError(PyptoError, ImportError):
    """A picture was asked for but matplotlib, pypto's optional "plot" extra, is not installed."""


def figure_class():
    """The matplotlib Figure class, imported on first use (no pyplot: no GUI backend, no global state)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailableError("drawing a picture needs matplotlib, which is not installed "
                                   "(it is pypto's optional 'plot' extra)", hint=INSTALL_HINT) from None
    return Figure


def save(fig, path) -> str:
    """Write ``fig`` to ``path`` (PNG unless the suffix says otherwise), creating its folder."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    flops: float          # operations done (cube FLOPs + vector element operations, or a stated formula)
    bytes: float          # GM bytes the intensity is counted over
    seconds: float        # time the operations took

    @property
    def intensity(self) -> float:
        """FLOP per byte."""
        return self.flops / self.bytes

    @property
    def flop_per_s(self) -> float:
        return self.flops / self.seconds


def point_from_report(label: str, report) -> RooflinePoint | None:
    """The point of a simulated run (None when the report has no simulated time, FLOPs or bytes, e.g. on cpu)."""
    if not report.time_us or not report.flops or not report.min_gm_bytes:
        return None
    return RooflinePoint(label, report.flops, report.min_gm_bytes, report.time_us * 1e-6)


def roofs(machine) -> tuple[list, float]:
    """([(label, FLOP/s)] of the flat roofs, HBM bytes/s) of ``machine``: one cube roof per distinct peak
    (dtypes with equal peaks share a label), the vector roofs of fp16 and fp32 elements."""
    by_peak: dict = {}
    for dtype in machine.cube:
        by_peak.setdefault(machine.peak_cube_flops(dtype), []).append(dtype)
    flat = [(f"cube {', '.join(dtypes)}", peak) for peak, dtypes in sorted(by_peak.items(), reverse=True)]
    flat += [(f"vector {name}", machine.peak_vector_bytes() / size) for name, size in (("fp16", 2), ("fp32", 4))]
    return flat, machine.memory["hbm_bytes_per_s"]


@user_entry
def roofline_chart(points, machine, path=None, title: str | None = None):
    """The roofline chart of ``points`` (RooflinePoints; None entries are left out) on ``machine`` (a
    MachineSpec); saved as a PNG at ``path`` when given. Returns the Figure: its one Axes holds one
    line per roof (``gid`` "roof:<label>", the HBM roof "roof:hbm") and one scatter collection per
    point (``gid`` "point:<k>", k in the order given), numbered k + 1 on the chart and in its legend."""
    Figure = figure_class()
    points = [p for p in points if p is not None]
    flat, hbm = roofs(machine)
    xs = [p.intensity for p in points] or [1.0]
    lo = min(min(xs) / 4, flat[-1][1] / hbm / 4)
    hi = max(max(xs) * 4, flat[0][1] / hbm * 4)

    fig = Figure(figsize=(12, 6), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    top = flat[0][1] / hbm                     # the HBM roof ends where the highest flat roof begins
    ax.plot([lo, top], [lo * hbm, top * hbm], color="black", lw=1.5, gid="roof:hbm",
            label=f"HBM {hbm / 1e12:.2f} TB/s")
    for i, (label, peak) in enumerate(flat):
        knee = peak / hbm
        ax.plot([knee, hi], [peak, peak], lw=1.5, ls="-" if label.startswith("cube") else "--",
                color=f"C{i}", gid=f"roof:{label}", label=f"{label} {peak / 1e12:,.1f} TFLOP/s")
    markers = "osD^vP*Xhp<>"
    dots = []
    for k, p in enumerate(points):
        dots.append(ax.scatter([p.intensity], [p.flop_per_s], color=f"C{k % 10}", marker=markers[k % len(markers)],
                               edgecolors="black", linewidths=0.5, zorder=3, gid=f"point:{k}",
                               label=f"{k + 1}. {p.label}"))
        ax.annotate(str(k + 1), (p.intensity, p.flop_per_s), xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("operational intensity (FLOP / GM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title or f"roofline of {machine.description}")
    ax.grid(True, which="major", alpha=0.3)
    roof_lines = [line for line in ax.get_lines() if str(line.get_gid()).startswith("roof:")]
    ax.add_artist(ax.legend(handles=roof_lines, fontsize=7, loc="lower right"))
    if dots:
        ax.legend(handles=dots, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="measured")
    if path is not None:
        save(fig, path)
    return fig

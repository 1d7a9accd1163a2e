"""Simulator benchmark: simulated time, roofline bound and fraction on the simulated machine, and the
simulator's own speed (wall time, simulated instructions per second), for hand-built kernels —
matmul fp16, softmax and rms_norm rows, a gated transformer MLP block. Each case is a function that
builds its ExecutionGraph; the Tensor-level compiler will later produce these graphs instead.

    python benchmarks/bench_sim.py                 # default sizes, timing-only
    python benchmarks/bench_sim.py --full          # adds matmul 8192^3 (a few minutes)
    python benchmarks/bench_sim.py --machine a5 --json bench_results/sim.json --png bench_results/sim.png
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rich.console import Console          # noqa: E402
from rich.table import Table              # noqa: E402
from tqdm import tqdm                     # noqa: E402

from pypto import dtypes                  # noqa: E402
from pypto.ir.execution import Buffer, ExecutionGraph, Task   # noqa: E402
from pypto.machine import load_machine   # noqa: E402
from pypto.runtime import plots          # noqa: E402
from pypto.runtime import sim             # noqa: E402
from pypto.testing import kernels as S     # noqa: E402

F16, F32 = dtypes.float16, dtypes.float32


def _graph(kernels, buffers, inputs, outputs, tasks):
    return ExecutionGraph({k.name: k for k in kernels}, {b.name: b for b in buffers}, inputs, outputs, tasks)


def matmul_case(n):
    """C[n, n] fp16 = A @ B on the 24 cube cores, [128, 256] output tiles, K steps of 64."""
    k = S.matmul_kernel(n, n, n, 128, 256, 64, F16, F16)
    bufs = [Buffer("a", (n, n), F16, "input"), Buffer("b", (n, n), F16, "input"), Buffer("c_out", (n, n), F16, "output")]
    return _graph([k], bufs, ["a", "b"], ["c_out"], [Task(k.name, {p: p for p in ("a", "b", "c_out")}, block_dim=24)])


def softmax_case(rows=8192, cols=4096):
    k = S.softmax_kernel(rows, cols, 2, F16)
    bufs = [Buffer("x", (rows, cols), F16, "input"), Buffer("y", (rows, cols), F16, "output")]
    return _graph([k], bufs, ["x"], ["y"], [Task(k.name, {"x": "x", "y": "y"}, block_dim=48)])


def rms_norm_case(rows=8192, cols=4096):
    k = S.rms_norm_kernel(rows, cols, 1, F16)
    bufs = [Buffer("x", (rows, cols), F16, "input"), Buffer("w", (1, cols), F16, "input"),
            Buffer("y", (rows, cols), F16, "output")]
    return _graph([k], bufs, ["x", "w"], ["y"], [Task(k.name, {"x": "x", "w": "w", "y": "y"}, block_dim=48)])


def mlp_case(tokens=1024, hidden=2048, inter=5632):
    """y = (silu(x @ W1) * (x @ W3)) @ W2: three cube tasks and one vector task, ordered by their buffers."""
    up = S.matmul_kernel(tokens, inter, hidden, 128, 256, 64, F16, F16, name="up_proj")
    down = S.matmul_kernel(tokens, hidden, inter, 128, 256, 64, F16, F16, name="down_proj")
    glu = S.swiglu_kernel(tokens, inter, 1, F16)
    B = lambda n, shape, role: Buffer(n, shape, F16, role)
    bufs = [B("x", (tokens, hidden), "input"), B("w1", (hidden, inter), "input"), B("w3", (hidden, inter), "input"),
            B("w2", (inter, hidden), "input"), B("h1", (tokens, inter), "workspace"),
            B("h3", (tokens, inter), "workspace"), B("g", (tokens, inter), "workspace"), B("y", (tokens, hidden), "output")]
    tasks = [Task("up_proj", {"a": "x", "b": "w1", "c_out": "h1"}, block_dim=24, name="gate"),
             Task("up_proj", {"a": "x", "b": "w3", "c_out": "h3"}, block_dim=24, name="up"),
             Task("swiglu", {"a": "h1", "b": "h3", "g": "g"}, block_dim=48, name="swiglu"),
             Task("down_proj", {"a": "g", "b": "w2", "c_out": "y"}, block_dim=24, name="down")]
    return _graph([up, down, glu], bufs, ["x", "w1", "w3", "w2"], ["y"], tasks)


def cases(full: bool):
    sizes = [1024, 2048, 4096] + ([8192] if full else [])
    out = [(f"matmul fp16 {n}^3", lambda n=n: matmul_case(n)) for n in sizes]
    out += [("softmax fp16 [8192, 4096]", softmax_case), ("rms_norm fp16 [8192, 4096]", rms_norm_case),
            ("MLP fp16 1024x2048x5632", mlp_case)]
    return out


def run_case(graph, machine, check):
    shapes = {n: tuple(graph.buffers[n].shape) for n in graph.inputs}
    cpu0 = time.process_time()
    _, rep = sim.run(graph, shapes, {}, machine=machine, timing_only=True, check=check)
    return rep, time.process_time() - cpu0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="include matmul 8192^3")
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--no-check", action="store_true", help="only time the run without the race/clobber checks")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    ap.add_argument("--png", default=None, help="save a roofline chart of the cases here (needs pypto[plot])")
    args = ap.parse_args()

    rows, points = [], []
    for name, build in tqdm(cases(args.full), desc="simulating", unit="case"):
        graph = build()
        checked = None if args.no_check else run_case(graph, args.machine, True)
        rep, cpu = run_case(graph, args.machine, False)
        row = {"case": name, "sim_us": rep.time_us, "bound_us": rep.roofline_us, "bound_by": rep.bound_by,
               "fraction": rep.roofline_fraction, "instructions": rep.instructions,
               "wall_s": rep.wall_s, "cpu_s": cpu, "instr_per_s_wall": rep.instructions / rep.wall_s,
               "instr_per_s_cpu": rep.instructions / cpu if cpu > 0 else None,
               "gm_mb": rep.gm_bytes / 1e6, "l2_hit_mb": rep.l2_hit_bytes / 1e6}
        if checked is not None:
            crep, ccpu = checked
            assert crep.cycles == rep.cycles             # the checks never change the schedule
            row |= {"checked_wall_s": crep.wall_s, "checked_instr_per_s_wall": crep.instructions / crep.wall_s,
                    "checked_instr_per_s_cpu": crep.instructions / ccpu if ccpu > 0 else None}
        rows.append(row)
        points.append(plots.point_from_report(name, rep))

    t = Table(title=f"pypto sim on {args.machine} (timing-only); simulator speed without / with the checks")
    cols = ["case", "simulated us", "roofline us", "bound by", "fraction", "instructions", "wall s",
            "instr/s wall", "instr/s cpu"]
    if not args.no_check:
        cols += ["checked wall s", "checked instr/s wall", "checked instr/s cpu"]
    for col in cols + ["GM MB", "L2 hit MB"]:
        t.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        cells = [r["case"], f"{r['sim_us']:,.1f}", f"{r['bound_us']:,.1f}", r["bound_by"], f"{r['fraction']:.2f}",
                 f"{r['instructions']:,}", f"{r['wall_s']:.2f}", f"{r['instr_per_s_wall']:,.0f}",
                 f"{r['instr_per_s_cpu']:,.0f}"]
        if not args.no_check:
            cells += [f"{r['checked_wall_s']:.2f}", f"{r['checked_instr_per_s_wall']:,.0f}",
                      f"{r['checked_instr_per_s_cpu']:,.0f}"]
        t.add_row(*cells, f"{r['gm_mb']:,.0f}", f"{r['l2_hit_mb']:,.0f}")
    Console(width=200).print(t)
    if args.png:
        plots.roofline_chart(points, load_machine(args.machine), args.png,
                             title=f"bench_sim: hand-built kernels on simulated {args.machine} (timing-only)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": args.machine, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()

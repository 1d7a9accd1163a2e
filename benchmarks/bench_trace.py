"""Tracing speed: how long @pypto.jit takes to trace a function into a TensorGraph, for graphs of about
100, 1000 and 10000 ops, with static shapes and with a dynamic (symbolic) first dim.

    python benchmarks/bench_trace.py [--sizes 100,1000,10000] [--repeat 3] [--json out.json]

The traced program repeats a transformer-like block (elementwise with a broadcast bias and Python
scalars, a row max, exp, and every fourth block a matmul + softmax). Each figure is the best of
``--repeat`` fresh traces (a new JitFunction each time, so nothing is cached); CPU time (process time)
is shown beside wall time because the machine may be shared. Goal: 1000 ops < 1 s, time growing
linearly with the op count (the per-op column stays flat).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pypto  # noqa: E402

OPS_PER_BLOCK = 7.5          # recorded nodes per block on average (scalars included)


def block_chain(x, w, b, blocks: int):
    for i in range(blocks):
        x = (x * b + 1.0).tanh()
        x = x - x.amax(-1, keepdim=True)
        x = x.exp()
        if i % 4 == 0:
            x = pypto.softmax(x @ w, -1)
    return x


def make_fn(blocks: int, dynamic: bool):
    rows = pypto.DYNAMIC if dynamic else 64

    def chain(x: pypto.Tensor[[rows, 128], pypto.float32], w: pypto.Tensor[[128, 128], pypto.float32],
              b: pypto.Tensor[[128], pypto.float32]):
        return block_chain(x, w, b, blocks)
    return pypto.jit(chain, backend="reference")


def trace_time(n_ops: int, dynamic: bool, repeat: int) -> tuple[int, float, float]:
    """-> (graph nodes, wall seconds, CPU seconds), each the best of ``repeat`` fresh traces."""
    blocks = max(1, round(n_ops / OPS_PER_BLOCK))
    args = (torch.randn(64, 128), torch.randn(128, 128), torch.randn(128))
    wall, cpu, count = float("inf"), float("inf"), 0
    for _ in range(repeat):
        f = make_fn(blocks, dynamic)
        t0, c0 = time.perf_counter(), time.process_time()
        g = f.trace(*args)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        count = g.count_ops()
    return count, wall, cpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000,10000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    console = Console(width=110)
    table = Table(title="pypto tracing time (best of %d fresh traces)" % args.repeat)
    for col in ("target ops", "shapes", "graph nodes", "wall time", "CPU time", "CPU µs / op",
                "vs smallest (per op)"):
        table.add_column(col, justify="right")
    rows = []
    for dynamic in (False, True):
        base = None
        for n in sizes:
            count, wall, cpu = trace_time(n, dynamic, args.repeat)
            per_op = cpu / count * 1e6
            base = base or per_op
            rows.append({"target_ops": n, "dynamic": dynamic, "nodes": count, "wall_s": wall, "cpu_s": cpu,
                         "cpu_us_per_op": per_op})
            table.add_row(str(n), "dynamic T" if dynamic else "static", str(count), f"{wall * 1e3:.1f} ms",
                          f"{cpu * 1e3:.1f} ms", f"{per_op:.1f}", f"{per_op / base:.2f}x")
    console.print(table)
    thousand = [r for r in rows if r["target_ops"] == 1000]
    if thousand:
        worst = max(r["wall_s"] for r in thousand)
        console.print(f"1000-op graphs trace in at most {worst * 1e3:.0f} ms (goal < 1000 ms): "
                      + ("[green]met[/green]" if worst < 1.0 else "[red]missed[/red]"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()

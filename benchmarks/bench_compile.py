"""Compile time of the Tensor-level compiler: trace + lowering (TensorGraph -> ExecutionGraph of Block IR
kernels) for a 4096^3 fp16 matmul and a 24-layer MLP stack (goal: < 2 s each), with the time of every
pass, the number of kernels and tasks, and — in timing-only simulation — the simulated time and the
fraction of the roofline the lowered programs reach.

    python benchmarks/bench_compile.py [--no-sim] [--png bench_results/compile.png]
"""
from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

import pypto
from pypto.passes.pipeline import last_timings, lower
from pypto.runtime import plots

HIDDEN, FFN, LAYERS, TOKENS = 1024, 2816, 24, 512


def matmul_case():
    a = torch.empty(4096, 4096, dtype=torch.float16)
    b = torch.empty(4096, 4096, dtype=torch.float16)
    return pypto.jit(lambda a, b: a @ b), (a, b)


def mlp_case():
    def mlp(x, *params):
        for layer in range(LAYERS):
            g, w1, w2 = params[3 * layer: 3 * layer + 3]
            h = pypto.rms_norm(x, g, 1e-6)
            x = x + pypto.silu(h @ w1) @ w2
        return x
    x = torch.empty(TOKENS, HIDDEN, dtype=torch.float16)
    params = []
    for _ in range(LAYERS):
        params += [torch.empty(HIDDEN, dtype=torch.float16), torch.empty(HIDDEN, FFN, dtype=torch.float16),
                   torch.empty(FFN, HIDDEN, dtype=torch.float16)]
    return pypto.jit(mlp), (x, *params)


def softmax_case():
    return pypto.jit(lambda x: pypto.softmax(x, -1)), (torch.empty(8192, 4096, dtype=torch.float16),)


def rmsnorm_case():
    return pypto.jit(lambda x, w: pypto.rms_norm(x, w, 1e-6)), (torch.empty(8192, 4096, dtype=torch.float16),
                                                               torch.empty(4096, dtype=torch.float16))


CASES = {"matmul 4096^3 fp16": matmul_case, f"MLP {LAYERS} layers (rms_norm, x + silu(h@w1)@w2)": mlp_case,
         "softmax [8192,4096] fp16": softmax_case, "rms_norm [8192,4096] fp16": rmsnorm_case}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-sim", action="store_true", help="skip the timing-only simulation")
    ap.add_argument("--png", help="save a roofline chart of the simulated cases here (needs pypto[plot])")
    args = ap.parse_args()
    console = Console(width=200)
    t = Table(title="pypto compile time (trace + lower)")
    for col in ("case", "ops", "trace s", "lower s", "total s", "kernels", "tasks", "slowest passes",
                "sim us", "roofline"):
        t.add_column(col, justify="right" if col not in ("case", "slowest passes") else "left")
    points = []
    for name, make in CASES.items():
        fn, inputs = make()
        t0 = time.perf_counter()
        g = fn.trace(*inputs)
        t1 = time.perf_counter()
        eg = lower(g)
        t2 = time.perf_counter()
        passes = sorted(last_timings().items(), key=lambda kv: -kv[1])[:3]
        sim_us = frac = "-"
        if not args.no_sim:
            from pypto.runtime import sim
            _, rep = sim.run(eg, dict(zip(eg.inputs, inputs)), {}, timing_only=True)
            sim_us, frac = f"{rep.time_us:,.1f}", f"{rep.roofline_fraction:.2f} ({rep.bound_by})"
            points.append(plots.point_from_report(name, rep))
        t.add_row(name, str(g.count_ops()), f"{t1 - t0:.3f}", f"{t2 - t1:.3f}", f"{t2 - t0:.3f}",
                  str(len(eg.kernels)), str(len(list(eg.tasks()))),
                  ", ".join(f"{k} {v:.2f}" for k, v in passes), sim_us, frac)
    console.print(t)
    if args.png and points:
        plots.roofline_chart(points, pypto.get_machine(), args.png,
                             title="bench_compile: the lowered programs on the simulated machine (timing only)")


if __name__ == "__main__":
    main()

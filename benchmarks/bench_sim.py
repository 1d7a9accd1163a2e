"""Simulator benchmark: for each case, the simulated time, roofline bound and fraction on the simulated
machine, and the simulator's own speed — simulated PTO instructions per second of process CPU time —
on a timing-only run (no numbers; goal >= 1M instr/s) and on a functional run (numbers computed, the
race / clobber / event checks on, as a user's run; goal >= 100k instr/s), side by side.

Cases: hand-built Block IR kernels (pypto/testing/kernels.py: matmul fp16, softmax and rms_norm rows, a
gated MLP block) and programs the Tensor-level compiler produces (softmax of a matmul at 2048 rows; the
Qwen3-Next GDN chunk kernel, ``models.qwen3_next`` impl="tensor", at T=1024): many tasks, dynamic loops,
small tiles. Each Tensor-level program is compiled before it is timed (a first call at another size).
Both modes must give the same simulated cycles (the script checks). CPU time, not wall time: the machine
may be shared.

    python benchmarks/bench_sim.py                 # every case, both modes (a few minutes)
    python benchmarks/bench_sim.py --timing-only   # skip the functional runs
    python benchmarks/bench_sim.py --case GDN      # only the cases whose name holds GDN
    python benchmarks/bench_sim.py --full          # adds matmul 8192^3
    python benchmarks/bench_sim.py --machine a5 --json bench_results/sim.json --png bench_results/sim.png
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch                              # noqa: E402
from rich.console import Console          # noqa: E402
from rich.table import Table              # noqa: E402

import pypto                              # noqa: E402
from pypto import dtypes                  # noqa: E402
from pypto.ir.execution import Buffer, ExecutionGraph, Task   # noqa: E402
from pypto.machine import load_machine   # noqa: E402
from pypto.runtime import plots          # noqa: E402
from pypto.runtime.progress import progress   # noqa: E402
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


GOAL_TIMING = 1_000_000         # simulated instructions per CPU second, timing-only (issue 20 item 4)
GOAL_FUNCTIONAL = 100_000       # the same with numbers computed and the checks on


def _random(shape, dtype):
    return torch.randn(shape).to(dtype.torch_dtype)


class HandBuilt:
    """A hand-built ExecutionGraph, run by pypto.runtime.sim.run."""

    def __init__(self, name, build):
        self.name, self.build = name, build
        self.graph = None

    def run(self, machine, timing_only):
        g = self.graph = self.graph or self.build()
        if timing_only:
            args = {n: tuple(g.buffers[n].shape) for n in g.inputs}
        else:
            args = {n: _random(g.buffers[n].shape, g.buffers[n].dtype) for n in g.inputs}
        cpu0 = time.process_time()
        _, rep = sim.run(g, args, {}, machine=machine, timing_only=timing_only)
        return rep, time.process_time() - cpu0


class TensorSoftmaxMatmul:
    """pypto.softmax(x @ w, -1) at the Tensor level, x [rows, k], w [k, n] fp32."""

    def __init__(self, rows=2048, k=1024, n=1024):
        self.name = f"Tensor softmax(x @ w) fp32 [{rows}, {k}] x [{k}, {n}]"
        self.shapes = ((rows, k), (k, n))

    def run(self, machine, timing_only):
        (rows, k), (_, n) = self.shapes

        def softmax_matmul(x: pypto.Tensor[[rows, k], pypto.float32], w: pypto.Tensor[[k, n], pypto.float32]):
            return pypto.softmax(x @ w, -1)
        fn = pypto.jit(softmax_matmul, backend="sim", machine=machine, timing_only=timing_only)
        x, w = torch.randn(rows, k), torch.randn(k, n) / k ** 0.5
        fn.trace(x, w)                          # compiled before the clock starts
        cpu0 = time.process_time()
        fn(x, w)
        return fn.last_report, time.process_time() - cpu0


class TensorGDN:
    """models.qwen3_next chunk_gated_delta_rule, impl="tensor" (B=1, H=16, HV=32, K=V=128, bf16, chunk 64)."""

    def __init__(self, T=1024):
        self.name = f"Tensor GDN chunk kernel T={T} (qwen3_next impl=tensor)"
        self.T = T

    def run(self, machine, timing_only):
        from models.qwen3_next.functional import chunk_gated_delta_rule, kernel_function
        options = {"timing_only": timing_only, "machine": machine}

        def call(T):
            q, k = torch.randn(1, T, 16, 128).bfloat16(), torch.randn(1, T, 16, 128).bfloat16()
            v = torch.randn(1, T, 32, 128).bfloat16()
            g = torch.nn.functional.logsigmoid(torch.randn(1, T, 32) + 2.0)
            beta = torch.sigmoid(torch.randn(1, T, 32))
            cpu0 = time.process_time()
            chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True,
                                   chunk_size=64, backend="sim", jit_options=options, impl="tensor")
            return time.process_time() - cpu0
        call(64)                                # compiles (T is a dynamic size: one compilation serves both)
        cpu = call(self.T)
        return kernel_function("chunk", "sim", **options).last_report, cpu


def cases(full: bool):
    sizes = [1024, 2048, 4096] + ([8192] if full else [])
    out = [HandBuilt(f"matmul fp16 {n}^3", lambda n=n: matmul_case(n)) for n in sizes]
    out += [HandBuilt("softmax fp16 [8192, 4096]", softmax_case), HandBuilt("rms_norm fp16 [8192, 4096]", rms_norm_case),
            HandBuilt("MLP fp16 1024x2048x5632", mlp_case), TensorSoftmaxMatmul(), TensorGDN()]
    return out


def _rate(n, cpu):
    return n / cpu if cpu > 0 else None


def _cell(rate, goal):
    if rate is None:
        return "-"
    return f"[{'green' if rate >= goal else 'red'}]{rate:,.0f}[/]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="include matmul 8192^3")
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--timing-only", action="store_true", help="skip the functional runs")
    ap.add_argument("--case", action="append", default=None,
                    help="run only the cases whose name contains this text (repeatable)")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    ap.add_argument("--png", default=None, help="save a roofline chart of the cases here (needs pypto[plot])")
    args = ap.parse_args()

    rows, points = [], []
    todo = [c for c in cases(args.full) if not args.case or any(k in c.name for k in args.case)]
    if not todo:
        raise SystemExit(f"no case matches {', '.join(args.case)}; the cases: "
                         + "; ".join(c.name for c in cases(args.full)))
    with progress(total=len(todo), desc="simulating", unit="case") as bar:
        for case in todo:
            rows.append(_measure(case, args, points))
            bar.update(1)
    _table(rows, args)
    if args.png:
        plots.roofline_chart(points, load_machine(args.machine), args.png,
                             title=f"bench_sim: kernels on simulated {args.machine} (timing-only)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": args.machine, "goals": {"timing_only": GOAL_TIMING, "functional": GOAL_FUNCTIONAL},
                       "results": rows}, f, indent=2)


def _measure(case, args, points) -> dict:
    """One case timing-only, then functional (unless --timing-only); the same cycles both ways."""
    rep, cpu = case.run(args.machine, True)
    row = {"case": case.name, "sim_us": rep.time_us, "bound_us": rep.roofline_us, "bound_by": rep.bound_by,
           "fraction": rep.roofline_fraction, "instructions": rep.instructions, "tasks": rep.tasks,
           "wall_s": rep.wall_s, "cpu_s": cpu, "instr_per_s_cpu": _rate(rep.instructions, cpu),
           "gm_mb": rep.gm_bytes / 1e6, "l2_hit_mb": rep.l2_hit_bytes / 1e6}
    if not args.timing_only:
        frep, fcpu = case.run(args.machine, False)
        if frep.cycles != rep.cycles or frep.instructions != rep.instructions:
            raise SystemExit(f"{case.name}: the functional run took {frep.cycles} cycles, "
                             f"the timing-only run {rep.cycles}: the modes must agree")
        row |= {"functional_cpu_s": fcpu, "functional_instr_per_s_cpu": _rate(frep.instructions, fcpu)}
    points.append(plots.point_from_report(case.name, rep))
    return row


def _table(rows, args):
    t = Table(title=f"pypto sim on {args.machine}: simulated time, and the simulator's speed in simulated "
                    f"instructions per CPU second (timing-only goal {GOAL_TIMING:,}, functional goal "
                    f"{GOAL_FUNCTIONAL:,})")
    cols = ["case", "simulated us", "roofline us", "bound by", "fraction", "tasks", "instructions",
            "timing-only cpu s", "timing-only instr/s"]
    if not args.timing_only:
        cols += ["functional cpu s", "functional instr/s"]
    for col in cols + ["GM MB", "L2 hit MB"]:
        t.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        cells = [r["case"], f"{r['sim_us']:,.1f}", f"{r['bound_us']:,.1f}", r["bound_by"], f"{r['fraction']:.2f}",
                 f"{r['tasks']:,}", f"{r['instructions']:,}", f"{r['cpu_s']:.2f}",
                 _cell(r["instr_per_s_cpu"], GOAL_TIMING)]
        if not args.timing_only:
            cells += [f"{r['functional_cpu_s']:.2f}", _cell(r["functional_instr_per_s_cpu"], GOAL_FUNCTIONAL)]
        t.add_row(*cells, f"{r['gm_mb']:,.0f}", f"{r['l2_hit_mb']:,.0f}")
    Console(width=220).print(t)


if __name__ == "__main__":
    main()

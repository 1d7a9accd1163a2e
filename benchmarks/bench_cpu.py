"""cpu backend vs torch eager, same machine, same run: the generated PTO-ISA C++ compiled by g++
against pypto's CPU tile header, against torch's own CPU kernels. Ratios are ours / torch (lower is
better); the issue's targets: <= 0.7 on the fused elementwise chain and on rms_norm, <= 2 on matmul.

Each case is a function that builds its ExecutionGraph by hand; the Tensor-level compiler will later
produce these graphs instead. Times are the median of --repeat runs after a warm-up (which also
builds or loads the kernels); ours include the Python dispatch of the cpu backend.

    python benchmarks/bench_cpu.py                  # all cases at the issue's sizes
    python benchmarks/bench_cpu.py --small          # quick sizes
    python benchmarks/bench_cpu.py --json bench_results/cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import sympy                                          # noqa: E402
import torch                                          # noqa: E402
from rich.console import Console                      # noqa: E402
from rich.table import Table                          # noqa: E402
from tqdm import tqdm                                 # noqa: E402

from pypto import dtypes                              # noqa: E402
from pypto.ir.block import (BLOCK_IDX, BLOCK_NUM, Block, CoreType, For, GMParam, GMRegion, If,  # noqa: E402
                            Kernel, SetFlag, TileDecl, WaitFlag, instr)
from pypto.ir.execution import Buffer, ExecutionGraph, Task   # noqa: E402
from pypto.ir.isa import MemSpace, Pipe               # noqa: E402
from pypto.runtime import cpu                         # noqa: E402
from pypto.symbolic import ceildiv, index_symbol, smin, symbol   # noqa: E402

F32 = dtypes.float32
M, N, K = symbol("M"), symbol("N"), symbol("K")
UB, L1, L0A, L0B, L0C = MemSpace.UB, MemSpace.L1, MemSpace.L0A, MemSpace.L0B, MemSpace.L0C


class Tiles:
    """Tiles placed one after another per memory space, and instructions built against them."""

    def __init__(self):
        self.decls: dict[str, TileDecl] = {}
        self.top: dict = {}

    def add(self, name, space, shape, valid=None, dtype=F32):
        addr = self.top.get(space, 0)
        self.top[space] = addr + -(-shape[0] * shape[1] * dtype.itemsize // 32) * 32
        self.decls[name] = TileDecl(name, space, dtype, tuple(shape), addr, valid)

    def __call__(self, op, *operands, **attrs):
        return instr(op, list(operands), self.decls, attrs)


def _rows_loop(r, rows, body):
    """for r in range(block_idx * rows, M, block_num * rows): each core takes every block_num-th row tile."""
    return For(r, BLOCK_IDX * rows, M, BLOCK_NUM * rows, body)


def _graph(kernel, buffers, inputs, outputs, block_dim):
    task = Task(kernel.name, {p.name: p.name for b in kernel.blocks for p in b.gm_params}, block_dim=block_dim)
    return ExecutionGraph({kernel.name: kernel}, {b.name: b for b in buffers}, inputs, outputs, [task])


# ---------------------------------------------------------------- cases
def elementwise_case(rows=4096, cols=4096):
    """out = ((x * 2 + y).relu() - 0.5) * x / 3: six vector instructions per [4, 4096] row tile."""
    t, r, R = Tiles(), index_symbol("r"), 4
    valid = (smin(R, M - r), cols)
    for name in ("xt", "yt", "ot"):
        t.add(name, UB, (R, cols), valid)
    body = [t("TLOAD", "xt", GMRegion("x", (r, 0))), t("TLOAD", "yt", GMRegion("y", (r, 0))),
            SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
            t("TMULS", "ot", "xt", 2.0), t("TADD", "ot", "ot", "yt"), t("TRELU", "ot", "ot"),
            t("TSUBS", "ot", "ot", 0.5), t("TMUL", "ot", "ot", "xt"), t("TDIVS", "ot", "ot", 3.0),
            SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
            t("TSTORE", GMRegion("out", (r, 0)), "ot"),
            SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    gm = [GMParam(n, F32, (M, cols)) for n in ("x", "y", "out")]
    k = Kernel("fused_chain", [Block("fused_chain", CoreType.AIV, gm, [], list(t.decls.values()),
                                     [_rows_loop(r, R, body)])])
    bufs = [Buffer("x", (rows, cols), F32, "input"), Buffer("y", (rows, cols), F32, "input"),
            Buffer("out", (rows, cols), F32, "output")]
    x, y = torch.randn(rows, cols), torch.randn(rows, cols)
    return (_graph(k, bufs, ["x", "y"], ["out"], 48), {"x": x, "y": y, "out": torch.empty(rows, cols)},
            lambda: ((x * 2 + y).relu() - 0.5) * x / 3, "out")


def softmax_case(rows=8192, cols=4096):
    """y = softmax(x, -1) in [8, 4096] row tiles."""
    t, r, R = Tiles(), index_symbol("r"), 8
    vr = smin(R, M - r)
    t.add("xt", UB, (R, cols), (vr, cols))
    t.add("m", UB, (R, 8), (vr, 1))
    t.add("s", UB, (R, 8), (vr, 1))
    body = [t("TLOAD", "xt", GMRegion("x", (r, 0))), SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
            t("TROWMAX", "m", "xt"), t("TROWEXPANDSUB", "xt", "xt", "m"), t("TEXP", "xt", "xt"),
            t("TROWSUM", "s", "xt"), t("TROWEXPANDDIV", "xt", "xt", "s"),
            SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
            t("TSTORE", GMRegion("y", (r, 0)), "xt"),
            SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    gm = [GMParam("x", F32, (M, cols)), GMParam("y", F32, (M, cols))]
    k = Kernel("softmax", [Block("softmax", CoreType.AIV, gm, [], list(t.decls.values()), [_rows_loop(r, R, body)])])
    bufs = [Buffer("x", (rows, cols), F32, "input"), Buffer("y", (rows, cols), F32, "output")]
    x = torch.randn(rows, cols)
    return (_graph(k, bufs, ["x"], ["y"], 48), {"x": x, "y": torch.empty(rows, cols)},
            lambda: torch.softmax(x, -1), "y")


def rms_norm_case(rows=8192, cols=4096, eps=1e-6):
    """y = x * rsqrt(mean(x^2, -1) + eps) * w in [4, 4096] row tiles."""
    t, r, R = Tiles(), index_symbol("r"), 4
    vr = smin(R, M - r)
    t.add("xt", UB, (R, cols), (vr, cols))
    t.add("sq", UB, (R, cols), (vr, cols))
    t.add("wt", UB, (1, cols))
    t.add("ss", UB, (R, 8), (vr, 1))
    head = [t("TLOAD", "wt", GMRegion("w", (0,)))]
    body = [t("TLOAD", "xt", GMRegion("x", (r, 0))), SetFlag(Pipe.MTE2, Pipe.V, 0), WaitFlag(Pipe.MTE2, Pipe.V, 0),
            t("TMUL", "sq", "xt", "xt"), t("TROWSUM", "ss", "sq"), t("TMULS", "ss", "ss", 1.0 / cols),
            t("TADDS", "ss", "ss", eps), t("TRSQRT", "ss", "ss"),
            t("TROWEXPANDMUL", "xt", "xt", "ss"), t("TCOLEXPANDMUL", "xt", "xt", "wt"),
            SetFlag(Pipe.V, Pipe.MTE3, 0), WaitFlag(Pipe.V, Pipe.MTE3, 0),
            t("TSTORE", GMRegion("y", (r, 0)), "xt"),
            SetFlag(Pipe.MTE3, Pipe.MTE2, 0), WaitFlag(Pipe.MTE3, Pipe.MTE2, 0)]
    gm = [GMParam("x", F32, (M, cols)), GMParam("w", F32, (cols,)), GMParam("y", F32, (M, cols))]
    k = Kernel("rms_norm", [Block("rms_norm", CoreType.AIV, gm, [], list(t.decls.values()),
                                  head + [_rows_loop(r, R, body)])])
    bufs = [Buffer("x", (rows, cols), F32, "input"), Buffer("w", (cols,), F32, "input"),
            Buffer("y", (rows, cols), F32, "output")]
    x, w = torch.randn(rows, cols), torch.randn(cols)
    return (_graph(k, bufs, ["x", "w"], ["y"], 48), {"x": x, "w": w, "y": torch.empty(rows, cols)},
            lambda: torch.nn.functional.rms_norm(x, (cols,), w, eps), "y")


def matmul_case(n=2048, bm=128, bn=256, bk=64, dtype=F32):
    """c = a @ b, fp32 result: one [128, 256] output tile (all of L0C) per core, K in steps of 64
    through L1 -> L0A / L0B -> L0C (the tile shape bench_sim uses). ``dtype``: the operands' (fp16:
    converted to fp32 once per tile, accumulated in fp32; torch multiplies fp16 in fp16)."""
    t, kk = Tiles(), index_symbol("kk")
    tiles_n = ceildiv(N, bn)
    m0, n0 = sympy.floor(BLOCK_IDX / tiles_n) * bm, sympy.Mod(BLOCK_IDX, tiles_n) * bn
    vm, vn, vk = smin(bm, M - m0), smin(bn, N - n0), smin(bk, K - kk)
    t.add("a1", L1, (bm, bk), (vm, vk), dtype)
    t.add("b1", L1, (bk, bn), (vk, vn), dtype)
    t.add("a0", L0A, (bm, bk), (vm, vk), dtype)
    t.add("b0", L0B, (bk, bn), (vk, vn), dtype)
    t.add("c0", L0C, (bm, bn), (vm, vn))
    loop = For(kk, 0, K, bk, [
        WaitFlag(Pipe.MTE1, Pipe.MTE2, 0),
        t("TLOAD", "a1", GMRegion("a", (m0, kk))), t("TLOAD", "b1", GMRegion("b", (kk, n0))),
        SetFlag(Pipe.MTE2, Pipe.MTE1, 0), WaitFlag(Pipe.MTE2, Pipe.MTE1, 0),
        WaitFlag(Pipe.M, Pipe.MTE1, 0),
        t("TMOV", "a0", "a1"), t("TMOV", "b0", "b1"),
        SetFlag(Pipe.MTE1, Pipe.MTE2, 0), SetFlag(Pipe.MTE1, Pipe.M, 0), WaitFlag(Pipe.MTE1, Pipe.M, 0),
        If(sympy.Eq(kk, 0), [t("TMATMUL", "c0", "a0", "b0")], [t("TMATMUL_ACC", "c0", "a0", "b0")]),
        SetFlag(Pipe.M, Pipe.MTE1, 0)])
    body = [SetFlag(Pipe.MTE1, Pipe.MTE2, 0), SetFlag(Pipe.M, Pipe.MTE1, 0), loop,
            WaitFlag(Pipe.MTE1, Pipe.MTE2, 0), WaitFlag(Pipe.M, Pipe.MTE1, 0),
            SetFlag(Pipe.M, Pipe.FIX, 0), WaitFlag(Pipe.M, Pipe.FIX, 0),
            t("TSTORE", GMRegion("c", (m0, n0)), "c0")]
    gm = [GMParam("a", dtype, (M, K)), GMParam("b", dtype, (K, N)), GMParam("c", F32, (M, N))]
    k = Kernel(f"matmul_{dtype.name}", [Block("matmul", CoreType.AIC, gm, [], list(t.decls.values()), body)])
    bufs = [Buffer("a", (n, n), dtype, "input"), Buffer("b", (n, n), dtype, "input"),
            Buffer("c", (n, n), F32, "output")]
    a, b = torch.randn(n, n).to(dtype.torch_dtype), torch.randn(n, n).to(dtype.torch_dtype)
    blocks = -(-n // bm) * -(-n // bn)
    return (_graph(k, bufs, ["a", "b"], ["c"], blocks), {"a": a, "b": b, "c": torch.empty(n, n)},
            lambda: a @ b, "c")


CASES = {
    "fused elementwise chain (6 ops, 16M fp32)": (elementwise_case, dict(rows=4096, cols=4096),
                                                  dict(rows=512, cols=4096), 0.7),
    "softmax [8192, 4096] fp32": (softmax_case, dict(rows=8192, cols=4096), dict(rows=512, cols=4096), None),
    "rms_norm [8192, 4096] fp32": (rms_norm_case, dict(rows=8192, cols=4096), dict(rows=512, cols=4096), 0.7),
    "matmul 2048^3 fp32": (matmul_case, dict(n=2048), dict(n=512), 2.0),
    "matmul 1024^3 fp16 operands, fp32 accumulate": (matmul_case, dict(n=1024, dtype=dtypes.float16),
                                                     dict(n=512, dtype=dtypes.float16), None),
}


def _median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="quick sizes instead of the issue's")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="host threads for both (default: all CPUs)")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this text")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)

    rows = []
    cases = {n: c for n, c in CASES.items() if not args.only or args.only in n}
    for name, (make, full, small, target) in tqdm(cases.items(), desc="cases"):
        graph, tensors, reference, out_name = make(**(small if args.small else full))
        t0 = time.perf_counter()
        outputs, report = cpu.run(graph, tensors, {}, threads=threads)       # warm-up: builds or loads
        first = time.perf_counter() - t0
        want = reference()
        err = (outputs[out_name] - want).abs().max().item()
        ours = _median_time(lambda: cpu.run(graph, tensors, {}, threads=threads), args.repeat)
        theirs = _median_time(reference, args.repeat)
        rows.append({"case": name, "ours_ms": ours * 1e3, "torch_ms": theirs * 1e3, "ratio": ours / theirs,
                     "target": target, "max_abs_err": err, "first_run_s": first, "build": report.notes[0]})

    table = Table(title=f"pypto cpu backend vs torch eager ({threads} threads, median of {args.repeat})")
    for col in ("case", "ours (ms)", "torch (ms)", "ours / torch", "target", "max |err|", "first run (s)"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        ok = r["target"] is None or r["ratio"] <= r["target"]
        ratio = f"[{'green' if ok else 'red'}]{r['ratio']:.2f}[/]"
        table.add_row(r["case"], f"{r['ours_ms']:.1f}", f"{r['torch_ms']:.1f}", ratio,
                      "-" if r["target"] is None else f"<= {r['target']}", f"{r['max_abs_err']:.1e}",
                      f"{r['first_run_s']:.1f}")
    Console(width=140).print(table)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"threads": threads, "repeat": args.repeat, "small": args.small, "cases": rows}, f, indent=2)


if __name__ == "__main__":
    main()

"""Tensor-level programs (pypto.jit as a user writes them) on the timing-only simulator, against the
roofline of the algorithm:

    roofline = max(cube FLOPs / cube peak of the operand dtype, (inputs + outputs once) / HBM bandwidth)

(the FLOPs the algorithm needs, not what the kernels did: causal SDPA counts the unmasked half, the
GDN kernel the formula of bench_gdn.py). Rows: rms_norm [8192, 4096] fp16; the LLaMA MLP (rms_norm,
gate/up 2048 -> 5632, silu * up, down, residual) at 4096 tokens fp16; SDPA [3, 4096, 128] fp16 (one cube<->vector
cluster kernel in flash form, passes/flash.py; "flash off" lowers with flash=False: separate cube and vector tasks
meeting in GM, as before that pass) and the same causal before and after compile-time masks skip masked work (QK^T / P @ V tiles, softmax columns: passes/static_masks.py;
"before" lowers with static_masks=False); the Tensor-level GDN chunk kernel (models.qwen3_next, impl="tensor") at T=1024,
H16, HV32, K=V=128 (and its per-head layout, a loop over heads around each head's chunk recurrence,
at T=256); decode-shaped attention (one query row per head over 4096 keys: [32, 1, 128] x
[32, 4096, 128] fp16); one Qwen3-Next MoE expert's SwiGLU MLP (transformers' Qwen3NextConfig defaults:
hidden 2048, moe_intermediate 512; 256 tokens routed to it, fp16); and pypto.loop programs (issue 14
item 3: MPMD overlap) before and after their
loop workspaces are multi-buffered (passes/multibuffer.py; "before" lowers with multibuffer=False):
  loop: softmax blocks   out[i] = softmax(x[i] @ w) over 16 row blocks of 128, fp16
  loop: temporary        t = exp(x[i] @ w); out[i] = t / sum(t)
  loop: chain + blocks   the blocks next to a running state s = s * a[i] + b[i] (loop-carried)

Where a Professional-mode kernel solves the same problem it runs beside the row, through the
runners bench_pro.py (examples/pro/flash_attention.py: pipelined, fp16 handoff and softmax, 256-key
blocks) and models.qwen3_next (impl="pro") use; its fraction is of the same roofline. Each row also
names the bounds its kernels hit (``Report.decisions``: e.g. "cube 1, hbm 2") and the GM bytes the cores
moved per second ("GM TB/s": L2 hits, writes and HBM; near the machine's L2 bandwidth, a2a3 4.9 TB/s, a kernel
is bound by its GM traffic whatever its busiest pipe, as the SDPA rows' cube <-> vector handoffs are).

    python benchmarks/bench_tensor.py                  # every row (the GDN rows simulate ~20 s)
    python benchmarks/bench_tensor.py --quick          # without the GDN and the 4096-token MLP rows
    python benchmarks/bench_tensor.py --machine all --json bench_results/tensor.json --png bench_results/tensor.png

``--machine all`` runs a2a3 and a5, a column group per machine (``--png`` then saves one chart per
machine, ``tensor-a2a3.png`` ...). Simulator wall time is process CPU time (time.process_time), which
other work on the machine does not inflate.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pypto                                    # noqa: E402
import pypto.nn.functional as F                 # noqa: E402
from pypto.machine import get_machine, set_machine  # noqa: E402
from pypto.passes.pipeline import lower         # noqa: E402
from pypto.runtime import plots, sim            # noqa: E402

F16 = torch.float16
LOOP_BLOCKS, LOOP_ROWS = 16, 128
MACHINES = ("a2a3", "a5")                       # --machine all


# ---------------------------------------------------------------- the programs
def rms_norm(x, w):
    return F.rms_norm(x, [x.shape[-1]], w, eps=1e-6)


def llama_mlp(x, norm_w, w_gate, w_up, w_down):
    h = F.rms_norm(x, [x.shape[-1]], norm_w, eps=1e-6)
    return x + (F.silu(h @ w_gate) * (h @ w_up)) @ w_down


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def moe_expert(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def loop_softmax_blocks(x, w):
    out = pypto.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    for i in pypto.loop(x.shape[0] // LOOP_ROWS):
        out[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] = F.softmax(x[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] @ w, dim=-1)
    return out


def loop_temporary(x, w):
    out = pypto.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    for i in pypto.loop(x.shape[0] // LOOP_ROWS):
        t = (x[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] @ w).exp()
        out[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] = t / t.sum(-1, keepdim=True)
    return out


def loop_chain(x, w, a, b):
    out = pypto.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    s = pypto.zeros(LOOP_ROWS, a.shape[1], dtype=a.dtype)
    for i in pypto.loop(x.shape[0] // LOOP_ROWS):
        out[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] = F.softmax(x[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] @ w, dim=-1)
        s[:, :] = s * a[i * LOOP_ROWS:(i + 1) * LOOP_ROWS] + b[i * LOOP_ROWS:(i + 1) * LOOP_ROWS]
    return out, s


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def cases(quick: bool):
    """(name, program, inputs, cube FLOPs, minimal bytes, options) per row."""
    z = torch.zeros
    out = []
    x, w = z(8192, 4096, dtype=F16), z(4096, dtype=F16)
    out.append(("rms_norm [8192, 4096] fp16", rms_norm, (x, w), 0, _nbytes(x, w, x), {}))
    if not quick:
        t, d, f = 4096, 2048, 5632
        x, nw = z(t, d, dtype=F16), z(d, dtype=F16)
        wg, wu, wd = z(d, f, dtype=F16), z(d, f, dtype=F16), z(f, d, dtype=F16)
        out.append((f"LLaMA MLP {t} tokens {d}->{f} fp16", llama_mlp, (x, nw, wg, wu, wd), 3 * 2 * t * d * f,
                    _nbytes(x, nw, wg, wu, wd, x), {}))
    q = z(3, 4096, 128, dtype=F16)
    attn = 2 * 2 * 3 * 4096 * 4096 * 128                   # QK^T and PV
    out.append(("SDPA [3, 4096, 128] fp16", sdpa, (q, q, q), attn, _nbytes(q, q, q, q), {}))
    out.append(("SDPA [3, 4096, 128] fp16 (flash off)", sdpa, (q, q, q), attn, _nbytes(q, q, q, q), {"flash": False}))
    for sm in (False, True):
        out.append((f"SDPA [3, 4096, 128] fp16 causal ({'after' if sm else 'before'})", sdpa_causal, (q, q, q),
                    attn / 2, _nbytes(q, q, q, q), {"static_masks": sm}))
    q1, k, v = z(32, 1, 128, dtype=F16), z(32, 4096, 128, dtype=F16), z(32, 4096, 128, dtype=F16)
    out.append(("decode SDPA [32, 1, 128] x [32, 4096, 128] fp16", sdpa, (q1, k, v), 2 * 2 * 32 * 4096 * 128,
                _nbytes(q1, k, v, q1), {}))
    t, d, f = 256, 2048, 512
    x, wg, wu, wd = z(t, d, dtype=F16), z(d, f, dtype=F16), z(d, f, dtype=F16), z(f, d, dtype=F16)
    out.append((f"MoE expert MLP {t} tokens {d}->{f} fp16", moe_expert, (x, wg, wu, wd), 3 * 2 * t * d * f,
                _nbytes(x, wg, wu, wd, x), {}))
    n = LOOP_BLOCKS * LOOP_ROWS
    x, w = z(n, 128, dtype=F16), z(128, 128, dtype=F16)
    a, b = z(n, 128), z(n, 128)
    mm = 2 * n * 128 * 128
    for name, fn, args in (("loop: softmax blocks", loop_softmax_blocks, (x, w)),
                           ("loop: temporary", loop_temporary, (x, w)),
                           ("loop: chain + blocks", loop_chain, (x, w, a, b))):
        outs = [z(n, 128)] + ([z(LOOP_ROWS, 128)] if fn is loop_chain else [])
        for mb in (False, True):
            out.append((f"{name} ({'after' if mb else 'before'})", fn, args, mm, _nbytes(*args, *outs),
                        {"multibuffer": mb}))
    return out


def roofline_us(machine, cube_flops, nbytes, dtype="float16"):
    t_cube = cube_flops / machine.peak_cube_flops(dtype)
    t_hbm = nbytes / machine.memory["hbm_bytes_per_s"]
    return max(t_cube, t_hbm) * 1e6, "cube" if t_cube >= t_hbm else "hbm"


def run_program(fn, args, machine, multibuffer=True, static_masks=True, flash=True):
    """(Report, CPU seconds) of one timing-only simulation of ``fn`` traced on ``args``."""
    graph = lower(pypto.jit(fn, backend="reference").trace(*args), machine=machine, multibuffer=multibuffer,
                  static_masks=static_masks, flash=flash)
    cpu0 = time.process_time()
    _, report = sim.run(graph, dict(zip(graph.inputs, args)), {}, machine=machine, timing_only=True)
    return report, time.process_time() - cpu0


def gdn_row(machine_name, T=1024, per_head=False, impl="tensor"):
    """The GDN chunk kernel through models.qwen3_next as bench_gdn.py runs it: impl "tensor" (per_head:
    the layout with a loop over heads around each head's chunk recurrence, the cpu backend's) or "pro".
    -> (Report, CPU seconds, roofline us, bound by)."""
    from bench_gdn import gdn_inputs, roofline
    from models.qwen3_next.functional import chunk_gated_delta_rule
    machine = pypto.load_machine(machine_name)
    q, k, v, g, beta = gdn_inputs(1, T, 16, 32, 128, 128, torch.bfloat16, random=False)
    options = {"timing_only": True, "machine": machine_name}
    layout = {"per_head": per_head} if impl == "tensor" else {}
    cpu0 = time.process_time()
    chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True, chunk_size=64,
                           backend="sim", jit_options=options, impl=impl, **layout)
    cpu = time.process_time() - cpu0
    report = pypto.last_report()
    _, _, bound_us, by = roofline(T, 16, 32, 128, 128, 64, machine)
    return report, cpu, bound_us, by


def pro_sdpa(machine_name):
    """(Report, CPU seconds) of bench_pro.py's flash attention at SDPA [3, 4096, 128] fp16 (pipelined, fp16
    handoff and softmax, 256-key blocks), on ``machine_name``."""
    from bench_pro import pro_attention
    previous = get_machine()
    set_machine(machine_name)
    try:
        cpu0 = time.process_time()
        report = pro_attention(3, 4096, 128, True, "fp16", get_machine(), math="fp16", block_k=256)
        return report, time.process_time() - cpu0
    finally:
        set_machine(previous)


# program name -> the Professional-mode run of the same problem: (Report, CPU seconds) on a machine name
PRO = {"SDPA [3, 4096, 128] fp16": pro_sdpa,
       "GDN chunk kernel (tensor) T=1024 H16 HV32 K=V=128": lambda m: gdn_row(m, 1024, impl="pro")[:2]}


def figures(report, cpu, bound_us) -> dict:
    """One run's figures; ``kernel_bounds``: how many of its kernels hit each bound (Report.decisions)."""
    bounds = Counter(d["bound"] for d in report.decisions.values() if "bound" in d)
    return {"sim_us": report.time_us, "roofline_us": bound_us, "fraction": bound_us / report.time_us,
            "cycles": report.cycles, "tasks": report.tasks, "sim_cpu_s": cpu,
            "gm_TBps": report.gm_bytes / (report.time_us * 1e-6) / 1e12,
            "utilization": {k: v["core"] for k, v in report.utilization.items()},
            "kernel_bounds": dict(bounds.most_common())}


def bench_machine(machine_name, quick) -> tuple[dict, list]:
    """({program: {figures..., "bound_by", "pro": figures or None}}, roofline chart points) on one machine.
    A run that raises leaves its figures out and says why (``error``), as bench_gdn.py's table does."""
    machine = pypto.load_machine(machine_name)
    rows, points = {}, []

    def measured(label, run, bound):
        try:
            report, cpu = run()
        except Exception as e:  # noqa: BLE001 - the table says why
            return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
        points.append(plots.point_from_report(label, report))
        return figures(report, cpu, bound)

    def add(name, run, bound, by):
        rows[name] = {**measured(name, run, bound), "roofline_us": bound, "bound_by": by, "pro": None}
        if name in PRO:
            rows[name]["pro"] = measured(f"pro: {name}", lambda: PRO[name](machine_name), bound)

    for name, fn, inputs, flops, nbytes, opts in cases(quick):
        add(name, lambda: run_program(fn, inputs, machine_name, **opts), *roofline_us(machine, flops, nbytes))
    if not quick:
        from bench_gdn import roofline
        for T, per_head in ((1024, False), (256, True)):
            add(f"GDN chunk kernel (tensor{', per head' if per_head else ''}) T={T} H16 HV32 K=V=128",
                lambda: gdn_row(machine_name, T, per_head)[:2], *roofline(T, 16, 32, 128, 128, 64, machine)[2:])
    return rows, points


def _png_path(png, machine_name, several) -> str:
    stem, ext = os.path.splitext(png)
    return f"{stem}-{machine_name}{ext or '.png'}" if several else png


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the GDN and the 4096-token MLP rows")
    ap.add_argument("--machine", default="a2a3", help="a machine name, or 'all' (a2a3 and a5)")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    ap.add_argument("--png", default=None, help="save a roofline chart of the runs here (needs pypto[plot])")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    machines = list(MACHINES) if args.machine == "all" else [args.machine]

    results = {}
    for m in machines:
        results[m], points = bench_machine(m, args.quick)
        if args.png:
            plots.roofline_chart(points, pypto.load_machine(m), _png_path(args.png, m, len(machines) > 1),
                                 title=f"bench_tensor: Tensor-level programs (and Professional mode) on simulated "
                                       f"{m}, timing only")

    table = Table(title=f"Tensor-level programs, timing-only sim on {', '.join(machines)}: fraction of the "
                        f"roofline (pro: the Professional-mode kernel, same roofline)")
    table.add_column("program")
    for m in machines:
        for col in ("simulated us", "roofline us", "bound by", "fraction", "pro", "GM TB/s", "kernels' bounds"):
            table.add_column(f"{m} {col}" if len(machines) > 1 else col, justify="right")
    table.add_column("sim cpu s", justify="right")
    for name in results[machines[0]]:
        cells, cpu = [name], 0.0
        for m in machines:
            r, pro = results[m][name], results[m][name]["pro"]
            ran = "error" not in r
            cells += [f"{r['sim_us']:,.1f}" if ran else "failed", f"{r['roofline_us']:,.1f}", r["bound_by"],
                      f"{r['fraction']:.3f}" if ran else "-",
                      ("failed" if "error" in pro else f"{pro['fraction']:.3f}") if pro else "-",
                      f"{r['gm_TBps']:.2f}" if ran else "-",
                      ", ".join(f"{b} {n}" for b, n in r["kernel_bounds"].items()) if ran else r["error"]]
            cpu += sum(x.get("sim_cpu_s", 0.0) for x in (r, pro) if x)
        table.add_row(*cells, f"{cpu:.1f}")
    console = Console(width=120 + 90 * len(machines))
    console.print(table)
    for m in machines:
        for name, r in results[m].items():
            if r["pro"] and "error" in r["pro"]:
                console.print(f"[yellow]{m}, pro: {name}: {r['pro']['error']}[/yellow]")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machines": machines, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()

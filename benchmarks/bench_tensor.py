"""Tensor-level programs (pypto.jit as a user writes them) on the timing-only simulator, against the
roofline of the algorithm:

    roofline = max(cube FLOPs / cube peak of the operand dtype, (inputs + outputs once) / HBM bandwidth)

(the FLOPs the algorithm needs, not what the kernels did: causal SDPA counts the unmasked half, the
GDN kernel the formula of bench_gdn.py). Rows: rms_norm [8192, 4096] fp16; the LLaMA MLP (rms_norm,
gate/up 2048 -> 5632, silu * up, down, residual) at 4096 tokens fp16; SDPA [3, 4096, 128] fp16 and
the same causal before and after compile-time masks skip the masked cube tiles (passes/static_masks.py;
"before" lowers with static_masks=False); the Tensor-level GDN chunk kernel (models.qwen3_next, impl="tensor") at T=1024,
H16, HV32, K=V=128 (and its per-head layout, a loop over heads around each head's chunk recurrence,
at T=256); and pypto.loop programs (issue 14 item 3: MPMD overlap) before and after their
loop workspaces are multi-buffered (passes/multibuffer.py; "before" lowers with multibuffer=False):
  loop: softmax blocks   out[i] = softmax(x[i] @ w) over 16 row blocks of 128, fp16
  loop: temporary        t = exp(x[i] @ w); out[i] = t / sum(t)
  loop: chain + blocks   the blocks next to a running state s = s * a[i] + b[i] (loop-carried)

    python benchmarks/bench_tensor.py                  # every row (the GDN rows simulate ~20 s)
    python benchmarks/bench_tensor.py --quick          # without the GDN and the 4096-token MLP rows
    python benchmarks/bench_tensor.py --machine a5 --json bench_results/tensor.json

Simulator wall time is process CPU time (time.process_time), which other work on the machine does
not inflate.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pypto                                    # noqa: E402
import pypto.nn.functional as F                 # noqa: E402
from pypto.passes.pipeline import lower         # noqa: E402
from pypto.runtime import sim                   # noqa: E402

F16 = torch.float16
LOOP_BLOCKS, LOOP_ROWS = 16, 128


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
    for sm in (False, True):
        out.append((f"SDPA [3, 4096, 128] fp16 causal ({'after' if sm else 'before'})", sdpa_causal, (q, q, q),
                    attn / 2, _nbytes(q, q, q, q), {"static_masks": sm}))
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


def run_program(fn, args, machine, multibuffer=True, static_masks=True):
    """(Report, CPU seconds) of one timing-only simulation of ``fn`` traced on ``args``."""
    graph = lower(pypto.jit(fn, backend="reference").trace(*args), machine=machine, multibuffer=multibuffer,
                  static_masks=static_masks)
    cpu0 = time.process_time()
    _, report = sim.run(graph, dict(zip(graph.inputs, args)), {}, machine=machine, timing_only=True)
    return report, time.process_time() - cpu0


def gdn_row(machine_name, T=1024, per_head=False):
    """The Tensor-level GDN chunk kernel, through models.qwen3_next as bench_gdn.py runs it; per_head:
    the layout with a loop over heads around each head's chunk recurrence (the cpu backend's)."""
    from bench_gdn import gdn_inputs, roofline
    from models.qwen3_next.functional import chunk_gated_delta_rule
    machine = pypto.load_machine(machine_name)
    q, k, v, g, beta = gdn_inputs(1, T, 16, 32, 128, 128, torch.bfloat16, random=False)
    options = {"timing_only": True, "machine": machine_name}
    cpu0 = time.process_time()
    chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True, chunk_size=64,
                           backend="sim", jit_options=options, impl="tensor", per_head=per_head)
    cpu = time.process_time() - cpu0
    report = pypto.last_report()
    _, _, bound_us, by = roofline(T, 16, 32, 128, 128, 64, machine)
    return report, cpu, bound_us, by


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the GDN and the 4096-token MLP rows")
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    machine = pypto.load_machine(args.machine)

    rows = []
    for name, fn, inputs, flops, nbytes, opts in cases(args.quick):
        bound, by = roofline_us(machine, flops, nbytes)
        rep, cpu = run_program(fn, inputs, args.machine, **opts)
        rows.append({"program": name, "sim_us": rep.time_us, "roofline_us": bound, "bound_by": by,
                     "fraction": bound / rep.time_us, "cycles": rep.cycles, "tasks": rep.tasks,
                     "utilization": {k: v["core"] for k, v in rep.utilization.items()}, "sim_cpu_s": cpu})
    if not args.quick:
        for T, per_head in ((1024, False), (256, True)):
            rep, cpu, bound, by = gdn_row(args.machine, T, per_head)
            name = f"GDN chunk kernel (tensor{', per head' if per_head else ''}) T={T} H16 HV32 K=V=128"
            rows.append({"program": name, "sim_us": rep.time_us, "roofline_us": bound, "bound_by": by,
                         "fraction": bound / rep.time_us, "cycles": rep.cycles, "tasks": rep.tasks,
                         "utilization": {k: v["core"] for k, v in rep.utilization.items()}, "sim_cpu_s": cpu})

    table = Table(title=f"Tensor-level programs, timing-only sim on {args.machine}: fraction of the roofline")
    for col in ("program", "simulated us", "roofline us", "bound by", "fraction", "tasks", "AIC busy",
                "AIV busy", "sim cpu s"):
        table.add_column(col, justify="left" if col == "program" else "right")
    for r in rows:
        u = r["utilization"]
        table.add_row(r["program"], f"{r['sim_us']:,.1f}", f"{r['roofline_us']:,.1f}", r["bound_by"],
                      f"{r['fraction']:.3f}", str(r["tasks"]), f"{u.get('AIC', 0):.2f}", f"{u.get('AIV', 0):.2f}",
                      f"{r['sim_cpu_s']:.1f}")
    Console(width=160).print(table)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": args.machine, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()

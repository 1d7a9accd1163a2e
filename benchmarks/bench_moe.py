"""Qwen3-Next's sparse MoE block (models/qwen3_next/moe.py) on the timing-only simulator, against the
cube roofline of its routed FLOPs:

    routed FLOPs = 2 * (tokens * top_k) * 3 * hidden * moe_intermediate      (gate, up, down of each pick)
    roofline     = routed FLOPs / cube peak of the dtype

Default: 4096 tokens, hidden 2048, 64 experts, top-8, moe_intermediate 512, shared expert 512, bf16.
The block is two programs (see moe.py): ``experts`` (the grouped SwiGLU whose per-expert trip counts
and offsets are data scalars, the unpermute and weighted sum in one kernel, the gated shared expert) and ``dispatch``
(router, softmax, top-k, counts, the permutation and the permuted tokens). The experts program needs
real counts even when timing only, so its inputs are the routing of random tokens by a random router
(moe_reference.route: about 512 rows per expert); the dispatch program's timing does not depend on
data. Rows: each part's simulated time, its share of the roofline, the kernels' bounds
(Report.decisions), and the block (both programs one after the other).

``--parts all`` (the default) simulates the whole block, ``grouped`` the grouped SwiGLU alone (the routed
FLOPs the fraction is of), ``experts`` that program without dispatch. The permutation and the unpermute
are row gathers / a row scatter by indexed DMA (MGATHER / MSCATTER, pypto/passes/row_moves.py) and each
row's rank inside its expert a blocked prefix scan (moe.dispatch_plan), both linear in the tokens. Each
part also lists its longest kernels (span on the timeline, what bound each: Report.decisions).

What bounds the block (default sizes, a2a3): the grouped SwiGLU, 812 us of the block's 1321 us (0.429 of
the roofline; a5 1025 us, 0.415), whose 192 chunk tasks keep the AICs 99% busy (the experts overlap: their
gate_up / silu workspaces have copies, passes/multibuffer.py), the cube pipe 73% (matmul_1, K 2048, MTE2-bound
at its 128 x 256 x 64 tiles); after it, in series, the
unpermute with the weighted sum over the k slots (one kernel, ~112 us, reading the N k routed rows from
HBM); the dispatch program takes ~200 us (router, top-k, the permuted tokens' row gather ~65 us, MTE3).

    python benchmarks/bench_moe.py                       # a2a3
    python benchmarks/bench_moe.py --machine all         # a2a3 and a5
    python benchmarks/bench_moe.py --tokens 1024 --parts grouped --json bench_results/moe.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pypto                                                  # noqa: E402
from models.qwen3_next import moe_reference as R              # noqa: E402
from models.qwen3_next.config import Qwen3NextConfig          # noqa: E402
from models.qwen3_next.moe import ROWS_PER_CHUNK, build_programs, grouped_swiglu  # noqa: E402

MACHINES = ("a2a3", "a5")
TOP_KERNELS = 4                 # kernels listed per part, longest span first


def routed_flops(tokens, c: Qwen3NextConfig) -> int:
    return 2 * tokens * c.num_experts_per_tok * 3 * c.hidden_size * c.moe_intermediate_size


def inputs(tokens, c: Qwen3NextConfig, dtype):
    """(x, HF-layout weights, routing of x by the router: weights, counts, offsets, rows, x_perm)."""
    g = torch.Generator().manual_seed(0)
    st = R.random_state(c, dtype, generator=g)
    x = torch.randn(tokens, c.hidden_size, generator=g).to(dtype)
    _, weights, ids = R.route(x, st["gate.weight"], c.num_experts_per_tok, c.norm_topk_prob)
    counts = R.expert_counts(ids, c.num_experts)
    offsets = (torch.cumsum(counts, 0) - counts).to(torch.int32)
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices                   # row -> (token, slot)
    rows = torch.empty_like(order)
    rows[order] = torch.arange(order.numel())
    x_perm = x[order // c.num_experts_per_tok]
    return x, st, weights, counts, offsets, rows.to(torch.int32), x_perm


def grouped_program(c: Qwen3NextConfig, dt, rows_per_chunk, **jit_options):
    """The grouped SwiGLU alone (moe.grouped_swiglu): the routed FLOPs and nothing else."""
    H, DYN = c.hidden_size, pypto.DYNAMIC

    @pypto.jit(name="moe_grouped_swiglu", **jit_options)
    def grouped(x_perm: pypto.Tensor[[DYN, H], dt], counts: pypto.Tensor[[c.num_experts], pypto.int32],
                offsets: pypto.Tensor[[c.num_experts], pypto.int32], gate_up, down,
                out: pypto.Tensor[[DYN, H], dt]):
        grouped_swiglu(x_perm, counts, offsets, gate_up, down, out, rows_per_chunk)

    return grouped


def figures(report, cpu_s, bound_us, clock_ghz) -> dict:
    bounds = Counter(d["bound"] for d in report.decisions.values() if "bound" in d)
    longest = sorted(((d["span_cycles"] / clock_ghz / 1e3, k, d["bound"]) for k, d in report.decisions.items()
                      if "span_cycles" in d), reverse=True)[:TOP_KERNELS]
    return {"sim_us": report.time_us, "fraction": bound_us / report.time_us, "tasks": report.tasks,
            "sim_cpu_s": round(cpu_s, 1), "utilization": {k: v["core"] for k, v in report.utilization.items()},
            "kernel_bounds": dict(bounds.most_common()),
            "longest_kernels": [{"kernel": k, "span_us": round(us, 1), "bound": b} for us, k, b in longest]}


def bench(machine_name, tokens, c, dtype, rows_per_chunk, parts) -> dict:
    machine = pypto.load_machine(machine_name)
    dt = pypto.dtypes.from_torch(dtype)
    bound_us = routed_flops(tokens, c) / machine.peak_cube_flops(dt.name) * 1e6
    dispatch, experts = build_programs(c, dt, rows_per_chunk, backend="sim", machine=machine_name, timing_only=True)
    x, st, weights, counts, offsets, rows, x_perm = inputs(tokens, c, dtype)
    out = {"machine": machine_name, "roofline_us": bound_us, "routed_gflop": routed_flops(tokens, c) / 1e9,
           "counts_min_max": [int(counts.min()), int(counts.max())]}
    stacked = (st["experts.gate_up_proj"].reshape(-1, c.hidden_size),
               st["experts.down_proj"].reshape(-1, c.moe_intermediate_size))
    grouped = grouped_program(c, dt, rows_per_chunk, backend="sim", machine=machine_name, timing_only=True)
    cpu0 = time.process_time()
    grouped(x_perm, counts, offsets, *stacked, torch.empty_like(x_perm))
    out["grouped"] = figures(grouped.last_report, time.process_time() - cpu0, bound_us, machine.clock_ghz)
    if parts == "grouped":
        return out
    cpu0 = time.process_time()
    experts(x, x_perm, counts, offsets, rows, weights, *stacked,
            st["shared_expert.gate_proj.weight"], st["shared_expert.up_proj.weight"],
            st["shared_expert.down_proj.weight"], st["shared_expert_gate.weight"], torch.empty_like(x_perm))
    out["experts"] = figures(experts.last_report, time.process_time() - cpu0, bound_us, machine.clock_ghz)
    if parts == "all":
        cpu0 = time.process_time()
        dispatch(x, st["gate.weight"])
        out["dispatch"] = figures(dispatch.last_report, time.process_time() - cpu0, bound_us, machine.clock_ghz)
        block_us = out["experts"]["sim_us"] + out["dispatch"]["sim_us"]
        out["block"] = {"sim_us": block_us, "fraction": bound_us / block_us}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="a2a3", choices=MACHINES + ("all",))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--rows-per-chunk", type=int, default=ROWS_PER_CHUNK)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--parts", default="all", choices=("grouped", "experts", "all"),
                    help="grouped: the grouped SwiGLU alone; experts: and the experts program; all: and dispatch")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    c = Qwen3NextConfig(hidden_size=a.hidden, num_experts=a.experts, num_experts_per_tok=a.top_k,
                        moe_intermediate_size=a.intermediate, shared_expert_intermediate_size=a.intermediate)
    results = []
    for m in (MACHINES if a.machine == "all" else (a.machine,)):
        r = bench(m, a.tokens, c, getattr(torch, a.dtype), a.rows_per_chunk, a.parts)
        results.append(r)
        print(f"\nMoE block {a.tokens} tokens, hidden {a.hidden}, {a.experts} experts top-{a.top_k}, "
              f"moe_intermediate {a.intermediate} (+ shared), {a.dtype}, {m}: routed {r['routed_gflop']:.1f} GFLOP, "
              f"cube roofline {r['roofline_us']:.1f} us; rows per expert {r['counts_min_max']}")
        for part in ("grouped", "experts", "dispatch"):
            if part in r:
                f = r[part]
                util = ", ".join(f"{k} {v:.0%}" for k, v in f["utilization"].items())
                frac = "no routed FLOPs" if part == "dispatch" else f"fraction {f['fraction']:.3f}"
                print(f"  {part:9s} {f['sim_us']:10.1f} us  {frac}  tasks {f['tasks']}  "
                      f"bounds {f['kernel_bounds']}  busy: {util}  (sim {f['sim_cpu_s']} CPU s)")
                print("            longest: " + "; ".join(f"{x['kernel']} {x['span_us']} us ({x['bound']})"
                                                         for x in f["longest_kernels"]))
        if "block" in r:
            print(f"  {'block':9s} {r['block']['sim_us']:10.1f} us  fraction {r['block']['fraction']:.3f}")
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()

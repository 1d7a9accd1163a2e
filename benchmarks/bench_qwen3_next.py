"""Qwen3-Next decode benchmark: one decode step of each kind of program the model runs, at the default (80B-A3B)
dims on the timing-only simulated a2a3, per program microseconds, and the 48-layer model's decode tokens/s
composed from them.

    python benchmarks/bench_qwen3_next.py [--batches 1,32] [--kv-len 4096] [--experts 512] [--top-k 10]
                                          [--machine a2a3] [--skip MoE,...]

Rows (bf16, hidden 2048), each one decode token per sequence for B sequences, each the program(s) the model's
forward (models/qwen3_next/model.py) calls:
  embedding  embed_tokens (Qwen3NextEmbedding): B rows of the [151936, 2048] table, each read at its id
  norm       a residual add + zero-centred RMSNorm (Qwen3NextRMSNorm(x, residual)): 2 per layer + the final norm
             (the first layer's input norm has no add; timed as the others)
  GDN        Qwen3NextGatedDeltaNet with a filled GDNCache (conv + recurrent rule, 32 value heads of 128 x 128)
  attention  Qwen3NextAttention with a PagedKVCache holding --kv-len tokens per sequence (16 heads, 2 kv heads,
             head_dim 256; pages of 128 tokens)
  MoE        Qwen3NextSparseMoeBlock: its dispatch and experts programs; router over --experts experts, top-10,
             moe_intermediate 512, shared expert
  LM head    lm_head (vocab 151936) on the [B, 2048] rows
The model row is composed from these per-program runs, not a run of the model: 36 GDN + 12 attention + 48 MoE
layers + 97 norms + the embedding and the LM head, each row's time x its count; tokens/s = B / that sum.
Programs run one after another (as the model's Python loop calls them), so their times add.

The HBM bound of a row is the bytes its decode step must move / the machine's HBM bandwidth: its weights (MoE:
the router, the shared expert and the distinct experts the step's tokens were routed to, counted from the
router's choice on these inputs; embedding: the B rows read) + its state or cache read and written (GDN: the
fp32 recurrent state and the conv window; attention: the K and V of the cache read, the new token's written)
+ its activations in and out. The model's bound is the rows' bounds x their counts.

Timing-only simulation: the data are random, the routing is what the router gives on them (the MoE dispatch
runs with data: its counts are the experts program's trip counts). Each row is one call, compile included:
simulated cycles do not depend on what ran before, so no warm-up call. Where the CPU goes (process CPU, B=32,
512 experts): simulating the tasks (sim/core.py step/instr, the L2 model's gm.move) is 85-95% of each row,
linear in the tasks run (attention 19.4k tasks ~18 s, MoE 724 tasks of large boxes ~18 s); compiling each
program is under 3 s and happens once (dynamic batch dim). The whole bench: ~105 s CPU. B=32 was slow
(LM head alone 155 s) while a [B, 1, H] linear was a batched matmul reading its weight B times.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pypto  # noqa: E402
import pypto.nn as nn  # noqa: E402
from models.qwen3_next.attention import Qwen3NextAttention  # noqa: E402
from models.qwen3_next.config import Qwen3NextConfig  # noqa: E402
from models.qwen3_next.kv_cache import PagedKVCache  # noqa: E402
from models.qwen3_next.layer import Qwen3NextGatedDeltaNet  # noqa: E402
from models.qwen3_next.model import Qwen3NextEmbedding, Qwen3NextRMSNorm  # noqa: E402
from models.qwen3_next.moe import Qwen3NextSparseMoeBlock  # noqa: E402
from models.qwen3_next.moe_reference import route  # noqa: E402

DTYPE = torch.bfloat16
BYTES = 2
LAYERS = {"embedding": 1, "norm": 97, "GDN": 36, "attention": 12, "MoE": 48, "LM head": 1}
console = Console(width=150)


def randomize(module, std=0.02, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _, p in module.named_parameters():
        p.data.normal_(0.0, std, generator=gen)          # in place: 512 experts are 3 GB in bf16
    return module


def activations(B, hidden, seed):
    """One decode token's hidden state per sequence, [B, 1, hidden]; seeded per row, so that a row's inputs (the
    MoE's routing) do not depend on the rows run before it."""
    return torch.randn(B, 1, hidden, generator=torch.Generator().manual_seed(seed)).to(DTYPE)


def simulated(run) -> tuple[float, int, float]:
    """(simulated us summed over the runs one call makes, tasks run, process CPU s of the call)."""
    from pypto.runtime.report import on_report
    reports = []
    unsubscribe = on_report(reports.append)
    t0 = time.process_time()
    try:
        run()
    finally:
        unsubscribe()
    cpu = time.process_time() - t0
    if not reports or any(r is None or r.time_us is None for r in reports):
        raise RuntimeError("a run gave no simulated time")
    return sum(r.time_us for r in reports), sum(r.tasks for r in reports), cpu


def embedding_row(cfg, B, opts):
    emb = randomize(Qwen3NextEmbedding(cfg.vocab_size, cfg.hidden_size, dtype=DTYPE)).compile(**opts)
    ids = torch.randint(0, cfg.vocab_size, (B, 1), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    return (lambda: emb(ids)), 2 * B * cfg.hidden_size * BYTES + B * 4


def norm_row(cfg, B, opts):
    norm = randomize(Qwen3NextRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=DTYPE)).compile(**opts)
    x, r = activations(B, cfg.hidden_size, seed=2), activations(B, cfg.hidden_size, seed=3)
    return (lambda: norm(x, r)), (4 * B + 1) * cfg.hidden_size * BYTES     # x, r in; x + r, norm out; weight


def gdn_row(cfg, B, opts):
    c = cfg.gdn_config()
    layer = randomize(Qwen3NextGatedDeltaNet(c, dtype=DTYPE)).compile(**opts)
    from models.qwen3_next.reference import GDNCache
    x = activations(B, c.hidden_size, seed=4)

    def run():
        cache = GDNCache()
        cache.conv_state = torch.zeros(B, c.conv_dim, c.linear_conv_kernel_dim - 1, dtype=DTYPE)
        cache.recurrent_state = torch.zeros(B, c.linear_num_value_heads, c.linear_key_head_dim,
                                            c.linear_value_head_dim)
        layer(x, cache)
    weights = sum(p.numel() * p.element_size() for p in layer.parameters())
    state = B * (c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4 * 2
                 + c.conv_dim * (c.linear_conv_kernel_dim - 1) * BYTES * 2)
    return run, weights + state + 2 * B * c.hidden_size * BYTES


def attention_row(cfg, B, opts, kv_len):
    attn = randomize(Qwen3NextAttention(cfg, layer_idx=3, dtype=DTYPE)).compile(**opts)
    block = 128
    per_seq = -(-(kv_len + 1) // block)
    x = activations(B, cfg.hidden_size, seed=5)
    pos = torch.full((B, 1), kv_len, dtype=torch.int32)

    def run():
        cache = PagedKVCache(cfg, num_blocks=B * per_seq, block_size=block, dtype=DTYPE, layers=[3],
                             max_blocks_per_seq=per_seq).allocate(B)
        lens = torch.full((B,), kv_len, dtype=torch.int32)
        cache.reserve(3, lens)
        cache.advance(3, lens)
        attn(x, pos, cache=cache)
    weights = sum(p.numel() * p.element_size() for p in attn.parameters())
    kv = B * (kv_len + 1) * 2 * cfg.num_key_value_heads * cfg.head_dim * BYTES
    return run, weights + kv + 2 * B * cfg.hidden_size * BYTES


def moe_row(cfg, B, opts):
    moe = randomize(Qwen3NextSparseMoeBlock(cfg, dtype=DTYPE)).compile(**opts)
    x = activations(B, cfg.hidden_size, seed=6)
    _, _, experts = route(x.reshape(B, -1), moe.gate.weight.data, cfg.num_experts_per_tok, cfg.norm_topk_prob)
    touched = int(torch.unique(experts).numel())
    per_expert = 3 * cfg.moe_intermediate_size * cfg.hidden_size * BYTES
    shared = 3 * cfg.shared_expert_intermediate_size * cfg.hidden_size * BYTES + cfg.hidden_size * BYTES
    router = cfg.num_experts * cfg.hidden_size * BYTES
    return (lambda: moe(x)), touched * per_expert + shared + router + 2 * B * cfg.hidden_size * BYTES, touched


def head_row(cfg, B, opts):
    head = randomize(nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=DTYPE)).compile(**opts)
    x = activations(B, cfg.hidden_size, seed=7).reshape(B, cfg.hidden_size)      # [B * T, H] as the model calls it
    return (lambda: head(x)), (cfg.vocab_size + B) * cfg.hidden_size * BYTES + B * cfg.vocab_size * BYTES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--experts", type=int, default=512, help="routed experts (512 in Qwen3-Next-80B-A3B)")
    ap.add_argument("--top-k", type=int, default=10, help="experts per token (10 in Qwen3-Next-80B-A3B)")
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--skip", default="", help="comma-separated rows to leave out: " + ", ".join(LAYERS))
    args = ap.parse_args(argv)
    cfg = Qwen3NextConfig(num_experts=args.experts, num_experts_per_tok=args.top_k)
    machine = pypto.load_machine(args.machine)
    hbm = machine.memory["hbm_bytes_per_s"]
    opts = dict(backend="sim", machine=args.machine, timing_only=True)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    rows = {"embedding": lambda B: embedding_row(cfg, B, opts) + ("",),
            "norm": lambda B: norm_row(cfg, B, opts) + ("",),
            "GDN": lambda B: gdn_row(cfg, B, opts) + ("",),
            "attention": lambda B: attention_row(cfg, B, opts, args.kv_len) + ("",),
            "MoE": lambda B: moe_row(cfg, B, opts),
            "LM head": lambda B: head_row(cfg, B, opts) + ("",)}
    t_start = time.process_time()

    for B in (int(b) for b in args.batches.split(",")):
        table = Table(title=f"Qwen3-Next decode, B = {B}, {args.machine} timing-only sim, bf16 "
                            f"(KV cache {args.kv_len} tokens, {args.experts} experts top-{cfg.num_experts_per_tok})")
        for col in ("program", "simulated us", "HBM bound us", "fraction", "x in model", "model us", "tasks",
                    "CPU s", "note"):
            table.add_column(col, justify="left" if col in ("program", "note") else "right")
        total = bound_total = 0.0
        complete = True
        errors = []
        for name, build in rows.items():
            if name in skip or (name == "LM head" and "head" in skip):
                table.add_row(name, "skipped", "", "", str(LAYERS[name]), "", "", "", "")
                complete = False
                continue
            try:
                run, nbytes, extra = build(B)
                us, tasks, cpu = simulated(run)
            except Exception as e:          # a program that does not run says so in its row and below
                table.add_row(name, "failed", "", "", str(LAYERS[name]), "", "", "", f"{type(e).__name__} (below)")
                errors.append(f"{name}: {type(e).__name__}: {e}")
                complete = False
                continue
            finally:
                run = None                  # the MoE's 512 experts are 3 GB: free them before the next row
                gc.collect()
            bound = nbytes / hbm * 1e6
            n = LAYERS[name]
            total += n * us
            bound_total += n * bound
            note = f"{extra} experts touched" if name == "MoE" else ""
            table.add_row(name, f"{us:,.1f}", f"{bound:,.1f}" if bound >= 10 else f"{bound:.2f}", f"{bound / us:.2f}", str(n), f"{n * us:,.0f}",
                          f"{tasks:,}", f"{cpu:.1f}", note)
        if total:
            label = "model (composed)" if complete else "model (rows that ran)"
            table.add_row(label, f"{total:,.0f}", f"{bound_total:,.0f}", f"{bound_total / total:.2f}", "", "", "",
                          "", f"{B / total * 1e6:,.1f} tokens/s (HBM bound {B / bound_total * 1e6:,.1f})")
        console.print(table)
        for e in errors:
            console.print(e, markup=False)
    console.print(f"model rows: the per-program runs above x their counts (48 layers: {LAYERS['GDN']} GDN, "
                  f"{LAYERS['attention']} attention, {LAYERS['MoE']} MoE; {LAYERS['norm']} norms), not a run of the "
                  f"whole model. Benchmark CPU {time.process_time() - t_start:.0f} s", markup=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

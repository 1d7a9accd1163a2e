"""Qwen3-Next decode benchmark: one decode step of each kind of layer at the default (80B-A3B) dims on the
timing-only simulated a2a3, per layer microseconds, and the 48-layer model's tokens/s built from them.

    python benchmarks/bench_qwen3_next.py [--batches 1,32] [--kv-len 4096] [--experts 512] [--top-k 10]
                                          [--machine a2a3] [--skip MoE,...]

Layers (bf16, hidden 2048), each one decode token per sequence for B sequences:
  GDN        Qwen3NextGatedDeltaNet with a filled GDNCache (conv + recurrent rule, 32 value heads of 128 x 128)
  attention  Qwen3NextAttention with a PagedKVCache holding --kv-len tokens per sequence (16 heads, 2 kv heads,
             head_dim 256; pages of 128 tokens)
  MoE        Qwen3NextSparseMoeBlock: router over --experts experts, top-10, moe_intermediate 512, shared expert
  LM head    the final norm + lm_head (vocab 151936)
The model: 36 GDN + 12 attention + 48 MoE layers + the LM head (norms and residual adds are inside the layers'
own programs or left out: under 1% of the bytes). tokens/s = B / (the sum of the layers' simulated time).

The HBM bound of a layer is the bytes a decode step must move / the machine's HBM bandwidth: its weights (MoE:
the router, the shared expert and the distinct experts the step's tokens were routed to, counted from the
router's choice on these inputs) + its state read and written (GDN: the fp32 recurrent state and the conv
window; attention: the K and V of the cache read, the new token's written). The model's bound is their sum.
Timing-only simulation: the data are random, the routing is what the router gives on them.
"""
from __future__ import annotations

import argparse
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
from models.qwen3_next.model import Qwen3NextRMSNorm  # noqa: E402
from models.qwen3_next.moe import Qwen3NextSparseMoeBlock  # noqa: E402
from models.qwen3_next.moe_reference import route  # noqa: E402

DTYPE = torch.bfloat16
BYTES = 2
LAYERS = {"GDN": 36, "attention": 12, "MoE": 48, "LM head": 1}
console = Console(width=120)


def randomize(module, std=0.02, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _, p in module.named_parameters():
        p.data.normal_(0.0, std, generator=gen)          # in place: 512 experts are 3 GB in bf16
    return module


def simulated_us(run) -> tuple[float, float]:
    """(simulated us summed over the runs one call makes, CPU s); the call is made twice, the second timed."""
    run()
    times = []
    from pypto.runtime.report import on_report
    unsubscribe = on_report(lambda r: times.append(r.time_us if r is not None else None))
    t0 = time.process_time()
    run()
    cpu = time.process_time() - t0
    unsubscribe()
    return sum(t for t in times if t is not None), cpu


def gdn_row(cfg, B, opts):
    c = cfg.gdn_config()
    layer = randomize(Qwen3NextGatedDeltaNet(c, dtype=DTYPE)).compile(**opts)
    from models.qwen3_next.reference import GDNCache
    x = torch.randn(B, 1, c.hidden_size).to(DTYPE)

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
    x = torch.randn(B, 1, cfg.hidden_size).to(DTYPE)
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
    x = torch.randn(B, 1, cfg.hidden_size).to(DTYPE)
    _, _, experts = route(x.reshape(B, -1), moe.gate.weight.data, cfg.num_experts_per_tok, cfg.norm_topk_prob)
    touched = int(torch.unique(experts).numel())
    per_expert = 3 * cfg.moe_intermediate_size * cfg.hidden_size * BYTES
    shared = 3 * cfg.shared_expert_intermediate_size * cfg.hidden_size * BYTES + cfg.hidden_size * BYTES
    router = cfg.num_experts * cfg.hidden_size * BYTES
    return (lambda: moe(x)), touched * per_expert + shared + router + 2 * B * cfg.hidden_size * BYTES, touched


class _Head(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = Qwen3NextRMSNorm(cfg.hidden_size, dtype=DTYPE)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=DTYPE)

    def forward(self, hidden_states):
        return self.lm_head(self.norm(hidden_states))


def head_row(cfg, B, opts):
    head = randomize(_Head(cfg)).compile(**opts)
    x = torch.randn(B, 1, cfg.hidden_size).to(DTYPE)
    return (lambda: head(x)), cfg.vocab_size * cfg.hidden_size * BYTES + B * cfg.vocab_size * BYTES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--experts", type=int, default=512, help="routed experts (512 in Qwen3-Next-80B-A3B)")
    ap.add_argument("--top-k", type=int, default=10, help="experts per token (10 in Qwen3-Next-80B-A3B)")
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--skip", default="", help="comma-separated rows to leave out: GDN, attention, MoE, head")
    args = ap.parse_args(argv)
    cfg = Qwen3NextConfig(num_experts=args.experts, num_experts_per_tok=args.top_k)
    machine = pypto.load_machine(args.machine)
    hbm = machine.memory["hbm_bytes_per_s"]
    opts = dict(backend="sim", machine=args.machine, timing_only=True)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    for B in (int(b) for b in args.batches.split(",")):
        table = Table(title=f"Qwen3-Next decode, B = {B}, {args.machine} timing-only sim, bf16 "
                            f"(KV cache {args.kv_len} tokens, {args.experts} experts top-{cfg.num_experts_per_tok})")
        for col in ("layer", "simulated us", "HBM bound us", "fraction", "x in model", "model us", "sim CPU s", "note"):
            table.add_column(col, justify="left" if col in ("layer", "note") else "right")
        total = bound_total = 0.0
        complete = True
        errors = []
        for name, build in (("GDN", lambda: gdn_row(cfg, B, opts) + ("",)),
                            ("attention", lambda: attention_row(cfg, B, opts, args.kv_len) + ("",)),
                            ("MoE", lambda: moe_row(cfg, B, opts)),
                            ("LM head", lambda: head_row(cfg, B, opts) + ("",))):
            if name in skip or (name == "LM head" and "head" in skip):
                table.add_row(name, "skipped", "", "", str(LAYERS[name]), "", "", "")
                complete = False
                continue
            try:
                run, nbytes, extra = build()
                us, cpu = simulated_us(run)
            except Exception as e:          # a layer that does not run yet says so in its row and below
                table.add_row(name, "failed", "", "", str(LAYERS[name]), "", "", f"{type(e).__name__} (below)")
                errors.append(f"{name}: {type(e).__name__}: {e}")
                complete = False
                continue
            bound = nbytes / hbm * 1e6
            n = LAYERS[name]
            total += n * us
            bound_total += n * bound
            note = f"{extra} experts touched" if name == "MoE" else ""
            table.add_row(name, f"{us:,.1f}", f"{bound:,.1f}", f"{bound / us:.2f}", str(n), f"{n * us:,.0f}",
                          f"{cpu:.1f}", note)
        if total:
            label = "model" if complete else "model (rows that ran)"
            table.add_row(label, f"{total:,.0f}", f"{bound_total:,.0f}", f"{bound_total / total:.2f}", "", "", "",
                          f"{B / total * 1e6:,.1f} tokens/s (HBM bound {B / bound_total * 1e6:,.1f})")
        console.print(table)
        for e in errors:
            console.print(e, markup=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

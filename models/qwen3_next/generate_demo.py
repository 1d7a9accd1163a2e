"""Demo: a tiny random-weight Qwen3-Next causal LM generates tokens with pypto, verified token for token.

    python -m models.qwen3_next.generate_demo [--backend sim] [--new-tokens 8] [--prompt-len 6] [--batch 1]

Builds ``Qwen3NextForCausalLM`` from a random HuggingFace-format state dict (``Qwen3NextConfig.tiny()``: 3 Gated
DeltaNet layers and 1 gated-attention layer, sparse MoE with 8 experts top-2), generates greedily on pypto's
default backend (or --backend): one prefill, then one decode step per token through the GDN caches and the paged
KV cache. The same prompt goes through the plain-torch model (``model_reference.generate_ref``) and, when
transformers is installed, its ``Qwen3NextForCausalLM.generate`` with the same weights; the tokens must agree.
Prints the tokens, the runs' simulated time summed over the generation and the last run's report.
"""
from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

import pypto
from pypto.runtime.report import on_report

from .config import Qwen3NextConfig
from .model import Qwen3NextForCausalLM
from .model_reference import generate_ref, random_hf_weights


def transformers_tokens(config, weights, ids, new_tokens):
    """transformers' greedy tokens with the same weights, or None when transformers is not installed."""
    try:
        import transformers
    except ImportError:
        return None
    hf = transformers.Qwen3NextForCausalLM(config.to_hf()).eval()
    hf.load_state_dict(weights)
    with torch.no_grad():
        return hf.generate(ids, max_new_tokens=new_tokens, do_sample=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=None, help="reference, sim or cpu (default: pypto's default backend)")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=6)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    console = Console()
    backend = args.backend or pypto.get_backend()
    cfg = Qwen3NextConfig.tiny()
    weights = random_hf_weights(cfg, seed=args.seed)
    model = Qwen3NextForCausalLM(cfg)
    model.load_state_dict(weights)
    model.compile(backend=backend)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(
        args.seed + 1))
    console.print(f"[bold]Qwen3-Next causal LM[/bold] (tiny, random weights) on backend [cyan]{backend}[/cyan]: "
                  f"{cfg.num_hidden_layers} layers {cfg.layer_types}, hidden {cfg.hidden_size}, {cfg.num_experts} "
                  f"experts top-{cfg.num_experts_per_tok}, vocab {cfg.vocab_size}")

    runs = []
    unsubscribe = on_report(lambda r: runs.append(r))
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=args.new_tokens)
    wall = time.perf_counter() - t0
    unsubscribe()

    expected = {"plain torch": generate_ref(ids, weights, cfg, args.new_tokens)}
    hf = transformers_tokens(cfg, weights, ids, args.new_tokens)
    if hf is not None:
        expected["transformers"] = hf
    table = Table(title=f"greedy tokens (prompt of {args.prompt_len}, {args.new_tokens} new)")
    table.add_column("who")
    table.add_column("new tokens")
    table.add_column("same as pypto", justify="right")
    table.add_row("pypto " + backend, " / ".join(str(r.tolist()) for r in out[:, args.prompt_len:]), "")
    ok = True
    for who, tokens in expected.items():
        same = torch.equal(out, tokens)
        ok &= same
        table.add_row(who, " / ".join(str(r.tolist()) for r in tokens[:, args.prompt_len:]),
                      "[green]yes[/green]" if same else "[red]NO[/red]")
    console.print(table)
    simulated = [r.time_us for r in runs if r is not None and r.time_us is not None]
    summary = f"{len(runs)} program runs in {wall:.1f} s wall"
    if simulated:
        summary += f"; simulated time summed over them {sum(simulated):,.1f} us"
    console.print(summary)
    report = pypto.last_report()
    if report is not None:
        console.print("last run (the LM head of the last step):")
        console.print(report.table())
    if "transformers" not in expected:
        console.print("transformers is not installed: checked against the plain-torch model only")
    console.print("[green]verified[/green]" if ok else "[red]MISMATCH[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

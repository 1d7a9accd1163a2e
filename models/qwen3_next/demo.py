"""Demo: one Qwen3-Next Gated DeltaNet layer in pypto, verified against plain torch.

    python -m models.qwen3_next.demo [--backend sim] [--dtype bf16] [--seq-len 200] [--decode-steps 2]

Builds the layer from a random HuggingFace-format state dict, runs a prefill (chunked kernel) and
decode steps (recurrent kernel) with a cache on pypto's default backend (or --backend), runs the
same through ``reference.gated_deltanet_layer_ref``, and prints the errors, the compile/run times and
the backend's report (simulated time and roofline fraction on ``sim``).
"""
from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

import pypto
from pypto.runtime.progress import progress

from .layer import Qwen3NextGatedDeltaNet
from .reference import GDNCache, Qwen3NextGDNConfig, gated_deltanet_layer_ref, make_random_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}


def rel_err(actual, expected) -> float:
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=None, help="reference, sim or cpu (default: pypto's default backend)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--seq-len", type=int, default=100)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--decode-steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    console = Console()
    backend = args.backend or pypto.get_backend()
    dtype = DTYPES[args.dtype]
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=dtype, seed=args.seed)
    layer = Qwen3NextGatedDeltaNet.from_hf(cfg, weights).compile(backend=backend)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.seq_len + args.decode_steps, cfg.hidden_size, generator=gen).to(dtype)
    console.print(f"[bold]Qwen3-Next Gated DeltaNet layer[/bold] on backend [cyan]{backend}[/cyan]: hidden "
                  f"{cfg.hidden_size}, {cfg.linear_num_key_heads} key / {cfg.linear_num_value_heads} value heads, "
                  f"head dims {cfg.linear_key_head_dim}, {args.dtype}, batch {args.batch}")

    table = Table(title="pypto vs torch (relative RMS error)")
    for col in ("step", "tokens", "kernel", "output error", "state error", "tolerance", "wall s", "ok"):
        table.add_column(col, justify="right" if col not in ("step", "kernel") else "left")
    cache, cache_ref = GDNCache(), GDNCache()
    steps = [("prefill", slice(0, args.seq_len))] + [
        (f"decode {i + 1}", slice(args.seq_len + i, args.seq_len + i + 1)) for i in range(args.decode_steps)]
    all_ok = True
    with progress(total=len(steps), desc="GDN layer (compile + run)", unit="step") as bar:
        for name, s in steps:
            bar.set_postfix_str(name)
            t0 = time.perf_counter()
            y = layer(x[:, s], cache)
            wall = time.perf_counter() - t0
            bar.update(1)
            y_ref = gated_deltanet_layer_ref(x[:, s], weights, cfg, cache=cache_ref)
            err, state_err = rel_err(y, y_ref), rel_err(cache.recurrent_state, cache_ref.recurrent_state)
            ok = err <= TOL[dtype] and state_err <= TOL[dtype]
            all_ok &= ok
            table.add_row(name, str(s.stop - s.start), "chunked" if name == "prefill" else "recurrent",
                          f"{err:.2e}", f"{state_err:.2e}", f"{TOL[dtype]:.0e}", f"{wall:.2f}",
                          "[green]yes[/green]" if ok else "[red]NO[/red]")
    console.print(table)
    report = pypto.last_report()
    if report is not None:
        console.print(report.table() if hasattr(report, "table") else report)
    console.print("[green]verified[/green]" if all_ok else "[red]MISMATCH[/red]")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""pypto demo: a small transformer MLP block written with pypto.nn, traced, printed, compiled and run on
the default backend, and compared with the same block in torch.nn.

    python examples/demo.py [--backend sim|cpu|reference] [--hidden 128] [--lengths 1 7 64]

The block is RMSNorm -> gated SiLU MLP (gate/up/down Linear) -> residual. Torch's weights are loaded
into the pypto module through its state dict; the module is compiled once per dtype, and that one
compilation serves every sequence length (the batch and sequence dims are dynamic).
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn as tnn
from rich.console import Console
from rich.table import Table

import pypto
import pypto.nn as nn
import pypto.nn.functional as F

# allowed max |error|, relative to max(max |reference|, 1), per dtype (a couple of roundings of the output dtype)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


class MLPBlock(pypto.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TorchMLPBlock(tnn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.norm = tnn.RMSNorm(hidden, eps=1e-6)
        self.gate = tnn.Linear(hidden, intermediate, bias=False)
        self.up = tnn.Linear(hidden, intermediate, bias=False)
        self.down = tnn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(tnn.functional.silu(self.gate(h)) * self.up(h))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None, help=f"default: {pypto.get_backend()}")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1, 7, 64])
    args = ap.parse_args(argv)
    backend = args.backend or pypto.get_backend()
    console = Console(soft_wrap=True)
    torch.manual_seed(0)

    ref = TorchMLPBlock(args.hidden, 2 * args.hidden).eval()
    model = MLPBlock(args.hidden, 2 * args.hidden).compile(backend=backend)

    table = Table(title=f"pypto ({backend}) vs torch eager")
    for col in ("dtype", "input shape", "max |err|", "max |ref|", "allowed", "ok"):
        table.add_column(col, justify="right" if col not in ("dtype", "ok") else "left", no_wrap=True)
    failures, compiles = 0, []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        model.to(dtype).load_state_dict(ref.state_dict())
        twin = TorchMLPBlock(args.hidden, 2 * args.hidden).to(dtype).eval()
        twin.load_state_dict(ref.state_dict())
        traces_before = model.compiled.trace_count
        for t in args.lengths:
            x = torch.randn(args.batch, t, args.hidden).to(dtype)
            try:
                y = model(x)
            except pypto.PyptoError as e:
                console.print(f"[red]{backend} could not run the block ({dtype}, T={t}):[/] {e}")
                return 1
            with torch.no_grad():
                expected = twin(x)
            err = (y.float() - expected.float()).abs().max().item()
            scale = expected.float().abs().max().item()
            ok = err <= TOLERANCE[dtype] * max(scale, 1.0)
            failures += not ok
            table.add_row(str(dtype).removeprefix("torch."), str(list(x.shape)), f"{err:.3e}", f"{scale:.3f}",
                          f"{TOLERANCE[dtype] * max(scale, 1.0):.1e}",
                          "[green]yes[/]" if ok else "[red]NO[/]")
        compiles.append(f"{str(dtype).removeprefix('torch.')}: {model.compiled.trace_count - traces_before}")
        table.add_section()

    console.rule(f"[bold]{type(model).__name__}[/]: the traced TensorGraph (bfloat16)")
    print(model.trace(torch.randn(args.batch, args.lengths[0], args.hidden).bfloat16()))   # cached: no retrace
    console.print(table)
    console.print(f"compilations per dtype ({', '.join(compiles)}) served sequence lengths {args.lengths}")

    report = pypto.last_report()
    if report is not None:
        console.rule("simulator report (last run)")
        print(report)
    if failures:
        console.print(f"[red]{failures} result(s) outside tolerance[/]")
        return 1
    console.print("[green]all results match torch[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

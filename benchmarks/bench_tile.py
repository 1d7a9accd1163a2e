"""Tile-level kernels against the same computation written at the Tensor level, on the simulated machine
(timing only): flash attention (seq 4096, head dim 128, fp16; causal and not), layer norm, matmul + bias
+ gelu. For attention the table gives the fraction of the cube roofline: useful FLOPs (4 * D * S^2 per
head, half of it plus the diagonal when causal) over (simulated cycles x cube cores x FLOP/cycle). The
Tile rows compare with the faster of the two Tensor-level forms that compiles.

    python benchmarks/bench_tile.py                   # a2a3; attention with 1 head and with 8 heads
    python benchmarks/bench_tile.py --heads 16 --json bench_results/tile.json --png bench_results/tile.png
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import torch                                   # noqa: E402
from rich.console import Console               # noqa: E402
from rich.table import Table                   # noqa: E402
from tqdm import tqdm                          # noqa: E402

import pypto                                   # noqa: E402
import pypto.nn.functional as F                # noqa: E402
import pypto.tile as pt                        # noqa: E402
from pypto.machine import load_machine         # noqa: E402
from pypto.runtime import plots                # noqa: E402


def _example(name):
    spec = importlib.util.spec_from_file_location(f"tile_example_{name}", os.path.join(ROOT, "examples", "tile",
                                                                                      f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def attention_flops(heads, seq, d, causal):
    return 4 * d * heads * (seq * (seq + 1) / 2 if causal else seq * seq)


def tile_attention(machine, heads, seq, d, causal, partials, BM=64, BN=256):
    """[BM, BN] = [64, 256] tiles: 64 query rows (32 per vector core) against 256 keys per step, the best
    of the shapes tried on a2a3 (with one head, 64 query tiles also balance the 24 clusters better)."""
    fa = pt.kernel(_example("flash_attention").flash_attention.fn, backend="sim", machine=machine, timing_only=True)
    q, k, v = (torch.empty(heads, seq, d, dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    return fa[(pt.cdiv(seq, BM), heads)](q, k, v, o, BM=BM, BN=BN, causal=causal, partials=partials)


def tensor_attention(machine, heads, seq, d, causal):
    shape = [heads, seq, d] if heads > 1 else [seq, d]

    @pypto.jit(backend="sim", machine=machine, timing_only=True)
    def attn(q: pypto.Tensor[shape, pypto.float16], k: pypto.Tensor[shape, pypto.float16],
             v: pypto.Tensor[shape, pypto.float16]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    attn(*(torch.empty(*shape, dtype=torch.float16) for _ in range(3)))
    return attn.report()


def tensor_attention_explicit(machine, heads, seq, d, causal):
    """The same attention as explicit ops: scores (+ an additive -inf mask for causal), softmax, @ v."""
    shape = [heads, seq, d] if heads > 1 else [seq, d]
    scale = 1.0 / math.sqrt(d)

    @pypto.jit(backend="sim", machine=machine, timing_only=True)
    def attn(q: pypto.Tensor[shape, pypto.float16], k: pypto.Tensor[shape, pypto.float16],
             v: pypto.Tensor[shape, pypto.float16], mask: pypto.Tensor[[seq, seq], pypto.float32]):
        s = pypto.matmul(q, k, out_dtype=pypto.float32, b_trans=True) * scale
        if causal:
            s = s + mask
        return pypto.matmul(pypto.cast(F.softmax(s, -1), pypto.float16), v)
    attn(*(torch.empty(*shape, dtype=torch.float16) for _ in range(3)), torch.empty(seq, seq))
    return attn.report()


def tile_layer_norm(machine, rows, n, BR=16):
    ln = pt.kernel(_example("layer_norm").layer_norm.fn, backend="sim", machine=machine, timing_only=True)
    x = torch.empty(rows, n, dtype=torch.float16)
    w, b = torch.empty(n, dtype=torch.float16), torch.empty(n, dtype=torch.float16)
    return ln[(pt.cdiv(rows, BR),)](x, w, b, torch.empty_like(x), BR=BR)


def tensor_layer_norm(machine, rows, n):
    @pypto.jit(backend="sim", machine=machine, timing_only=True)
    def ln(x: pypto.Tensor[[rows, n], pypto.float16], w: pypto.Tensor[[n], pypto.float16],
           b: pypto.Tensor[[n], pypto.float16]):
        return F.layer_norm(x, (n,), w, b, 1e-5)
    ln(torch.empty(rows, n, dtype=torch.float16), torch.empty(n, dtype=torch.float16),
       torch.empty(n, dtype=torch.float16))
    return ln.report()


def tile_matmul_gelu(machine, m, k, n, BM=128, BN=256, BK=64):
    mg = pt.kernel(_example("matmul_gelu").matmul_bias_gelu.fn, backend="sim", machine=machine, timing_only=True)
    a, b = torch.empty(m, k, dtype=torch.float16), torch.empty(k, n, dtype=torch.float16)
    bias, c = torch.empty(n, dtype=torch.float16), torch.empty(m, n, dtype=torch.float16)
    return mg[(pt.cdiv(m, BM), pt.cdiv(n, BN))](a, b, bias, c, BM=BM, BN=BN, BK=BK)


def tensor_matmul_gelu(machine, m, k, n):
    @pypto.jit(backend="sim", machine=machine, timing_only=True)
    def mg(a: pypto.Tensor[[m, k], pypto.float16], b: pypto.Tensor[[k, n], pypto.float16],
           bias: pypto.Tensor[[n], pypto.float16]):
        return F.gelu(pypto.matmul(a, b) + bias)
    mg(torch.empty(m, k, dtype=torch.float16), torch.empty(k, n, dtype=torch.float16),
       torch.empty(n, dtype=torch.float16))
    return mg.report()


def _run(fn, *args):
    t0 = time.perf_counter()
    try:
        rep = fn(*args)
        return rep, time.perf_counter() - t0, None
    except Exception as e:                     # a level that cannot compile the case: report why
        return None, time.perf_counter() - t0, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8, help="attention is also run with this many heads (batch*heads)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None, help="save a roofline chart of the rows here (needs pypto[plot])")
    args = ap.parse_args()
    spec = load_machine(args.machine)
    peak = spec.num_aic * spec.cube_flops_per_cycle("float16")
    S, D = args.seq, args.dim

    cases = []
    for heads in sorted({1, args.heads}):
        for causal in (True, False):
            case = f"attention {'causal' if causal else 'full'} x{heads} head{'s' if heads > 1 else ''}"
            cases.append((case, "Tensor (F.scaled_dot_product_attention)", heads, causal,
                          tensor_attention, (args.machine, heads, S, D, causal)))
            cases.append((case, "Tensor (explicit matmul, mask, softmax, matmul)", heads, causal,
                          tensor_attention_explicit, (args.machine, heads, S, D, causal)))
            cases.append((case, "Tile (fp32 handoffs)", heads, causal,
                          tile_attention, (args.machine, heads, S, D, causal, pt.float32)))
            cases.append((case, "Tile (fp16 P@V partials)", heads, causal,
                          tile_attention, (args.machine, heads, S, D, causal, pt.float16)))
    cases += [("layer norm [8192, 4096]", "Tensor (F.layer_norm)", 0, None, tensor_layer_norm,
               (args.machine, 8192, 4096)),
              ("layer norm [8192, 4096]", "Tile (BR=2)", 0, None, tile_layer_norm, (args.machine, 8192, 4096, 2)),
              ("matmul+bias+gelu 2048^3", "Tensor (gelu(a @ b + bias))", 0, None, tensor_matmul_gelu,
               (args.machine, 2048, 2048, 2048)),
              ("matmul+bias+gelu 2048^3", "Tile ([128, 256] tiles, K step 64)", 0, None, tile_matmul_gelu,
               (args.machine, 2048, 2048, 2048))]

    rows, base, points = [], {}, []
    for case, level, heads, causal, fn, fargs in tqdm(cases, desc="simulating", unit="case"):
        rep, wall, err = _run(fn, *fargs)
        points.append(plots.point_from_report(f"{case}, {level}", rep) if rep is not None else None)
        row = {"case": case, "level": level, "error": err, "wall_s": wall}
        if rep is not None:
            row |= {"us": rep.time_us, "cycles": rep.cycles, "gm_mb": rep.gm_bytes / 1e6,
                    "hbm_mb": (rep.gm_bytes - rep.l2_hit_bytes) / 1e6, "bound_by": rep.bound_by,
                    "report_fraction": rep.roofline_fraction}
            if heads:
                row["cube_fraction"] = attention_flops(heads, S, D, causal) / (rep.cycles * peak)
            if level.startswith("Tensor"):
                base[case] = min(base.get(case, rep.time_us), rep.time_us)      # the faster Tensor form
            elif case in base:
                row["speedup"] = base[case] / rep.time_us
        rows.append(row)

    t = Table(title=f"pypto.tile vs Tensor level on simulated {args.machine} (timing only; seq {S}, head dim {D}, "
                    "fp16)")
    for col in ("case", "level", "simulated us", "cube roofline", "vs Tensor", "GM MB", "HBM MB", "bound by",
                "wall s"):
        t.add_column(col, justify="left" if col in ("case", "level") else "right")
    for r in rows:
        if r["error"]:
            t.add_row(r["case"], r["level"], f"[red]{r['error']}[/red]", "", "", "", "", "", f"{r['wall_s']:.1f}")
            continue
        t.add_row(r["case"], r["level"], f"{r['us']:,.1f}",
                  f"{r['cube_fraction']:.1%}" if "cube_fraction" in r else "-",
                  f"{r['speedup']:.2f}x" if "speedup" in r else "-", f"{r['gm_mb']:,.0f}", f"{r['hbm_mb']:,.0f}",
                  r["bound_by"], f"{r['wall_s']:.1f}")
    Console(width=200).print(t)
    if args.png:
        plots.roofline_chart(points, spec, args.png, title=f"bench_tile: Tile vs Tensor level on simulated "
                                                          f"{args.machine} (timing only)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": args.machine, "seq": S, "dim": D, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()

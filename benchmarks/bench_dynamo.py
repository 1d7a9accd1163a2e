"""torch.compile(backend="pypto") on a small transformer layer (LayerNorm, causal attention, RMSNorm,
SwiGLU): compile time and run time against eager, per pypto backend.

compile  = the first call (dynamo capture, AOT autograd, partitioning, probes, conversion, lowering and
           the first run), "of which pypto" = the part spent in pypto's backend (pypto.dynamo.timings).
run      = median wall time of --repeat later calls (same shapes), and its ratio to eager.
sim time = the simulated NPU time of one call (the sum over pypto partitions, sim backend only).
pypto ops / eager ops: ATen nodes run through pypto partitions / left in eager (no rule, or the
lowering cannot compile them yet). err = max |pypto - eager| over the output.

    python benchmarks/bench_dynamo.py                         # every backend that exists here
    python benchmarks/bench_dynamo.py --backends reference sim --seq 16 64 --dtype bf16
    python benchmarks/bench_dynamo.py --json bench_results/dynamo.json

--hf: the tiny random-weight transformers models instead (Llama, Qwen3, Mistral, BERT, T5, GPT-2;
tests/dynamo/hf_models.py; skipped with the reason when transformers is missing), dynamic=True, batch 2:
per model and backend the captured fraction (ATen ops inside pypto partitions that compiled and ran,
over every ATen op of the graphs pypto received, SymInt arithmetic and getitem not counted), run-time
fallbacks, first-call CPU seconds (process time of this process plus its children, i.e. g++ on cpu;
PYPTO_CACHE_DIR set to a fresh folder makes the cpu backend build from scratch), warm call vs eager.

    python benchmarks/bench_dynamo.py --hf --backends sim cpu --models llama gpt2
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "dynamo"))

import torch                                          # noqa: E402
from rich.console import Console                      # noqa: E402
from rich.table import Table                          # noqa: E402

import pypto.dynamo as pd                             # noqa: E402
from dynamo_cases import backend_unavailable          # noqa: E402
from dynamo_models import TransformerLayer            # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def _median_s(fn, x, repeat):
    times = []
    for _ in range(repeat):
        times.append(_timed(fn, x)[1])
    return statistics.median(times)


def _ops_in(partition) -> int:
    return sum(1 for n in partition.eager.graph.nodes if n.op == "call_function")


def measure(backend, model, xs, repeat, dynamic, eager_out, eager_s) -> dict:
    torch._dynamo.reset()
    pd.reset()
    compiled = torch.compile(copy.deepcopy(model), backend="pypto", dynamic=dynamic,
                             options={"backend": backend})
    row = {"backend": backend}
    with torch.no_grad():
        out, row["compile_s"] = _timed(compiled, xs[0])
        pypto_compile = pd.timings["compile"]
        for x in xs[1:]:                          # the other lengths: a recompile unless dynamic
            compiled(x)
        row["pypto_compile_s"] = pd.timings["compile"]
        row["first_pypto_compile_s"] = pypto_compile
        row["run_ms"] = 1e3 * _median_s(compiled, xs[0], repeat)
    row["vs_eager"] = row["run_ms"] / (1e3 * eager_s)
    row["err"] = (out.float() - eager_out.float()).abs().max().item()
    row["graphs"] = pd.counters["graphs"]
    live = [p for p in pd.partitions if p.compiled is not None]
    row["partitions"] = len(live)
    row["pypto_ops"] = sum(_ops_in(p) for p in live)
    row["eager_ops"] = pd.counters["eager_ops"]
    row["fallbacks"] = pd.counters["fallbacks"] + pd.counters["run_fallbacks"]
    reports = [p.last_report for p in live if p.last_report is not None and p.last_report.time_us is not None]
    row["sim_us"] = sum(r.time_us for r in reports) if reports else None
    row["failures"] = [why for _, why in pd.failures]
    return row


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the cpu backend's g++)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _counted(n) -> bool:
    import operator
    return n.op == "call_function" and n.target is not operator.getitem and not isinstance(
        n.meta.get("val"), torch.SymInt)


def measure_hf(name, backend, seqs, batch, repeat) -> dict:
    """One tiny transformers model through torch.compile(backend='pypto', dynamic=True)."""
    import hf_models
    torch._dynamo.reset()
    pd.reset()
    model = hf_models.build(name)
    totals = []
    real = pd.partition_and_compile

    def counting(gm, gname, opts):
        totals.append(sum(1 for n in gm.graph.nodes if _counted(n)))
        return real(gm, gname, opts)
    pd.partition_and_compile = counting
    try:
        compiled = torch.compile(model, backend="pypto", dynamic=True, options={"backend": backend})
        row = {"model": name, "backend": backend}
        errs = []
        with torch.no_grad():
            start = _cpu_s()
            for k, t in enumerate(seqs):
                inp = hf_models.inputs(name, batch, t)
                got = hf_models.main_output(compiled(**inp))
                if k == 0:
                    row["first_call_cpu_s"] = _cpu_s() - start
                errs.append((got.float() - hf_models.main_output(model(**inp)).float()).abs().max().item())
            inp = hf_models.inputs(name, batch, seqs[0])
            row["eager_ms"] = 1e3 * _median_s(lambda i: model(**i), inp, repeat)
            row["run_ms"] = 1e3 * _median_s(lambda i: compiled(**i), inp, repeat)
    finally:
        pd.partition_and_compile = real
    live = [p for p in pd.partitions if p.compiled is not None]
    row["total_ops"] = sum(totals)
    row["captured_ops"] = sum(sum(1 for n in p.eager.graph.nodes if _counted(n)) for p in live)
    row["captured"] = row["captured_ops"] / max(row["total_ops"], 1)
    row["graphs"] = pd.counters["graphs"]
    row["partitions"] = len(live)
    row["fallbacks"] = pd.counters["fallbacks"]
    row["run_fallbacks"] = pd.counters["run_fallbacks"]
    row["err"] = max(errs)
    row["failures"] = [why for _, why in pd.failures]
    return row


def main_hf(args):
    import hf_models
    why = hf_models.unavailable()
    console = Console(width=max(Console().width, 150))
    if why:
        console.print(f"[dim]skipped: {why}[/dim]")
        return
    rows = []
    for name in args.models:
        for b in args.backends:
            why = backend_unavailable(b)
            if why:
                console.print(f"[dim]skipped {b}: {why}[/dim]")
                continue
            rows.append(measure_hf(name, b, args.seq, args.batch, args.repeat))
            r = rows[-1]
            print(f"{name} {b}: captured {r['captured']:.1%} ({r['captured_ops']}/{r['total_ops']}), "
                  f"first call {r['first_call_cpu_s']:.1f} CPU s, graphs {r['graphs']}, "
                  f"fallbacks {r['fallbacks']}+{r['run_fallbacks']} at run time", flush=True)
    t = Table(title=f"torch.compile(backend='pypto', dynamic=True) on tiny transformers models, batch "
                    f"{args.batch}, lengths {args.seq}")
    for col in ("model", "backend", "captured", "ops (pypto/all)", "graphs", "partitions", "fallbacks",
                "run-time fallbacks", "first call (CPU s)", "warm (ms)", "vs eager", "max err"):
        t.add_column(col, justify="left" if col in ("model", "backend") else "right")
    for r in rows:
        t.add_row(r["model"], r["backend"], f"{r['captured']:.1%}", f"{r['captured_ops']}/{r['total_ops']}",
                  str(r["graphs"]), str(r["partitions"]), str(r["fallbacks"]), str(r["run_fallbacks"]),
                  f"{r['first_call_cpu_s']:.1f}", f"{r['run_ms']:.2f}", f"{r['run_ms'] / r['eager_ms']:.2f}",
                  f"{r['err']:.1e}")
    console.print(t)
    for r in rows:
        for why in dict.fromkeys(r["failures"]):
            console.print(f"[yellow]{r['model']} {r['backend']}: ran in eager: {why}[/yellow]")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "args": vars(args)}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", action="store_true", help="the tiny transformers models (see above)")
    ap.add_argument("--models", nargs="+", default=["llama", "qwen3", "mistral", "bert", "t5", "gpt2"])
    ap.add_argument("--backends", nargs="+", default=["reference", "sim", "cpu"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, nargs="+", default=[32, 48], help="sequence lengths (the first is timed)")
    ap.add_argument("--d", type=int, default=64, help="model width")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--static", action="store_true", help="dynamic=False (one compile per length)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: stable timings on a "
                    "shared machine)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("pypto.dynamo").setLevel(logging.ERROR)
    if args.hf:
        if args.seq == [32, 48]:
            args.seq = [7, 33, 64]
        return main_hf(args)

    torch.manual_seed(0)
    dt = DTYPES[args.dtype]
    model = TransformerLayer(args.d, args.heads, args.hidden).eval().to(dt)
    xs = [torch.randn(args.batch, t, args.d, dtype=dt) for t in args.seq]
    with torch.no_grad():
        eager_out = model(xs[0])
        eager_s = _median_s(model, xs[0], args.repeat)

    rows, skipped = [], []
    for b in args.backends:
        why = backend_unavailable(b)
        if why:
            skipped.append(f"{b}: {why}")
            continue
        rows.append(measure(b, model, xs, args.repeat, not args.static, eager_out, eager_s))

    console = Console(width=max(Console().width, 150))
    title = (f"torch.compile(backend='pypto'): transformer layer d={args.d} heads={args.heads} "
             f"hidden={args.hidden}, x [{args.batch}, {args.seq[0]}, {args.d}] {args.dtype}, "
             f"{'static' if args.static else 'dynamic'} shapes, lengths {args.seq}")
    t = Table(title=title)
    for col in ("backend", "compile (s)", "of which pypto (s)", "run (ms)", "vs eager", "partitions",
                "pypto ops", "eager ops", "fallbacks", "sim time (us)", "max err"):
        t.add_column(col, justify="left" if col == "backend" else "right")
    t.add_row("eager", "-", "-", f"{1e3 * eager_s:.3f}", "1.00", "-", "-", "-", "-", "-", "-")
    for r in rows:
        t.add_row(r["backend"], f"{r['compile_s']:.2f}", f"{r['first_pypto_compile_s']:.2f}", f"{r['run_ms']:.3f}",
                  f"{r['vs_eager']:.2f}", str(r["partitions"]), str(r["pypto_ops"]), str(r["eager_ops"]),
                  str(r["fallbacks"]), "-" if r["sim_us"] is None else f"{r['sim_us']:.2f}", f"{r['err']:.2e}")
    console.print(t)
    for r in rows:
        for why in dict.fromkeys(r["failures"]):
            console.print(f"[yellow]{r['backend']}: ran in eager: {why}[/yellow]")
    for s in skipped:
        console.print(f"[dim]skipped {s}[/dim]")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"eager_ms": 1e3 * eager_s, "rows": rows, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()

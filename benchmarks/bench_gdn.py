"""Gated DeltaNet (Qwen3-Next) benchmark: the pypto kernels against the machine's roofline and torch.

    python benchmarks/bench_gdn.py [--quick] [--skip sim,cpu,compile,layer,decode] [--tensor-lengths 1024]
                                   [--png gdn.png] [--layer-lengths 1024,4096] [--layer-tensor-lengths 1024]
                                   [--decode-batches 1,32,256]

(a) chunk_gated_delta_rule, timing-only simulation of the a2a3 machine at B=1, T=8192 and 32768,
    H=16, HV=32, K=V=128, bf16: simulated time vs the roofline bound, for the Professional-mode
    kernel (impl="pro"), the phased kernels of prefill_kernels.py (chunk-parallel preparation, then the state
    recurrence over V column blocks; also at 16 sequences x 4096 varlen, one state per sequence in the
    bytes) and the Tensor-level kernels (impl="tensor", at T=1024 only: slow to simulate), where
        FLOPs = T * HV * (10 * C * K + 6 * K * V)        (C = chunk size; the algorithm's useful work)
        bytes = q, k, v, g, beta read + o written + final state written (once each)
        bound = max(FLOPs / cube peak (bf16), bytes / HBM bandwidth)
(b) the cpu backend (generated C++; pro and tensor impls) vs torch eager running the same chunked algorithm
    (reference.chunk_gated_delta_rule_ref) on this CPU at B=1, T=4096, H=4, HV=8, K=V=128, fp32.
(c) compile time of the full-size layer (trace + lowering), prefill and decode.
(d) the whole Qwen3NextGatedDeltaNet layer (projections + conv + core + norm + out_proj), default
    (Qwen3-Next-80B-A3B) config, B=1, bf16, timing-only sim on a2a3: the prefill core as the pl kernel
    node (impl None, what the layer runs on sim and cpu) at T=4096 (and 1024), and with the Tensor-level
    kernels (impl="tensor", the layer before kernels could be graph nodes) at T=1024 only (slow to
    simulate), against the layer's roofline:
        FLOPs = 2 T hidden (conv_dim + value_dim + 2 HV) + 2 T value_dim hidden + the core's FLOPs (a)
        bytes = the projection weights, x read and y written (bf16) + the final state written (fp32)

(e) decode: one step of B sequences (B = 1, 32, 256), default config, bf16, timing-only sim on a2a3: the fused
    decode kernel (decode_kernel.py: conv update, gates, l2norm, recurrent rule; each sequence's state a slot of
    a pool, shuffled slots) alone and the whole layer's decode step (layer(x, cache, state_indices)), against
    the HBM bound of reading and writing the recurrent state once:
        bound = 2 * B * HV * K * V * 4 bytes / HBM bandwidth (machine file)
    (the layer also reads its projection weights, about 67 MB in bf16: its own bound is the last column).

A part whose backend or option is not available yet says so in its table instead of a figure.
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
from models.qwen3_next import Qwen3NextGatedDeltaNet, Qwen3NextGDNConfig  # noqa: E402
from models.qwen3_next import GDNCache, decode_kernel, prefill_kernels, pro_kernels  # noqa: E402
from models.qwen3_next.functional import chunk_gated_delta_rule, kernel_function  # noqa: E402
from models.qwen3_next.reference import chunk_gated_delta_rule_ref  # noqa: E402
from pypto.runtime import plots  # noqa: E402

console = Console(width=120)


def gdn_inputs(B, T, H, HV, K, V, dtype, random=True):
    make = torch.randn if random else (lambda *s: torch.zeros(*s))
    q, k = make(B, T, H, K).to(dtype), make(B, T, H, K).to(dtype)
    v = make(B, T, HV, V).to(dtype)
    g = torch.nn.functional.logsigmoid(make(B, T, HV) + 2.0)
    beta = torch.sigmoid(make(B, T, HV))
    return q, k, v, g, beta


def roofline(T, H, HV, K, V, C, machine, act_bytes=2, sequences=1):
    flops = T * HV * (10 * C * K + 6 * K * V)
    nbytes = (2 * T * H * K + 2 * T * HV * V) * act_bytes + 2 * T * HV * 4 + sequences * HV * K * V * 4
    t_flops = flops / machine.peak_cube_flops("bfloat16")
    t_bytes = nbytes / machine.memory["hbm_bytes_per_s"]
    return flops, nbytes, max(t_flops, t_bytes) * 1e6, "cube" if t_flops >= t_bytes else "hbm"


def why(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) < 160 else text[:157] + "..."


# ----------------------------------------------------------------------------------------------
def bench_sim(lengths, C=64, tensor_lengths=(1024,), png=None):
    """Both implementations of chunk_gated_delta_rule: the Professional-mode kernel (impl="pro",
    pro_kernels.py: bf16 in/out, fp16 matmul operands, fp32 accumulation and state) at every T of
    ``lengths``, and the Tensor-level kernels (impl="tensor", fp32 or bf16 matmul operands) at the
    shorter ``tensor_lengths`` only: their simulation takes over ten minutes at T = 8192. png: where to
    save a roofline chart of the runs (the FLOPs and bytes above over the simulated time)."""
    machine = pypto.load_machine("a2a3")
    table = Table(title="(a) chunk_gated_delta_rule, timing-only sim on a2a3 (B=1, H=16, HV=32, K=V=128, bf16 in/out)")
    for col in ("impl", "T", "matmul operands", "GFLOP", "min MB", "roofline us", "bound by", "simulated us",
                "fraction", "sim wall s"):
        table.add_column(col, justify="right")
    options = {"timing_only": True, "machine": "a2a3"}
    runs = [("pro", T, None) for T in sorted(set(lengths) | set(tensor_lengths))] + \
        [("tensor", T, cube) for T in tensor_lengths for cube in (None, pypto.bfloat16)]
    failures, points = {}, []
    for impl, T, cube_dtype in runs:
        flops, nbytes, bound_us, by = roofline(T, 16, 32, 128, 128, C, machine)
        q, k, v, g, beta = gdn_inputs(1, T, 16, 32, 128, 128, torch.bfloat16, random=False)
        operands = "fp16" if impl == "pro" else ("fp32" if cube_dtype is None else "bf16")
        row = [impl, str(T), operands, f"{flops / 1e9:.1f}", f"{nbytes / 1e6:.0f}", f"{bound_us:.1f}", by]
        if impl not in failures:
            try:
                t0 = time.perf_counter()
                chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True,
                                       chunk_size=C, backend="sim", cube_dtype=cube_dtype, jit_options=options,
                                       impl=impl)
                wall = time.perf_counter() - t0
                report = (pro_kernels.kernel("sim", **options) if impl == "pro"
                          else kernel_function("chunk", "sim", **options)).last_report
                sim_us = report.time_us
                row += [f"{sim_us:.1f}", f"{bound_us / sim_us:.4f}", f"{wall:.1f}"]
                points.append(plots.RooflinePoint(f"{impl} T={T}, {operands} operands", flops, nbytes, sim_us * 1e-6))
            except Exception as e:  # noqa: BLE001 - the table says why
                failures[impl] = why(e)
        if impl in failures:
            row += ["unavailable", "-", "-"]
        table.add_row(*row)
    for T, N in [(T, 1) for T in lengths] + [(4096, 16)]:
        table.add_row(*_phases_row(T, N, C, machine, options))
    console.print(table)
    if png and points:
        plots.roofline_chart(points, machine, png, title="bench_gdn: chunk_gated_delta_rule on simulated a2a3 "
                                                         "(timing only; the algorithm's FLOPs and bytes)")
    if tensor_lengths and max(tensor_lengths) < max(lengths):
        console.print(f"[yellow]the tensor impl is simulated at T = {', '.join(map(str, tensor_lengths))} only "
                      f"(T = 8192 takes over ten minutes); compare fractions, not times[/yellow]")
    for impl, text in failures.items():
        console.print(f"[yellow]{impl}: sim timing-only run not available:[/yellow] {text}")


def _phases_row(T, N, C, machine, options):
    """The phased kernels (prefill_kernels.py: chunk-parallel preparation, then the state recurrence over V
    column blocks), N sequences of T tokens each (varlen, cu_seqlens, when N > 1): simulated time = the sum
    of every launch (two per sequence, launched one after another by the host)."""
    flops, nbytes, bound_us, by = roofline(N * T, 16, 32, 128, 128, C, machine, sequences=N)
    name = "phases" if N == 1 else f"phases {N}x{T} varlen"
    row = [name, str(N * T), "fp16", f"{flops / 1e9:.1f}", f"{nbytes / 1e6:.0f}", f"{bound_us:.1f}", by]
    try:
        q, k, v, g, beta = gdn_inputs(1, N * T, 16, 32, 128, 128, torch.bfloat16, random=False)
        state, o = torch.zeros(N, 32, 128, 128), torch.zeros_like(v)
        seqs = None if N == 1 else [(n, n * T, T) for n in range(N)]
        t0 = time.perf_counter()
        reports = prefill_kernels.chunk_gated_delta_rule_phases(
            q, k, v, g, beta, scale=128 ** -0.5, state=state, o=o, sequences=seqs, use_qk_l2norm=True,
            chunk_size=C, backend="sim", jit_options=options)
        wall = time.perf_counter() - t0
        sim_us = sum(r.time_us for pair in reports for r in pair)
        prep_us = sum(p.time_us for p, _ in reports)
        row += [f"{sim_us:.1f} (prep {prep_us:.1f})", f"{bound_us / sim_us:.4f}", f"{wall:.1f}"]
    except Exception as e:  # noqa: BLE001 - the table says why
        row += ["unavailable", "-", why(e)]
    return row


# ----------------------------------------------------------------------------------------------
def bench_cpu(T=4096, H=4, HV=8, K=128, V=128, repeats=3):
    table = Table(title=f"(b) cpu backend vs torch eager, chunked algorithm (B=1, T={T}, H={H}, HV={HV}, "
                        f"K=V={K}, fp32)")
    for col in ("implementation", "best s", "ratio to torch eager", "max rel err vs torch"):
        table.add_column(col, justify="right" if col != "implementation" else "left")
    q, k, v, g, beta = gdn_inputs(1, T, H, HV, K, V, torch.float32)
    args = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)

    def best(f):
        times = []
        out = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = f()
            times.append(time.perf_counter() - t0)
        return min(times), out

    t_ref, (o_ref, S_ref) = best(lambda: chunk_gated_delta_rule_ref(q, k, v, g, beta, **args))
    table.add_row("torch eager (reference.chunk_gated_delta_rule_ref)", f"{t_ref:.3f}", "1.00", "-")
    for backend, impl, name in (("cpu", "pro", "pypto cpu backend, pro kernel"),
                                ("cpu", "tensor", "pypto cpu backend, Tensor-level kernels"),
                                ("reference", "tensor", "pypto reference interpreter (info)")):
        try:
            run = lambda: chunk_gated_delta_rule(q, k, v, g, beta, backend=backend, impl=impl, **args)  # noqa: E731
            run()                                                                      # compile (cached after)
            t, (o, S) = best(run)
            err = max(_rel(o, o_ref), _rel(S, S_ref))
            table.add_row(name, f"{t:.3f}", f"{t / t_ref:.2f}", f"{err:.1e}")
        except Exception as e:  # noqa: BLE001
            table.add_row(name, "unavailable", "-", why(e))
    console.print(table)


def _rel(a, b):
    b = b.double()
    return ((a.double() - b).norm() / b.norm()).item()


# ----------------------------------------------------------------------------------------------
def bench_compile():
    table = Table(title="(c) compile time of the full-size layer (hidden 2048, 16/32 heads, dims 128, bf16)")
    for col in ("mode", "trace s", "lower s", "total s", "graph nodes"):
        table.add_column(col, justify="right" if col != "mode" else "left")
    cfg = Qwen3NextGDNConfig()
    try:
        from pypto.passes.pipeline import lower
    except ImportError as e:
        lower, lower_missing = None, why(e)
    for mode, T in (("prefill", 128), ("decode", 1)):
        # traced on the interpreter (tracing only); lowered separately below
        layer = Qwen3NextGatedDeltaNet(cfg, dtype=torch.bfloat16, per_head=mode == "decode").compile(
            backend="reference")
        x = torch.randn(1, T, cfg.hidden_size, dtype=torch.bfloat16)
        args = (x,) if mode == "prefill" else (x, torch.zeros(1, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1,
                                                              dtype=torch.bfloat16),
                                                torch.zeros(cfg.linear_num_value_heads * cfg.linear_key_head_dim,
                                                            cfg.linear_value_head_dim), True)
        t0 = time.perf_counter()
        graph = layer.trace(*args)
        t_trace = time.perf_counter() - t0
        nodes = _count_nodes(graph)
        if lower is None:
            table.add_row(mode, f"{t_trace:.3f}", "unavailable", "-", str(nodes))
            continue
        try:
            t0 = time.perf_counter()
            lower(graph, machine="a2a3")
            t_lower = time.perf_counter() - t0
            table.add_row(mode, f"{t_trace:.3f}", f"{t_lower:.3f}", f"{t_trace + t_lower:.3f}", str(nodes))
        except Exception as e:  # noqa: BLE001
            table.add_row(mode, f"{t_trace:.3f}", "failed", "-", str(nodes))
            lower_missing = why(e)
    console.print(table)
    if lower is None or "lower_missing" in locals():
        console.print(f"[yellow]lowering not available for the layer yet:[/yellow] {locals().get('lower_missing')}")


def layer_roofline(T, cfg, C, machine):
    hid, HV = cfg.hidden_size, cfg.linear_num_value_heads
    K, V = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    proj = 2 * T * hid * (cfg.conv_dim + cfg.value_dim + 2 * HV) + 2 * T * cfg.value_dim * hid
    flops = proj + T * HV * (10 * C * K + 6 * K * V)
    weights = 2 * hid * (cfg.conv_dim + cfg.value_dim + 2 * HV) + 2 * cfg.value_dim * hid
    nbytes = weights + 2 * 2 * T * hid + HV * K * V * 4
    t_flops = flops / machine.peak_cube_flops("bfloat16")
    t_bytes = nbytes / machine.memory["hbm_bytes_per_s"]
    return flops, nbytes, max(t_flops, t_bytes) * 1e6, "cube" if t_flops >= t_bytes else "hbm"


def bench_layer(lengths=(1024, 4096), tensor_lengths=(1024,), C=64):
    machine = pypto.load_machine("a2a3")
    cfg = Qwen3NextGDNConfig()
    table = Table(title="(d) the whole GDN layer, prefill, timing-only sim on a2a3 (default config, B=1, bf16)")
    for col in ("prefill core", "T", "GFLOP", "min MB", "roofline us", "bound by", "simulated us", "fraction",
                "sim cpu s"):
        table.add_column(col, justify="right" if col != "prefill core" else "left")
    runs = [(None, T) for T in lengths] + [("tensor", T) for T in tensor_lengths]
    for impl, T in runs:
        flops, nbytes, bound_us, by = layer_roofline(T, cfg, C, machine)
        row = [str(T), f"{flops / 1e9:.1f}", f"{nbytes / 1e6:.0f}", f"{bound_us:.1f}", by]
        name = "Tensor-level kernels (impl='tensor')"
        try:
            layer = Qwen3NextGatedDeltaNet(cfg, dtype=torch.bfloat16, chunk_size=C, impl=impl).compile(
                backend="sim", machine="a2a3", timing_only=True)
            t0 = time.process_time()
            layer(torch.zeros(1, T, cfg.hidden_size, dtype=torch.bfloat16))
            cpu_s = time.process_time() - t0
            if impl is None:
                how, why_not = layer.core_impl
                name = "pl kernel node (default)" if how == "pro" else f"Tensor-level (fallback: {why_not})"
            sim_us = pypto.last_report().time_us
            row += [f"{sim_us:.1f}", f"{bound_us / sim_us:.4f}", f"{cpu_s:.1f}"]
        except Exception as e:  # noqa: BLE001 - the table says why
            row += ["unavailable", "-", why(e)]
        table.add_row(name, *row)
    console.print(table)


def bench_decode(batches=(1, 32, 256)):
    machine = pypto.load_machine("a2a3")
    cfg = Qwen3NextGDNConfig()
    H, HV = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    K, V, W, D = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim, cfg.conv_dim
    hbm = machine.memory["hbm_bytes_per_s"]
    weights = 2 * cfg.hidden_size * (D + cfg.value_dim + 2 * HV) + 2 * cfg.value_dim * cfg.hidden_size
    table = Table(title="(e) decode step, default config, bf16, timing-only sim on a2a3 (state slots shuffled)")
    for col in ("B", "state MB r+w", "state bound us", "kernel us", "kernel fraction", "layer us",
                "layer / state bound", "layer bound us", "layer fraction", "sim cpu s"):
        table.add_column(col, justify="right")
    options = {"timing_only": True, "machine": "a2a3"}
    layer = Qwen3NextGatedDeltaNet(cfg, dtype=torch.bfloat16).compile(backend="sim", **options)
    for B in batches:
        state_bytes = 2 * B * HV * K * V * 4
        bound = state_bytes / hbm * 1e6
        layer_bound = (state_bytes + weights) / hbm * 1e6
        row = [str(B), f"{state_bytes / 1e6:.1f}", f"{bound:.1f}"]
        idx = torch.randperm(B, generator=torch.Generator().manual_seed(0)).to(torch.int32)
        conv = torch.zeros(B, D, W - 1, dtype=torch.bfloat16)
        state = torch.zeros(B, HV, K, V)
        t0 = time.process_time()
        try:
            z = torch.zeros
            decode_kernel.fused_recurrent_decode(z(B, D, dtype=torch.bfloat16), z(B, HV, dtype=torch.bfloat16),
                                                 z(B, HV, dtype=torch.bfloat16), z(D, W, dtype=torch.bfloat16),
                                                 z(HV), z(HV), conv, state, idx, num_key_heads=H, backend="sim",
                                                 jit_options=options)
            k_us = pypto.last_report().time_us
            row += [f"{k_us:.1f}", f"{bound / k_us:.3f}"]
        except Exception as e:  # noqa: BLE001 - the table says why
            row += ["unavailable", why(e)]
        try:
            layer(torch.zeros(B, 1, cfg.hidden_size, dtype=torch.bfloat16), GDNCache(conv, state), state_indices=idx)
            l_us = pypto.last_report().time_us
            how = "" if layer.core_impl[0] == "pro" else f" (fallback: {layer.core_impl[1]})"
            row += [f"{l_us:.1f}{how}", f"{bound / l_us:.3f}", f"{layer_bound:.1f}", f"{layer_bound / l_us:.3f}"]
        except Exception as e:  # noqa: BLE001
            row += ["unavailable", why(e), "-", "-"]
        row.append(f"{time.process_time() - t0:.1f}")
        table.add_row(*row)
    console.print(table)


def _count_nodes(graph) -> int:
    n = 0
    for nid in graph.nodes():
        n += 1
        body = graph.node(nid)["attrs"].get("body") if graph.node(nid)["op"] == "loop" else None
        if body is not None:
            n += _count_nodes(body)
    return n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="(a) at T=8192 only, (b) at T=1024")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: sim, cpu, compile, layer, decode")
    p.add_argument("--layer-lengths", default="1024,4096", help="(d): comma-separated T of the layer with its "
                   "default core (the pl kernel node)")
    p.add_argument("--layer-tensor-lengths", default="1024", help="(d): comma-separated T of the layer with the "
                   "Tensor-level core ('' for none)")
    p.add_argument("--tensor-lengths", default="1024",
                   help="(a): comma-separated T at which the Tensor-level kernels are simulated too ('' for none)")
    p.add_argument("--decode-batches", default="1,32,256", help="(e): comma-separated batch sizes of the decode step")
    p.add_argument("--png", default=None, help="(a): save a roofline chart of the runs here (needs pypto[plot])")
    args = p.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if "sim" not in skip:
        tensor_lengths = tuple(int(t) for t in args.tensor_lengths.split(",") if t)
        bench_sim([8192] if args.quick else [8192, 32768], tensor_lengths=tensor_lengths, png=args.png)
    if "cpu" not in skip:
        bench_cpu(T=1024 if args.quick else 4096)
    if "compile" not in skip:
        bench_compile()
    if "layer" not in skip:
        ints = lambda text: tuple(int(t) for t in text.split(",") if t)  # noqa: E731
        bench_layer(ints(args.layer_lengths) if not args.quick else (1024,), ints(args.layer_tensor_lengths))
    if "decode" not in skip:
        bench_decode(tuple(int(t) for t in args.decode_batches.split(",") if t))


if __name__ == "__main__":
    main()

"""Out-params against returned results, on the simulated machine (timing only): the same computation written
CANN's way, ``def f(x, out): out[:] = expr``, and returning ``expr``. The table gives the simulated cycles
and the task count of each form (``pypto.last_report()``); a full-box write into an out-param should cost
what returning does (issue 20 item 2); ``out[:] = expr + out`` is updated in place, and a partial box
(the first half of the rows, computed from the first half of the inputs) is written by its producer.
A second table gives the programs of models/qwen3_next that write their arguments (the Tensor-level GDN
kernels in both layouts, small sizes; causal_conv1d and its decode update) and pypto.loop programs with
carried tensors, for before/after comparisons of the same lowering (``--before``).

    python benchmarks/bench_outparams.py                 # a2a3
    python benchmarks/bench_outparams.py --json bench_results/outparams.json
    python benchmarks/bench_outparams.py --before bench_results/outparams_at_an_earlier_commit.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import torch                                   # noqa: E402
from rich.console import Console               # noqa: E402
from rich.markup import escape                 # noqa: E402
from rich.table import Table                   # noqa: E402

import pypto                                   # noqa: E402
import pypto.nn.functional as F                # noqa: E402


# name, the computation, the same for the first h rows of the result, argument shapes, dtype
CASES = [
    ("add 64x1024 fp32", lambda x, y: x + y, lambda x, y, h: x[:h] + y[:h], [(64, 1024), (64, 1024)],
     torch.float32),
    ("softmax 4096x4096 fp32", lambda x: F.softmax(x, -1), lambda x, h: F.softmax(x[:h], -1), [(4096, 4096)],
     torch.float32),
    ("matmul 256^3 fp16", lambda a, b: pypto.matmul(a, b), lambda a, b, h: pypto.matmul(a[:h], b),
     [(256, 256), (256, 256)], torch.float16),
]


def _programs(machine):
    """(name, run) for programs that write arguments or loop-carried tensors."""
    from models.qwen3_next.functional import (causal_conv1d, causal_conv1d_update, chunk_gated_delta_rule,
                                              fused_recurrent_gated_delta_rule)
    opts = {"timing_only": True, "machine": machine}

    def gdn_inputs(B, T):
        g = torch.Generator().manual_seed(0)
        q, k = (torch.randn(B, T, 2, 64, generator=g).bfloat16() for _ in range(2))
        v = torch.randn(B, T, 4, 64, generator=g).bfloat16()
        return (q, k, v, torch.nn.functional.logsigmoid(torch.randn(B, T, 4, generator=g) + 2.0),
                torch.sigmoid(torch.randn(B, T, 4, generator=g)))

    def chunk(per_head):
        chunk_gated_delta_rule(*gdn_inputs(1, 256), output_final_state=True, use_qk_l2norm_in_kernel=True,
                               chunk_size=64, backend="sim", jit_options=opts, impl="tensor", per_head=per_head)

    def recurrent(per_head):
        fused_recurrent_gated_delta_rule(*gdn_inputs(2, 4), initial_state=torch.zeros(2, 4, 64, 64),
                                         output_final_state=True, use_qk_l2norm_in_kernel=True, backend="sim",
                                         jit_options=opts, per_head=per_head)

    def jit(fn, *args):
        return lambda: pypto.jit(fn, backend="sim", machine=machine, timing_only=True)(*args)

    def row_update(x, y):
        for i in pypto.loop(3):
            y[i] = x[i] + y[i]

    def accumulate(x):
        acc = pypto.zeros(1, 256)
        for i in pypto.loop(64):
            acc[0:1, :] = acc[0:1, :] + x[i:i + 1, :] * 2
        return acc

    def row_blocks(x, out):
        for i in pypto.loop(4):
            rows = x[i * 256:(i + 1) * 256]
            out[i * 256:(i + 1) * 256] = pypto.exp(rows - pypto.amax(rows, -1, keepdim=True))

    w = torch.randn(96, 4)
    return [
        ("GDN chunk T=256, all heads", lambda: chunk(False)),
        ("GDN chunk T=256, per head", lambda: chunk(True)),
        ("GDN recurrent T=4, all heads", lambda: recurrent(False)),
        ("GDN recurrent T=4, per head", lambda: recurrent(True)),
        ("causal_conv1d [2, 64, 96]", lambda: causal_conv1d(torch.randn(2, 64, 96), w, backend="sim")),
        ("causal_conv1d_update [2, 96]", lambda: causal_conv1d_update(torch.randn(2, 96), torch.randn(2, 96, 3), w,
                                                                      backend="sim")),
        ("loop: y[i] = x[i] + y[i]", jit(row_update, torch.randn(3, 8), torch.randn(3, 8))),
        ("loop: acc[0:1] += x[i] * 2", jit(accumulate, torch.randn(64, 256))),
        ("loop: out[rows] = exp(x - max)", jit(row_blocks, torch.randn(1024, 512), torch.empty(1024, 512))),
    ]


def measure_programs(machine: str) -> list:
    rows = []
    for name, run in _programs(machine):
        run()
        r = pypto.last_report()
        rows.append({"case": name, "cycles": r.cycles, "tasks": r.tasks})
    return rows


def _run(fn, args, machine):
    jf = pypto.jit(fn, backend="sim", machine=machine, timing_only=True)
    jf(*args)
    r = pypto.last_report()
    return r.cycles, r.tasks


def _forms(comp, part, n_inputs):
    """The returned form and the out-param forms of ``comp`` over named parameters (pypto.jit binds
    tensors by parameter name)."""
    if n_inputs == 1:
        def returned(x):
            return comp(x)

        def out_param(x, out):
            out[:] = comp(x)

        def reads_out(x, out):
            out[:] = comp(x) + out

        def partial(x, out):
            out[:out.shape[0] // 2] = part(x, out.shape[0] // 2)
    else:
        def returned(x, y):
            return comp(x, y)

        def out_param(x, y, out):
            out[:] = comp(x, y)

        def reads_out(x, y, out):
            out[:] = comp(x, y) + out

        def partial(x, y, out):
            out[:out.shape[0] // 2] = part(x, y, out.shape[0] // 2)
    return returned, {"outparam": out_param, "reads_out": reads_out, "partial": partial}


def measure(machine: str) -> list:
    rows = []
    for name, comp, part, shapes, dtype in CASES:
        args = [torch.empty(*s, dtype=dtype) for s in shapes]
        out = torch.empty(shapes[0][0], shapes[-1][-1], dtype=dtype)
        returned, forms = _forms(comp, part, len(shapes))
        ret_c, ret_t = _run(returned, args, machine)
        row = {"case": name, "return_cycles": ret_c, "return_tasks": ret_t}
        for form, fn in forms.items():
            c, t = _run(fn, args + [out], machine)
            row[f"{form}_cycles"], row[f"{form}_tasks"] = c, t
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="a2a3")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--before", help="the JSON of an earlier run (another commit): its cycles in a column beside")
    a = ap.parse_args(argv)
    rows, programs = measure(a.machine), measure_programs(a.machine)
    before, before_programs = {}, {}
    if a.before:
        with open(a.before) as f:
            old = json.load(f)
        before = {r["case"]: r for r in old["rows"]}
        before_programs = {r["case"]: r for r in old.get("programs", [])}
    forms = [("return", "return"), ("outparam", "out[:] = expr"), ("reads_out", "out[:] = expr + out"),
             ("partial", "out[:h] = expr of [:h]")]
    t = Table(title=f"out[:] = expr vs return expr: simulated cycles (tasks), timing-only sim, machine {a.machine}"
                    + (f"; before = {a.before}" if before else ""))
    t.add_column("case")
    for key, label in forms:
        if before:
            t.add_column(f"{label}, before", justify="right")
        t.add_column(label, justify="right")
        if key == "outparam":
            t.add_column("/ return", justify="right")
    for r in rows:
        cells = [r["case"]]
        for key, _ in forms:
            if before:
                b = before.get(r["case"])
                cells.append(f"{b[f'{key}_cycles']:,.0f} ({b[f'{key}_tasks']})" if b else "-")
            cells.append(f"{r[f'{key}_cycles']:,.0f} ({r[f'{key}_tasks']})")
            if key == "outparam":
                cells.append(f"{r['outparam_cycles'] / r['return_cycles']:.3f}")
        t.add_row(*cells)
    console = Console(width=200)
    console.print(t)
    p = Table(title="programs that write their arguments or loop-carried tensors: simulated cycles (tasks)")
    p.add_column("program")
    if before_programs:
        p.add_column("before", justify="right")
    p.add_column("cycles (tasks)", justify="right")
    if before_programs:
        p.add_column("/ before", justify="right")
    for r in programs:
        b = before_programs.get(r["case"])
        cells = [escape(r["case"])]
        if before_programs:
            cells.append(f"{b['cycles']:,.0f} ({b['tasks']})" if b else "-")
        cells.append(f"{r['cycles']:,.0f} ({r['tasks']})")
        if before_programs:
            cells.append(f"{r['cycles'] / b['cycles']:.3f}" if b else "-")
        p.add_row(*cells)
    console.print(p)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"machine": a.machine, "rows": rows, "programs": programs}, f, indent=1)


if __name__ == "__main__":
    main()

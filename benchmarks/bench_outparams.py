"""Out-params against returned results, on the simulated machine (timing only): the same computation written
CANN's way, ``def f(x, out): out[:] = expr``, and returning ``expr``. The table gives the simulated cycles
and the task count of each form (``pypto.last_report()``); a full-box write into an out-param should cost
what returning does (issue 20 item 2); ``out[:] = expr + out`` is updated in place, and a partial box
(the first half of the rows, computed from the first half of the inputs) is written by its producer.

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
    rows = measure(a.machine)
    before = {}
    if a.before:
        with open(a.before) as f:
            before = {r["case"]: r for r in json.load(f)["rows"]}
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
    Console(width=200).print(t)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"machine": a.machine, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

"""Simulated cycles of every run of the Tile-level and Professional-mode examples (examples/tile, examples/pro),
as each example runs them (default backend, its own sizes; the examples check their results against torch).

    python benchmarks/bench_examples.py                    # a table
    python benchmarks/bench_examples.py --json out.json    # and the figures as JSON, to compare two commits
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import pypto.runtime.report as report  # noqa: E402

FOLDERS = ("examples/pro", "examples/tile")


def example_scripts() -> list[str]:
    return [f"{d}/{f}" for d in FOLDERS for f in sorted(os.listdir(os.path.join(ROOT, d))) if f.endswith(".py")]


def cycles_of(script: str) -> list:
    """Simulated cycles of each run the script makes (None for a run without a timing)."""
    runs: list = []
    argv = sys.argv
    unsubscribe = report.on_report(lambda r: runs.append(None if r is None else r.cycles))
    try:
        sys.argv = [script]
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(os.path.join(ROOT, script), run_name="__main__")
    finally:
        sys.argv = argv
        unsubscribe()
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write {script: [cycles of each run]} to this file")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    table = Table(title="examples: simulated cycles per run")
    table.add_column("example")
    table.add_column("cycles", justify="right")
    figures = {}
    for script in example_scripts():
        figures[script] = cycles_of(script)
        table.add_row(script, ", ".join("-" if c is None else f"{c:,.0f}" for c in figures[script]))
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()

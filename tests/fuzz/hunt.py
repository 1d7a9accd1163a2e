"""Hunt for wrong answers and crashes with many random programs:

    python -m tests.fuzz.hunt --count 5000 --backend sim --seed 100000
    python -m tests.fuzz.hunt --count 300 --backend cpu --batch 40 --minutes 10

Programs are those of seeds seed .. seed+count-1 (``tests.fuzz.programs.generate``; the test suite
runs seeds 0..N). Every failure is shrunk to the shortest run of its steps that fails alike
(tests/fuzz/shrink.py) and printed as it is found with the reproducer text of that program (a
@pypto.jit function to paste; inputs uniform in [-2, 2], weights scaled by 1/sqrt(K)); the end
prints a summary grouped by the first line of each failure. Exit status 1 when anything failed.
Failure kinds: mismatch (a wrong answer), crash (a raw Python error, an internal compiler error, an
error without a location), refused (a clear pypto error at a line of the program, for a program
torch runs), warned (pypto warned, e.g. g++ on a generated kernel).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict

from .programs import generate
from .runner import check
from .shrink import shrink


def _signature(detail: str) -> str:
    """The first line of a failure with numbers and generated names blanked: failures alike group."""
    first = detail.splitlines()[0] if detail else ""
    first = re.sub(r"<random programs [^>]*>", "<program>", first)
    return re.sub(r"\b[xv]\d+\b|\d+(\.\d+)?(e-?\d+)?", "#", first)[:200]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000, help="how many programs (default 1000)")
    ap.add_argument("--seed", type=int, default=1_000_000, help="seed of the first program (default 1000000)")
    ap.add_argument("--backend", default="sim", choices=["sim", "cpu", "reference"])
    ap.add_argument("--batch", type=int, default=None,
                    help="programs per jit function (default 25 on sim, 40 on cpu: a g++ build each)")
    ap.add_argument("--max-steps", type=int, default=8, help="most steps of a program (default 8)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long")
    ap.add_argument("--quiet", action="store_true", help="print the summary only")
    ap.add_argument("--no-shrink", action="store_true",
                    help="print failing programs whole (default: the shortest run of steps that fails alike)")
    args = ap.parse_args(argv)
    batch = args.batch or (40 if args.backend == "cpu" else 25)
    start = time.time()
    failures, done = [], 0
    groups = defaultdict(list)
    for lo in range(args.seed, args.seed + args.count, batch):
        if args.minutes is not None and time.time() - start > args.minutes * 60:
            break
        programs = [generate(s, args.max_steps) for s in range(lo, min(lo + batch, args.seed + args.count))]
        found = check(programs, args.backend)
        done += len(programs)
        for f in found:
            if not args.no_shrink:
                f = shrink(f)
            failures.append(f)
            groups[(f.what, _signature(f.detail))].append(f.program.seed)
            if not args.quiet:
                print(f.report(), flush=True)
        print(f"[{time.time() - start:7.1f}s] {done} programs, {len(failures)} failures", file=sys.stderr, flush=True)
    print(f"\n{done} programs on {args.backend} (seeds {args.seed}..{args.seed + done - 1}) in "
          f"{time.time() - start:.0f}s: {len(failures)} failed")
    for (what, sig), seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(seeds):4d} x {what}: {sig}\n         seeds {seeds[:12]}{' ...' if len(seeds) > 12 else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

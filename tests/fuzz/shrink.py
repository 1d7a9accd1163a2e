"""The shortest run of consecutive steps of a failing program that still fails the same way.

A window ``steps[i:j]`` becomes a program of its own: the values it uses from before ``i`` become
inputs (same shape and dtype, uniform values within the value's bound) and its output is the last
step's. Windows are tried shortest first, so the first one that fails alike is minimal among them.
"""
from __future__ import annotations

import re

from .programs import INPUT_BOUND, Input, Program
from .runner import Failure, check


def window(p: Program, i: int, j: int) -> Program:
    steps = p.steps[i:j]
    made = {s.out for s in steps}
    inputs, seen = [], set()
    for s in steps:
        for a in s.args:
            if a not in made and a not in seen:
                seen.add(a)
                v = p.values[a]
                old = next((inp for inp in p.inputs if inp.name == a), None)
                inputs.append(old or Input(a, v.shape, v.dtype, max(v.bound, 1e-3) / INPUT_BOUND))
    values = {n: p.values[n] for n in seen | made}
    return Program(p.seed, inputs, steps, values, [steps[-1].out])


def _alike(a: Failure, b: Failure) -> bool:
    if a.what != b.what:
        return False
    if a.what == "mismatch":
        return True

    def head(f):
        return re.sub(r"<random programs [^>]*>:\d+", "", f.detail.splitlines()[0] if f.detail else "")
    return head(a) == head(b)


def shrink(failure: Failure, budget: int = 40) -> Failure:
    """The failure of the shortest window of its program that fails alike (the failure itself when
    none does within ``budget`` checks)."""
    p = failure.program
    n = len(p.steps)
    tried = 0
    for length in range(1, n):
        for i in range(0, n - length + 1):
            if tried >= budget:
                return failure
            tried += 1
            found = check([window(p, i, i + length)], failure.backend)
            if found and _alike(found[0], failure):
                return found[0]
    return failure

"""Run random programs on a backend and check them against the torch oracle.

Many programs share one @pypto.jit function (``run_batch``): on the cpu backend a function is one
g++ build, which costs seconds, while a program costs milliseconds to run. A batch is called twice
when it has dynamic dims (the second time at other sizes, from the same trace). A batch whose
compilation fails is split in halves until the failing programs are alone (``check``), so that
every failure names one program and its reproducer text.
"""
from __future__ import annotations

import linecache
import traceback
import warnings
from dataclasses import dataclass

import torch

import pypto

from . import reference
from .programs import Program, source


@dataclass
class Failure:
    program: Program
    backend: str
    what: str               # "mismatch" | "crash" | "refused" (a PyptoError pointing into the program) | "warned"
    detail: str

    def report(self) -> str:
        return (f"--- {self.what} on {self.backend}, {self.program.describe()}\n{self.detail}\n"
                f"reproducer (inputs uniform in [-2, 2], weights / sqrt(K)):\n"
                f"@pypto.jit(backend={self.backend!r})\n{source([self.program])}")


class BatchError(Exception):
    """A batch failed as a whole (tracing, lowering, building or running raised)."""

    def __init__(self, detail: str, what: str = "crash"):
        super().__init__(detail)
        self.detail, self.what = detail, what


_counter = [0]


def jit_function(programs: list, backend: str):
    """The @pypto.jit function of ``programs`` (its source registered with linecache, so that
    errors and tracebacks show the generated lines)."""
    _counter[0] += 1
    filename = f"<random programs {_counter[0]}: seeds {programs[0].seed}..{programs[-1].seed}>"
    text = source(programs, name="programs")
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"pypto": pypto}
    exec(compile(text, filename, "exec", dont_inherit=True), namespace)    # no "annotations" future: real specs
    return pypto.jit(namespace["programs"], backend=backend)


def _runs(programs: list) -> list:
    dynamic = any(not d.static for p in programs for i in p.inputs for d in i.shape)
    return [0, 1] if dynamic else [0]


def run_batch(programs: list, backend: str) -> list:
    """-> [None or a mismatch text] per program; raises BatchError when the batch fails as a whole."""
    f = jit_function(programs, backend)
    problems = [None] * len(programs)
    for run in _runs(programs):
        gen = torch.Generator().manual_seed(1000 * programs[0].seed + run)
        inputs = [reference.make_inputs(p, run, gen) for p in programs]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outs = f(*[t for xs in inputs for t in xs])
            except Exception as e:           # noqa: BLE001  every failure is a finding, whatever its type
                raise BatchError(_error_text(e, run), _kind(e, f)) from None
        for w in caught:                     # a warning of pypto's is a finding too (g++ warned on a kernel...)
            if issubclass(w.category, Warning) and type(w.message).__module__.startswith("pypto"):
                raise BatchError(f"{type(w.message).__module__}.{w.category.__name__}: {w.message}", "warned")
        outs = list(outs)
        for k, (p, xs) in enumerate(zip(programs, inputs)):
            got, outs = outs[:len(p.outputs)], outs[len(p.outputs):]
            if problems[k] is not None:
                continue
            for name, o, want in zip(p.outputs, got, reference.evaluate(p, xs, run)):
                bad = reference.mismatch(o, want, p.values[name].dtype)
                if bad:
                    sizes = "" if run == 0 else " (second run: the dynamic dims' other sizes)"
                    problems[k] = f"output {name}{sizes}: {bad}"
                    break
    if f.trace_count != 1:
        raise BatchError(f"traced {f.trace_count} times for one signature with dynamic dims")
    return problems


def _kind(e: BaseException, f) -> str:
    """"refused": a pypto error located at a line of the generated program (a clear refusal of
    something torch accepts); "crash": anything else (a raw Python error, an error that does not
    say where, an "internal:" compiler error)."""
    loc = getattr(e, "loc", None)
    if isinstance(e, pypto.PyptoError) and loc is not None and loc.file == f.fn.__code__.co_filename \
            and "internal" not in str(e):
        return "refused"
    return "crash"


def _error_text(e: BaseException, run: int) -> str:
    head = f"{type(e).__module__}.{type(e).__name__}: {e}"
    if run:
        head = "(second run, other sizes) " + head
    if isinstance(e, pypto.PyptoError):
        return head
    return head + "\n" + "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])


def check(programs: list, backend: str) -> list:
    """Every failure of ``programs`` on ``backend`` (a failing batch split until each failure is
    one program's)."""
    try:
        problems = run_batch(programs, backend)
    except BatchError as e:
        if len(programs) == 1:
            return [Failure(programs[0], backend, e.what, e.detail)]
        half = len(programs) // 2
        return check(programs[:half], backend) + check(programs[half:], backend)
    return [Failure(p, backend, "mismatch", d) for p, d in zip(programs, problems) if d is not None]

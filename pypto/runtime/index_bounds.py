"""Index bounds of index_select / gather (and so of embedding lookups), checked on the host before a run.

The lowered backends pick rows with a one-hot select (passes/canonicalize.py), which turns an index
outside the dim into a row of zeros where torch raises IndexError. When the indices are an argument
of the compiled function (passed through reshape / transpose / permute / expand, which keep their
values), every backend checks them against the dim before launching, so an index out of range is an
``IndexOutOfRangeError`` at the user's call, never a silent zero row. Indices computed inside
the traced function are counted by the run itself (passes/index_checks.py): ``check_counts`` reads
those counts after the run and raises the same error.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import symbolic as sym
from ..errors import IndexOutOfRangeError, SourceLoc
from ..passes.index_checks import INDEX_OPS, index_source, picked_dim_size


@dataclass(frozen=True)
class IndexCheck:
    input: int                 # position of the graph input holding the indices
    name: str                  # that input's name
    bound: object              # the size of the dim they pick from (an int or a size expression)
    op: str
    loc: SourceLoc | None


def index_checks(g) -> list[IndexCheck]:
    """The index_select / gather nodes of ``g`` whose indices are a graph input."""
    checks = []
    for nid in g.nodes():
        if g.op(nid) not in INDEX_OPS:
            continue
        src = index_source(g, nid)
        if g.op(src) != "input":
            continue
        checks.append(IndexCheck(g.inputs.index(src), g.info(src).name, picked_dim_size(g, nid), g.op(nid),
                                 g.node(nid)["loc"]))
    return checks


def check_indices(checks: list[IndexCheck], inputs: list, env: dict) -> None:
    """Raise IndexOutOfRangeError for the first index argument holding a value outside [0, bound); it
    names the user's line that called the compiled function (the lookup's own line is in the message:
    an earlier call traced it)."""
    for c in checks:
        t = inputs[c.input]
        if t.device.type == "meta" or t.numel() == 0:
            continue
        n = sym.evaluate(c.bound, env)
        bad = (t < 0) | (t >= n)
        if bool(bad.any()):
            pos = tuple(int(i) for i in bad.nonzero()[0])
            where = f" (traced at {c.loc})" if c.loc is not None else ""
            raise IndexOutOfRangeError(f"argument '{c.name}' holds index {int(t[pos])} at {list(pos)}, outside the "
                                       f"dim of size {n} that {c.op}{where} picks from (expected 0 <= index < {n})")


def check_counts(checks: list, outs: dict, env: dict) -> None:
    """Raise IndexOutOfRangeError for the first computed-index check whose count output (``outs[name]``,
    the number of indices outside [0, bound)) is not zero; like ``check_indices`` it names the user's
    line that called the compiled function, and the lookup's traced line in the message."""
    for name, c in checks:
        t = outs[name]
        if t.device.type == "meta":          # a timing-only run computes no values
            continue
        count = int(t.reshape(-1)[0])
        if count:
            n = sym.evaluate(c.bound, env)
            where = f" traced at {c.loc}" if c.loc is not None else ""
            raise IndexOutOfRangeError(f"{c.op}{where} got {count} computed "
                                       f"{'index' if count == 1 else 'indices'} outside the dim of size {n} it "
                                       f"picks from (expected 0 <= index < {n})")

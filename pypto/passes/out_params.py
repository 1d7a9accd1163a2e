"""Where the new value of a written argument is built: an out-param (``def f(x, out): out[...] = expr``), or a
tensor carried through a ``pypto.loop`` (its body's argument, updated in place every iteration).

Such a graph ends with the argument's final value F, to be left in the argument's GM buffer B, where its old
value I lives. Building F straight in B (the producer storing into B, partial writes storing into boxes of
B) costs no copy; it is right when nothing reads an old value of B after a write has replaced it.
``plan_out_params`` decides that from the fusion plan's program order (the host orders the tasks of
different programs that touch overlapping GM boxes in program order: a reader placed before a writer runs
first):

* F's *writes* into B: F's producer (a fused group, a loop carrying the argument, a concat/pad), or for a
  chain of partial writes ``assemble(... assemble(base, s1) ..., sk)`` the base's producer and one write
  per box — by s's producer, or, when that program reads an old value of B itself (``out[1:] =
  out[:-1] * 2``), by a copy placed at the assemble, after it;
* every *old value* (I, then the chain's values before the last) may be read only by programs placed
  before the writes that replace it — or inside the writing program itself, by elementwise ops and
  reductions over exactly the box being written (``out[:] = out * 2 + x``, ``y[i] = y[i] + x[i]``,
  ``out[:] = out - out.amax(-1, keepdim=True)``): each block then reads the old value only where it writes
  the new one. A matmul, a transpose, a broadcast or a shifted view of the old value would race: no.

Otherwise F is built elsewhere and copied into B after every program ("late"). A late value that is
itself an old argument value, or a view of one (``out[:] = out.T``, ``a[:] = b; b[:] = t``), is first
copied aside where it stands in program order ("snapshot"), then into B at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from .exprs import same
from .iterspace import is_one, op_class

VIEW_CLASSES = ("access", "alias")
BUILT_IN_PLACE = ("concat", "pad", "fillpad")      # ops the tiling pass builds in their result's buffer


@dataclass
class OutParam:
    """The decision for one written argument. ``in_place``: F is built in B (``copy_in``: the chain's
    assembles whose source is copied into its box at the assemble); otherwise F is copied into B at the
    end, from a snapshot taken at F's place in program order when ``snapshot``."""
    in_place: bool
    copy_in: set = field(default_factory=set)
    snapshot: bool = False


def chain_of(g, f) -> tuple:
    """(base, [assemble nodes from the first to f]): f's value as partial writes over a base value."""
    chain = []
    v = f
    while g.op(v) == "assemble":
        chain.append(v)
        v = g.node(v)["inputs"][0]
    return v, chain[::-1]


def view_root(g, v):
    """The value v reads its data from: v itself unless v is a view (of a view ...) of it."""
    while op_class(g, v) in VIEW_CLASSES:
        v = g.node(v)["inputs"][0]
    return v


def plan_out_params(g, plan, pos: dict, writer: set, wants: dict, params: list) -> list:
    """One ``OutParam`` per (F, I) of ``params`` (see the module)."""
    args = {i for f, i in params if f != i}
    decisions: list = [None] * len(params)
    extra_reads: dict = {}        # old value -> positions of the snapshots that read it
    for k, (f, i) in enumerate(params):
        if f == i:
            decisions[k] = OutParam(True)
        elif _base_writes(g, pos, writer, chain_of(g, f)[0], i) is None and view_root(g, f) in args:
            decisions[k] = OutParam(False, snapshot=True)
            extra_reads.setdefault(view_root(g, f), []).append(pos[f])
    open_ = [k for k, d in enumerate(decisions) if d is None]
    ends: set = set()             # values copied at the end: their contents must stay until then
    while True:                   # a value found late joins ``ends``, which can make others late: repeat
        claimed, grown = set(), False
        for k in open_:
            f, i = params[k]
            base = chain_of(g, f)[0]
            copy_in = None if base in claimed else _plan_one(g, plan, pos, writer, wants, ends, extra_reads, f, i)
            if copy_in is None:
                decisions[k] = OutParam(False)
                grown |= f not in ends
                ends.add(f)
            else:
                decisions[k] = OutParam(True, copy_in)
                claimed.add(base)
        if not grown:
            return decisions


def _plan_one(g, plan, pos, writer, wants, ends, extra_reads, f, i):
    """None when F cannot be built in I's buffer, else the chain's assembles to copy in."""
    base, chain = chain_of(g, f)
    base_writes = _base_writes(g, pos, writer, base, i)
    if base_writes is None:
        return None
    reads = _Reads(g, plan, pos, wants, ends, extra_reads)
    need, prev = -1, i
    if base != i:
        group = plan.group_of.get(base) if base in writer else None
        need = reads.last(i, _loop_carrying(g, base), group, None)
        if need is None or any(p <= need for p in base_writes):
            return None
        prev = base
    copy_in = set()
    for a in chain:
        s = g.node(a)["inputs"][1]
        box = (tuple(g.node(a)["attrs"]["offsets"]), tuple(g.info(s).shape))
        direct = reads.last(prev, a, plan.group_of.get(s), box) if s in writer else None
        if direct is not None and pos[s] > max(need, direct):
            need = max(need, direct)            # the producer of s stores into the box
        else:
            plain = reads.last(prev, a, None, None)
            if plain is None or pos[a] <= max(need, plain):
                return None
            if s in writer:
                copy_in.add(a)                  # s is built elsewhere, copied in after the readers
            need = max(need, plain)
        prev = a
    return copy_in


def _base_writes(g, pos, writer, base, i):
    """Positions where the base value is written into B (none when the base is I itself), or None when
    the base is not a value the tiling pass builds in a buffer it is given (an input, a view of another
    value, a constant: those are copied)."""
    if base == i:
        return []
    if base in writer:
        return [pos[base]]
    op = g.op(base)
    if op == "loop_result":
        loop = g.node(base)["inputs"][0]
        carried = g.node(loop)["attrs"]["carried"]
        init_pos = carried[g.node(base)["attrs"]["index"]]
        # the loop may read the argument only as this result's initial value (updated in place)
        if [k for k, x in enumerate(g.node(loop)["inputs"]) if x == i] != [init_pos]:
            return None
        return [pos[loop]]
    if op in BUILT_IN_PLACE:
        return [pos[base]] + [pos[s] for s in g.node(base)["inputs"] if s in writer]
    return None


def _loop_carrying(g, base):
    """The loop that takes I as the initial value of ``base`` and updates it in place, else None."""
    if g.op(base) == "loop_result":
        return g.node(base)["inputs"][0]
    return None


class _Reads:
    """Who reads a value, and where in program order."""

    def __init__(self, g, plan, pos, wants, ends, extra_reads):
        self.g, self.plan, self.pos, self.wants, self.ends, self.extra = g, plan, pos, wants, ends, extra_reads

    def last(self, old, consumer, group, box):
        """The position of the last read of ``old`` (-1 when none) but by its in-place ``consumer`` and,
        inside the writing ``group``, elementwise reads of exactly ``box`` (offsets, extents; None: all of
        ``old``); None when ``old`` or a view of it is wanted at the end, or ``group`` reads it otherwise."""
        g = self.g
        readers, views = _readers(g, old)
        if any(v in self.wants or v in self.ends for v in views):
            return None
        last = max(self.extra.get(old, [-1]))
        for r, via in readers:
            if r == consumer and via == old:     # the value it updates in place (not a box of it to copy)
                continue
            if group is not None and self.plan.group_of.get(r) == group:
                if not _reads_box(g, via, old, box) or \
                        not _elementwise_from(g, self.plan.groups[group].nodes, via):
                    return None
                continue
            last = max(last, self.pos[r])
        return last


def _readers(g, v) -> tuple:
    """([(reader, the value it reads: v or a view of v)] for every op that reads v's data, {v and its views})."""
    out, todo, seen = [], [v], {v}
    while todo:
        n = todo.pop()
        for u in dict.fromkeys(g.users(n)):
            if op_class(g, u) in VIEW_CLASSES:
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
            else:
                out.append((u, n))
    return out, seen


def _reads_box(g, via, old, box) -> bool:
    """Whether ``via`` (old, or size-1 reshapes of boxes of old) is exactly the box of old (all of it when
    box is None)."""
    shape = tuple(g.info(old).shape)
    offsets, extents = box if box is not None else ((0,) * len(shape), shape)
    v = via
    while op_class(g, v) == "alias":
        v = g.node(v)["inputs"][0]
    acc, ext = [0] * len(shape), shape
    first = True
    while v != old:
        if g.op(v) != "view" or len(g.node(v)["attrs"]["offsets"]) != len(shape):
            return False
        a = g.node(v)["attrs"]
        acc = [x + o for x, o in zip(acc, a["offsets"])]
        if first:
            ext, first = tuple(a["shape"]), False
        v = g.node(v)["inputs"][0]
    return (len(offsets) == len(shape) and all(same(x, o) for x, o in zip(acc, offsets))
            and all(same(x, e) for x, e in zip(ext, extents)))


def _elementwise_from(g, members, src) -> bool:
    """Within one fused group, every op that depends on src is elementwise, a reduction or a size-1
    reshape, none larger than src along any dim, reading no view of a src-derived value. A group's
    blocks split only the dims no reduction keeps whole, so each block then reads src exactly where it
    writes the result (a value larger than src would be stored by one block while others still read src)."""
    desc = nx.descendants(g.nx, src)
    shape = tuple(g.info(src).shape)
    for m in members:
        if m not in desc:
            continue
        if op_class(g, m) not in ("ew", "reduce", "alias"):
            return False
        ms = tuple(g.info(m).shape)
        if len(ms) > len(shape) and any(not is_one(d) for d in ms[:len(ms) - len(shape)]):
            return False
        if any(not is_one(a) and not same(a, b) for a, b in zip(reversed(ms), reversed(shape))):
            return False
        for x in g.node(m)["inputs"]:
            if x in desc and op_class(g, x) == "access":     # a box, transpose, broadcast of GM data
                return False
    return True

"""Software pipelining of ``pl.range`` loops whose body is split into ``with pl.stage(k):`` blocks.

With ``@pl.jit(pipeline=pl.PipelineConfig(preload=N))`` stage s of iteration i runs at time step
i + s*N, and within a time step the stages run in order 0, 1, ... — so stage 0 of a later iteration
is issued before stage 1 of an earlier one (on a cube + vector kernel: the cube computes Q K_{j+1}^T
while the vectors run the softmax of block j). Here: the stages are found and the rules checked, and
the cursor calls of each stage are numbered as offsets from the iteration's first slot of each tile
group (a stage's ``next()`` is the slot after the ones the earlier stages took, ``current()`` /
``previous(m)`` refer back from there), so a later stage refers to the slot its own iteration's
earlier stage filled. ``pipeline_marks.py`` parses the body once with those offsets as slot
placeholders and hands the marked loop to the shared pass ``pypto.passes.software_pipeline``, which
builds the prologue, the steady state unrolled by P (the period of the groups the stages advance:
every copy's slots static) and the drain, each stage instance guarded where the trip count is known
only at run time. Statements before the first stage (the preamble) run in front of every stage
instance.

Rules (checked): stages are numbered 0..S-1 in order; nothing follows the stages in the body;
a name assigned in one stage is not read by a later one (refer to the tile group again); groups
the stages rewrite are advanced at a stage's top level (not inside a nested loop or `if`). A
buffer an earlier stage writes and a later one reads needs a group deep enough that no newer
iteration takes the slot first (depth > N for one slot per iteration; ``slot_lifetimes.py``):
the synchronisation would stay race-free and the result be wrong.
"""
from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass

from .errors import ParseError
from .pipeline_marks import lower_marked
from .slot_lifetimes import check_slot_lifetimes
from .values import TileGroup

_GROUP_METHODS = ("next", "current", "previous")


@dataclass(frozen=True)
class PipelineConfig:
    """Software-pipeline every loop with ``pl.stage`` blocks: stage s runs ``preload * s`` iterations
    behind stage 0."""
    preload: int = 1

    def __post_init__(self):
        if not isinstance(self.preload, int) or self.preload < 1:
            raise ValueError(f"PipelineConfig(preload=...) takes an int >= 1, found {self.preload!r}")


# --------------------------------------------------------------------------- analysis
def _stage_of(parser, stmt, frame):
    from .control import StageMarker
    if not isinstance(stmt, ast.With) or len(stmt.items) != 1:
        return None
    expr = stmt.items[0].context_expr
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Attribute, ast.Name))):
        return None
    name = expr.func.attr if isinstance(expr.func, ast.Attribute) else expr.func.id
    if name != "stage":
        return None
    marker = parser.ev(expr, frame)
    return marker.index if isinstance(marker, StageMarker) else None


def _group_calls(parser, stmts, frame, nested_ok: set):
    """(group, method, call node) in source order at the top level of ``stmts``; a rewritten group
    used inside a nested compound statement is an error."""
    found = []
    for stmt in stmts:
        compound = isinstance(stmt, (ast.For, ast.If, ast.While, ast.With))
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _GROUP_METHODS \
                    and isinstance(n.func.value, ast.Name):
                try:
                    g = parser.lookup(n.func.value.id, n.func.value, frame)
                except ParseError:
                    continue
                if isinstance(g, TileGroup):
                    found.append((g, n.func.attr, n, compound))
    found.sort(key=lambda x: (x[2].lineno, x[2].col_offset))
    top = [(g, m, n) for g, m, n, compound in found if not compound]
    for g, m, n, compound in found:
        if compound and any(g is t[0] for t in top):
            raise ParseError(f"tile group {g.name} is used at the top of a stage and inside a nested loop or `if`; "
                             "a pipelined stage advances its groups at its top level", frame.span(n))
        if compound:
            nested_ok.add(g.uid)
    return top


def _names(stmts, ctx):
    out = set()
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ctx):
                out.add(n.id)
    return out


def _slot_offsets(stage_calls: list, frame) -> dict:
    """id(call) -> (stage, offset from the iteration's first slot of its group): a stage's ``next()``
    takes the slot after the ones the earlier stages and its own earlier calls took, ``current()`` /
    ``previous(m)`` refer back from there."""
    offsets, base = {}, {}
    for s, calls in enumerate(stage_calls):
        count = {}
        for g, method, n in calls:
            k = count.get(g.uid, 0)
            if method == "next":
                k = count[g.uid] = k + 1
                offsets[id(n)] = (s, base.get(g.uid, 0) + k)
                continue
            back = 0
            if method == "previous":
                arg = n.args[0] if n.args else (n.keywords[0].value if n.keywords else None)
                if arg is not None and not (isinstance(arg, ast.Constant) and isinstance(arg.value, int)):
                    raise ParseError("previous(k) in a pipelined stage needs a literal k", frame.span(arg))
                back = arg.value if arg is not None else 1
            offsets[id(n)] = (s, base.get(g.uid, 0) + k - back)
        for u, k in count.items():
            base[u] = base.get(u, 0) + k
    return offsets


class _Rewrite(ast.NodeTransformer):
    """Group cursor calls of one stage -> take(k) / peek(k), k the offset from the iteration's first slot,
    marked ``_pl_stage_slot``: the parser gives them the loop's slot placeholders (pipeline_marks)."""

    def __init__(self, calls: dict, offsets: dict):
        self.calls = calls          # id(call node) -> (group, method)
        self.offsets = offsets      # id(call node) -> (stage, offset)

    def visit_Call(self, node):
        self.generic_visit(node)
        hit = self.calls.get(node._pl_id) if hasattr(node, "_pl_id") else None
        if hit is None:
            return node
        new = _method(node, "take" if hit[1] == "next" else "peek", self.offsets[node._pl_id][1])
        new._pl_stage_slot = True
        return new


def _method(call, name: str, k: int):
    func = ast.Attribute(value=copy.deepcopy(call.func.value), attr=name, ctx=ast.Load())
    return ast.copy_location(ast.Call(func=ast.copy_location(func, call.func), args=[ast.Constant(k)],
                                      keywords=[]), call)


# --------------------------------------------------------------------------- the loop
def pipelined_loop(parser, node, frame, bounds, var) -> bool:
    body = node.body
    stage_idx = [_stage_of(parser, s, frame) for s in body]
    if all(k is None for k in stage_idx):
        return False
    first = next(i for i, k in enumerate(stage_idx) if k is not None)
    preamble = body[:first]
    stages = []
    for stmt, k in zip(body[first:], stage_idx[first:]):
        if k is None:
            raise ParseError("statements after the first pl.stage block of a pipelined loop must be stages",
                             frame.span(stmt), hint="move them into a stage, or before the first stage")
        if k != len(stages):
            raise ParseError(f"pipeline stages are numbered 0, 1, ... in order; expected stage {len(stages)}, "
                             f"found stage {k}", frame.span(stmt.items[0].context_expr))
        stages.append(stmt.body)
    if len(stages) < 2:
        return False
    stages = [_fold_static_ifs(parser, st, frame) for st in stages]
    for s in preamble:
        if _group_calls(parser, [s], frame, set()):
            raise ParseError("the statements before the first stage are repeated for every stage; they must "
                             "not advance tile groups", frame.span(s))
    for a in range(len(stages)):
        later = set().union(*[_names(stages[b], ast.Load) for b in range(a + 1, len(stages))]) \
            if a + 1 < len(stages) else set()
        leaked = _names(stages[a], ast.Store) & later
        if leaked:
            name = sorted(leaked)[0]
            raise ParseError(f"'{name}' is assigned in stage {a} and read in a later stage; a pipelined later "
                             "stage runs after newer iterations reassigned it", frame.span(node),
                             hint="refer to the tile group again in the later stage (group.current() / "
                                  "group.previous(k))")
    if not isinstance(bounds[2], int):
        raise ParseError("a pipelined loop needs a compile-time step", frame.span(node.iter),
                         hint="pl.range(start, stop, step) with an int step")

    calls, per_stage, stage_calls = {}, [], []        # per group: next() calls per stage
    for stmts in stages:
        adv, found = {}, _group_calls(parser, stmts, frame, set())
        for g, method, n in found:
            n._pl_id = id(n)
            calls[id(n)] = (g, method)
            if method == "next":
                adv[g.uid] = adv.get(g.uid, 0) + 1
        per_stage.append(adv)
        stage_calls.append(found)
    offsets = _slot_offsets(stage_calls, frame)
    groups = {g.uid: g for g, _ in calls.values()}
    total = {u: sum(a.get(u, 0) for a in per_stage) for u in groups}
    period = 1
    for u, g in groups.items():
        period = math.lcm(period, g.depth // math.gcd(total[u] % g.depth, g.depth))
    trip = len(range(*bounds)) if all(isinstance(b, int) for b in bounds) else None
    check_slot_lifetimes(stage_calls, offsets, groups, total, parser.pipeline.preload, trip, frame)

    def rewrite(s: int) -> list:
        return [_Rewrite(calls, offsets).visit(_copy_with_ids(stmt)) for stmt in stages[s]]
    lower_marked(parser, node, frame, bounds, var, preamble, stages, rewrite, groups, total, period,
                 parser.pipeline.preload)
    return True


def _fold_static_ifs(parser, stmts, frame) -> list:
    """`if` statements of a stage whose condition is known at compile time are replaced by the taken
    branch, so the tile-group calls inside them count as the stage's own."""
    out = []
    for st in stmts:
        if isinstance(st, ast.If):
            try:
                cond = parser.ev(st.test, frame)
            except ParseError:
                cond = None
            from .parser import is_runtime
            if cond is not None and not is_runtime(cond):
                out.extend(_fold_static_ifs(parser, st.body if cond else st.orelse, frame))
                continue
        out.append(st)
    return out


def _copy_with_ids(stmt):
    """Deep copy keeping the marks _Rewrite looks for (ast.copy does not copy extra attributes)."""
    marks = {}
    for n in ast.walk(stmt):
        if hasattr(n, "_pl_id"):
            marks[(n.lineno, n.col_offset, n.end_col_offset)] = n._pl_id
    new = copy.deepcopy(stmt)
    for n in ast.walk(new):
        key = (getattr(n, "lineno", None), getattr(n, "col_offset", None), getattr(n, "end_col_offset", None))
        if isinstance(n, ast.Call) and key in marks:
            n._pl_id = marks[key]
    return new

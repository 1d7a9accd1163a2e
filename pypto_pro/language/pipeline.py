"""Software pipelining of ``pl.range`` loops whose body is split into ``with pl.stage(k):`` blocks.

With ``@pl.jit(pipeline=pl.PipelineConfig(preload=N))`` stage s of iteration i runs at time step
i + s*N, and within a time step the stages run in order 0, 1, ... — so stage 0 of a later iteration
is issued before stage 1 of an earlier one (on a cube + vector kernel: the cube computes Q K_{j+1}^T
while the vectors run the softmax of block j). With S stages and D = (S-1)*N the loop becomes

    _n_j = trip count
    prologue   time steps 0 .. D-1, stage s of iteration t - s*N when that exists (static t)
    for _t_j in pl.range(D, _n_j + D, P):      # steady state and drain, unrolled by P
        copy u: time T = _t_j + u; stage s of iteration T - s*N, guarded by `T - s*N < _n_j`
                (the last stage needs no guard); copies after the first guarded by T < _n_j + D

so every trip count (including fewer iterations than stages) is handled. P is the period of the
tile groups the stages advance; in each copy every slot is static. Slots are written relative to
the group's cursor at the loop (``group.take(k)`` where the body said ``next()``, ``group.peek(k)``
for ``current()`` / ``previous(m)``), computed from the iteration a stage instance works on — so a
later stage refers to the slot its own iteration's earlier stage filled, even in the drain where
that earlier stage no longer runs. Statements before the first stage (the preamble) are repeated
in front of every stage instance. The transformed loop is what gets compiled; it is also written,
as readable Python that runs as a kernel by itself, to ``<build dir>/pipeline_generated.py``.

Rules (checked): stages are numbered 0..S-1 in order; nothing follows the stages in the body;
a name assigned in one stage is not read by a later one (refer to the tile group again); groups
the stages rewrite are advanced at a stage's top level (not inside a nested loop or `if`). A
buffer an earlier stage writes and a later one reads needs N+1 slots (a group of depth > N):
otherwise the newer iteration overwrites it first (the synchronisation stays race-free, the
result would be wrong).
"""
from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass

from .errors import ParseError
from .pipeline_marks import lower_marked, lowers_by_marks
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


class _Rewrite(ast.NodeTransformer):
    """Group cursor calls of one stage instance -> take(k) / peek(k) relative to the loop's cursor."""

    def __init__(self, calls: dict, base: dict, frame, stage_slots: bool = False):
        self.calls = calls          # id(call node) -> (group, method)
        self.base = base            # group uid -> cursor offset before this stage instance
        self.frame = frame          # the loop's parser frame (source spans for errors)
        self.stage_slots = stage_slots   # offsets from the iteration's first slot (pipeline_marks)
        self.count = {}

    def visit_Call(self, node):
        new = self._visit_Call(node)
        if self.stage_slots and new is not node:
            new._pl_stage_slot = True
        return new

    def _visit_Call(self, node):
        self.generic_visit(node)
        hit = self.calls.get(node._pl_id) if hasattr(node, "_pl_id") else None
        if hit is None:
            return node
        g, method = hit
        k = self.count.get(g.uid, 0)
        if method == "next":
            k += 1
            self.count[g.uid] = k
            return _method(node, "take", self.base[g.uid] + k)
        back = 0
        if method == "previous":
            arg = node.args[0] if node.args else (node.keywords[0].value if node.keywords else None)
            if arg is not None and not (isinstance(arg, ast.Constant) and isinstance(arg.value, int)):
                raise ParseError("previous(k) in a pipelined stage needs a literal k", self.frame.span(arg))
            back = arg.value if arg is not None else 1
        return _method(node, "peek", self.base[g.uid] + k - back)


def _method(call, name: str, k: int):
    func = ast.Attribute(value=copy.deepcopy(call.func.value), attr=name, ctx=ast.Load())
    return ast.copy_location(ast.Call(func=ast.copy_location(func, call.func), args=[ast.Constant(k)],
                                      keywords=[]), call)


# --------------------------------------------------------------------------- the transform
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

    n_pre = parser.pipeline.preload
    n_stages = len(stages)
    delay = (n_stages - 1) * n_pre
    # per group: next() calls per stage
    nested = set()
    calls, per_stage = {}, []
    for s, stmts in enumerate(stages):
        top = _group_calls(parser, stmts, frame, nested)
        adv = {}
        for g, method, n in top:
            n._pl_id = id(n)
            calls[id(n)] = (g, method)
            if method == "next":
                adv[g.uid] = adv.get(g.uid, 0) + 1
        per_stage.append(adv)
    groups = {g.uid: g for g, _ in calls.values()}
    total = {u: sum(a.get(u, 0) for a in per_stage) for u in groups}
    period = 1
    for u, g in groups.items():
        period = math.lcm(period, g.depth // math.gcd(total[u] % g.depth, g.depth))

    if lowers_by_marks(groups, bounds[2]):
        def rewrite(s: int) -> list:
            base = {u: sum(per_stage[t].get(u, 0) for t in range(s)) for u in groups}
            rewritten = _Rewrite(calls, base, frame, stage_slots=True)
            return [rewritten.visit(_copy_with_ids(stmt)) for stmt in stages[s]]
        lower_marked(parser, node, frame, bounds, var, preamble, stages, rewrite, groups, total, period, n_pre)
        return True

    def stage_instance(s: int, i_res, j_value) -> list:
        base = {u: i_res * total[u] + sum(per_stage[t].get(u, 0) for t in range(s)) for u in groups}
        out = [_assign(node.target.id, j_value, node)] + copy.deepcopy(preamble)
        rewritten = _Rewrite(calls, base, frame)
        for stmt in stages[s]:
            out.append(rewritten.visit(_copy_with_ids(stmt)))
        return out

    it = node.iter
    pl_mod = it.func.value if isinstance(it.func, ast.Attribute) else None
    if pl_mod is None:
        raise ParseError("a pipelined loop is written `for j in pl.range(...)`", frame.span(it))
    start_n, stop_n, step_n = _range_nodes(it)
    tag = node.target.id
    n_name, t_name = f"_n_{tag}", f"_t_{tag}"
    trip = _trip_count(pl_mod, start_n, stop_n, step_n)
    stmts: list = [_assign(n_name, trip, node)]

    def j_at(i_expr):                 # start + i * step
        return _binop(copy.deepcopy(start_n), ast.Add(), _binop(i_expr, ast.Mult(), copy.deepcopy(step_n)))

    static_trip = _static_trip(bounds)
    if static_trip is not None:
        stmts = _static_schedule(static_trip, delay, period, n_stages, n_pre, stage_instance, j_at, pl_mod, t_name)
        for st in stmts:
            _locate(st, node)
        _record(parser, node, frame, stmts, n_pre, n_stages, period)
        parser.exec_body(stmts, frame)
        for u in groups:
            for key, cur in parser.cursors.items():
                if key[0] == u:
                    cur.known = False
        return True

    for t in range(delay):                                      # prologue
        for s in range(n_stages):
            i = t - s * n_pre
            if i < 0:
                continue
            cond = ast.Compare(left=ast.Constant(i), ops=[ast.Lt()], comparators=[ast.Name(n_name, ast.Load())])
            stmts.append(ast.If(test=cond, body=stage_instance(s, i, j_at(ast.Constant(i))), orelse=[]))
    loop_body = []
    for u in range(period):                                     # steady state + drain, unrolled
        copy_u = []
        time = _binop(ast.Name(t_name, ast.Load()), ast.Add(), ast.Constant(u)) if u else ast.Name(t_name, ast.Load())
        for s in range(n_stages):
            i_expr = _binop(copy.deepcopy(time), ast.Sub(), ast.Constant(s * n_pre)) if s else copy.deepcopy(time)
            inst = stage_instance(s, delay + u - s * n_pre, j_at(copy.deepcopy(i_expr)))
            if s < n_stages - 1:
                cond = ast.Compare(left=copy.deepcopy(i_expr), ops=[ast.Lt()],
                                   comparators=[ast.Name(n_name, ast.Load())])
                copy_u.append(ast.If(test=cond, body=inst, orelse=[]))
            else:
                copy_u.extend(inst)
        if u:
            end = _binop(ast.Name(n_name, ast.Load()), ast.Add(), ast.Constant(delay))
            copy_u = [ast.If(test=ast.Compare(left=copy.deepcopy(time), ops=[ast.Lt()], comparators=[end]),
                             body=copy_u, orelse=[])]
        loop_body.extend(copy_u)
    rng = ast.Call(func=ast.Attribute(value=copy.deepcopy(pl_mod), attr="range", ctx=ast.Load()),
                   args=[ast.Constant(delay),
                         _binop(ast.Name(n_name, ast.Load()), ast.Add(), ast.Constant(delay)),
                         ast.Constant(period)], keywords=[])
    stmts.append(ast.For(target=ast.Name(t_name, ast.Store()), iter=rng, body=loop_body, orelse=[],
                         type_comment=None))
    for st in stmts:
        _locate(st, node)

    _record(parser, node, frame, stmts, n_pre, n_stages, period)
    parser.exec_body(stmts, frame)
    for u in groups:                  # the iteration count decides where the cursors would be
        for key, cur in parser.cursors.items():
            if key[0] == u:
                cur.known = False
    return True


def _static_trip(bounds):
    start, stop, step = bounds
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step)):
        return max(0, -(-(stop - start) // step))
    return None


def _static_schedule(n, delay, period, n_stages, n_pre, stage_instance, j_at, pl_mod, t_name) -> list:
    """Compile-time trip count: no guards. Static prologue, a steady loop over whole periods, then the
    remaining steady steps and the drain as static code."""
    def step(time: int) -> list:
        out = []
        for s in range(n_stages):
            i = time - s * n_pre
            if 0 <= i < n:
                out.extend(stage_instance(s, i, j_at(ast.Constant(i))))
        return out

    stmts = []
    for t in range(min(delay, n + delay)):
        stmts.extend(step(t))
    steady = max(0, n - delay)
    whole = steady // period * period
    if whole:
        body = []
        for u in range(period):
            time = _binop(ast.Name(t_name, ast.Load()), ast.Add(), ast.Constant(u))
            for s in range(n_stages):
                i_expr = _binop(copy.deepcopy(time), ast.Sub(), ast.Constant(s * n_pre))
                body.extend(stage_instance(s, delay + u - s * n_pre, j_at(i_expr)))
        rng = ast.Call(func=ast.Attribute(value=copy.deepcopy(pl_mod), attr="range", ctx=ast.Load()),
                       args=[ast.Constant(delay), ast.Constant(delay + whole), ast.Constant(period)], keywords=[])
        stmts.append(ast.For(target=ast.Name(t_name, ast.Store()), iter=rng, body=body, orelse=[],
                             type_comment=None))
    for t in range(max(delay, delay + whole), n + delay):
        stmts.extend(step(t))
    return stmts


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


def _range_nodes(it: ast.Call):
    args = list(it.args)
    kw = {k.arg: k.value for k in it.keywords}
    if kw:
        return kw.get("start", ast.Constant(0)), kw["stop"], kw.get("step", ast.Constant(1))
    if len(args) == 1:
        return ast.Constant(0), args[0], ast.Constant(1)
    return args[0], args[1], args[2] if len(args) > 2 else ast.Constant(1)


def _trip_count(pl_mod, start, stop, step):
    span = copy.deepcopy(stop) if _is_const(start, 0) else _binop(copy.deepcopy(stop), ast.Sub(), copy.deepcopy(start))
    if _is_const(step, 1):
        return span
    return ast.Call(func=ast.Attribute(value=copy.deepcopy(pl_mod), attr="ceil_div", ctx=ast.Load()),
                    args=[span, copy.deepcopy(step)], keywords=[])


def _is_const(n, v) -> bool:
    return isinstance(n, ast.Constant) and n.value == v


def _binop(a, op, b):
    if isinstance(op, (ast.Add, ast.Sub)) and _is_const(b, 0):
        return a
    if isinstance(op, ast.Mult) and _is_const(b, 1):
        return a
    if isinstance(op, ast.Add) and _is_const(a, 0):
        return b
    if isinstance(op, ast.Mult) and _is_const(a, 0):
        return ast.Constant(0)
    return ast.BinOp(left=a, op=op, right=b)


def _assign(name, value, where):
    return ast.Assign(targets=[ast.Name(name, ast.Store())], value=value, lineno=where.lineno)


def _locate(tree, where):
    """Synthesised nodes take the loop's position; copied stage code keeps the user's lines."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.expr, ast.stmt)):
            if not hasattr(n, "lineno") or n.lineno is None:
                n.lineno, n.col_offset = where.lineno, where.col_offset
                n.end_lineno, n.end_col_offset = where.lineno, where.col_offset
            elif not hasattr(n, "end_lineno"):
                n.end_lineno, n.end_col_offset = n.lineno, n.col_offset


def _record(parser, node, frame, stmts, n_pre, n_stages, period):
    """Keep the transform of each source loop (for pipeline_generated.py); the same loop parsed again
    (in a copy of an enclosing unrolled loop) must transform to the same code."""
    text = "\n".join(ast.unparse(s) for s in stmts)
    key = (frame.source.file, frame.source.first_line + node.lineno - 1, node.col_offset)
    prev = parser.pipeline_loops.get(key)
    if prev is not None and prev[0] != text:
        raise ParseError("this pipelined loop transforms differently where it is parsed again (its tile "
                         "groups start from different slots)", frame.span(node))
    parser.pipeline_loops[key] = (text, node, frame.source, stmts,
                                  f"preload={n_pre}, {n_stages} stages, unrolled by {period}")

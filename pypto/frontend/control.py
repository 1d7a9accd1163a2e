"""``pypto.loop``: a loop whose body is traced once with a symbolic index and whose trip count is
known only at run time. Tensors written in the body (``out[...] = v``) are carried through it.

Run-time control (the AICPU's control program decides, from sizes, loop indices and data scalars):
  * ``pypto.item(t, i)`` / ``t[i].item()`` (frontend/scalars.py): an element of an integer argument
    as a symbolic value — a loop bound, a view offset, a valid shape, index arithmetic.
  * ``pypto.cond(pred, true_fn, false_fn)`` and, in a ``@pypto.jit`` function's own body, ``if`` /
    ``a if c else b`` / ``and`` / ``or`` / ``not`` / comparisons on symbolic values (rewritten by
    frontend/conditions.py): a condition decided at trace time (over the loops' index ranges) runs
    one side; else both sides are traced, each as a loop of 1 trip when its side is taken and 0 when
    not — a branch of the control program. A tensor bound on either side and used after is merged
    through a buffer both sides write; a scalar is merged as ``Piecewise``.
  * ``pypto.is_loop_begin(i)`` / ``pypto.is_loop_end(i)``: the first / last iteration of ``i``'s loop.
A condition that can be neither decided now nor branched on at run time (a tensor's values, a
``while`` or ``assert`` on a run-time value) is an error at the user's line, never silently False.
"""
from __future__ import annotations

import itertools
import numbers

import sympy
from sympy.core.relational import Relational
from sympy.logic.boolalg import Boolean, BooleanAtom

from .. import symbolic as sym
from ..errors import PyptoError, TypeMismatchError, user_location
from ..ir.tensor_graph import OutputSpec, TensorGraph, ValueInfo
from ..ops.registry import get_op
from . import cann, context as ctx
from .scalars import item
from .tensor import Tensor

_ids = itertools.count()
# index symbol -> (first value, last value) of the pypto.loop being traced
_loop_ends: dict = {}
# index symbol -> (start, stop, step) of the pypto.loop being traced
_loop_spans: dict = {}


def _bound(what, v, loc):
    """A loop bound: an int, a size / symbolic expression, or a one-element integer tensor (read by the
    control program, as pypto.item)."""
    if isinstance(v, Tensor):
        if not v.dtype.is_integer:
            raise TypeMismatchError(f"pypto.loop {what} is a {v.dtype} tensor; a loop bound is an integer",
                                    loc=loc, hint="pass the count as an int32 / int64 tensor, or a size")
        return item(v) if all(isinstance(d, int) and d == 1 for d in v.shape) else _not_one(what, v, loc)
    if isinstance(v, float) or (isinstance(v, sympy.Basic) and v.is_number and not v.is_Integer):
        raise TypeMismatchError(f"pypto.loop {what} must be an integer, found {v}", loc=loc)
    return v


def _not_one(what, v, loc):
    raise PyptoError(f"pypto.loop {what} is a tensor of shape {list(v.shape)}; a loop bound is one element",
                     loc=loc, hint="index it (lens[b]) or read it with pypto.item(lens, b)")


class loop:
    """``for i in pypto.loop(start, stop=None, step=1)``: like ``range``; bounds may be sizes
    (``x.shape[0]``), symbolic expressions (``pypto.ceildiv(T, 64)``), data scalars
    (``pypto.item(lens, b)``), one-element integer tensors (``lens[b]``) or ints. ``name`` (CANN:
    ``idx_name``) names the index; ``unroll_list`` (CANN) is accepted and recorded as ignored
    (``pypto.frontend.cann.ignored_options()``, the ``pypto.cann`` logger)."""

    def __init__(self, start, stop=None, step=1, name: str | None = None, *, idx_name: str | None = None,
                 unroll_list=None, parallel: bool = False, **ignored):
        self.loc = user_location()
        if ignored:
            raise TypeMismatchError(f"pypto.loop got unexpected keyword argument(s) {', '.join(sorted(ignored))}",
                                    loc=self.loc)
        if stop is None:
            start, stop = 0, start
        start, stop, step = (_bound(w, v, self.loc) for w, v in (("start", start), ("stop", stop), ("step", step)))
        if isinstance(step, int) and step <= 0:
            raise PyptoError(f"pypto.loop step must be positive, found {step}", loc=self.loc)
        self.start, self.stop, self.step = sym.simplify(start), sym.simplify(stop), sym.simplify(step)
        self.name = name or idx_name
        if parallel:            # CANN's promise that iterations are independent: pypto orders them by their data
            cann.note_ignored("loop_options", {"parallel": bool(parallel)})
        if unroll_list is not None:     # pypto does not unroll pypto.loop bodies by a list of factors
            cann.note_ignored("loop_options", {"unroll_list": list(unroll_list)})

    def __iter__(self):
        parent = ctx.current()
        n = next(_ids)
        var = sym.index_symbol(self.name or f"i{n}")
        body = TensorGraph(f"{parent.graph.name}.loop{n}")
        frame = ctx.push(body)
        ctx.loop_ranges[var] = (self.start, sym.simplify(self.stop - 1))
        last = self.start + (sympy.ceiling((self.stop - self.start) / self.step) - 1) * self.step
        _loop_ends[var] = (self.start, sym.simplify(last))
        _loop_spans[var] = (self.start, self.stop, self.step)
        try:
            yield var
        finally:
            del ctx.loop_ranges[var]
            _loop_ends.pop(var, None)
            _loop_spans.pop(var, None)
            popped = ctx.pop()
            assert popped is frame
        self._close(parent, frame, var)

    def _close(self, parent, frame, var) -> None:
        body = frame.graph
        carried = [(t, g, nd) for (t, g, nd) in frame.mutated.values() if g is not body]
        carried_inputs = []
        for t, g, nd in carried:
            # the value the tensor had when the loop began, as a body input
            outer = ctx.resolve_from(frame, g, nd)
            carried_inputs.append(frame.captures[outer])
            body.outputs.append(OutputSpec(t._node, "return", len(body.outputs)))
        body.inputs = [frame.captures[s] for s in frame.capture_sources]
        g = parent.graph
        outs = [body.info(o.node) for o in body.outputs]
        attrs = {"body": body, "var": var, "start": self.start, "stop": self.stop, "step": self.step,
                 "carried": [body.inputs.index(c) for c in carried_inputs]}
        loop_node = g.add_node("loop", list(frame.capture_sources), attrs, outs, self.loc)
        for k, (t, og, onode) in enumerate(carried):
            res = g.add_node("loop_result", [loop_node], {"index": k}, ValueInfo(outs[k].shape, outs[k].dtype),
                             self.loc)
            parent.mutated.setdefault(id(t), (t, og, onode))
            t._graph, t._node = g, res


# ---------------------------------------------------------------------------------------------- conditions
def is_loop_begin(i):
    """``i == start`` of the pypto.loop ``i`` indexes (a condition for ``if`` / ``pypto.cond``)."""
    return sympy.Eq(i, _ends(i)[0])


def is_loop_end(i):
    """``i`` is the last index its pypto.loop takes."""
    return sympy.Eq(i, _ends(i)[1])


def _ends(i):
    if i not in _loop_ends:
        raise PyptoError(f"pypto.is_loop_begin / is_loop_end take the index of an enclosing pypto.loop, found {i!r}")
    return _loop_ends[i]


def _int_like(e) -> bool:
    return all(s.is_integer for s in e.free_symbols)


def _decide(c):
    """True / False when ``c`` holds / fails for every value of the loop indices being traced and every
    positive size; None when it depends on run-time values."""
    if isinstance(c, BooleanAtom):
        return bool(c)
    if isinstance(c, sympy.Not):
        d = _decide(c.args[0])
        return None if d is None else not d
    if isinstance(c, (sympy.And, sympy.Or)):
        ds = [_decide(a) for a in c.args]
        if isinstance(c, sympy.And):
            return False if False in ds else (True if all(d is True for d in ds) else None)
        return True if True in ds else (False if all(d is False for d in ds) else None)
    if isinstance(c, Relational) and _int_like(c):
        e = sympy.expand(c.lhs - c.rhs)
        r = ctx.loop_ranges

        def nonneg(x):
            try:
                return sym.prove_nonnegative(x, r)
            except (TypeError, ValueError):
                return False
        pos, neg, zero = nonneg(e - 1), nonneg(-e - 1), e == 0
        ge0, le0 = zero or pos or nonneg(e), zero or neg or nonneg(-e)
        if isinstance(c, sympy.Eq):
            return True if zero else (False if pos or neg else None)
        if isinstance(c, sympy.Ne):
            return False if zero else (True if pos or neg else None)
        if isinstance(c, sympy.StrictLessThan):
            return True if neg else (False if ge0 else None)
        if isinstance(c, sympy.LessThan):
            return True if le0 else (False if pos else None)
        if isinstance(c, sympy.StrictGreaterThan):
            return True if pos else (False if le0 else None)
        if isinstance(c, sympy.GreaterThan):
            return True if ge0 else (False if neg else None)
    return None


def condition(pred, loc=None):
    """``pred`` as True / False when trace time decides it, else a sympy Boolean for a run-time branch."""
    if isinstance(pred, Tensor):
        raise TypeMismatchError("a tensor's values as a condition: a traced pypto.Tensor has no truth value at "
                                "trace time and the control program does not read whole tensors", loc=loc,
                                hint="pypto.where(cond, a, b) chooses per element; pypto.item(t, i) reads one "
                                     "element of an integer argument as a run-time scalar")
    if isinstance(pred, (bool, int, float)) and not isinstance(pred, sympy.Basic):
        return bool(pred)
    if isinstance(pred, sympy.Basic):
        if not _is_boolean(pred):
            if pred.is_number:
                return bool(pred != 0)
            pred = sympy.Ne(pred, 0)
        d = _decide(pred)
        return pred if d is None else d
    return bool(pred)


def static_bool(pred, what: str = "condition"):
    """A condition Python itself branches on (``while``, ``assert``, an ``if`` holding ``return`` /
    ``break`` / ``continue``): decided at trace time, or an error at the user's line."""
    loc = user_location()
    c = condition(pred, loc)
    if isinstance(c, bool):
        return c
    raise PyptoError(f"the {what} {c} depends on run-time values and cannot be decided while tracing; "
                     "here it cannot become a branch of the control program either", loc=loc,
                     hint="write it as an `if` whose sides assign values (no return / break / continue in "
                          "them), or as pypto.cond(pred, true_fn, false_fn)")


def _unbound_use(self, *args):
    raise PyptoError("a name bound on only one side of a run-time branch (or not bound before it) is used "
                     "after the branch", hint="bind it on both sides of the `if`, or before it")


# the value of a name not bound (yet): what a run-time branch leaves in a name only one side binds
_UNBOUND = type("Unbound", (), {"__repr__": lambda self: "<unbound>", "__bool__": _unbound_use,
                                "__getattr__": _unbound_use, "__getitem__": _unbound_use, "__call__": _unbound_use,
                                **{f"__{op}__": _unbound_use for op in (
                                    "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv",
                                    "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul", "rmatmul",
                                    "neg", "pos", "abs", "lt", "le", "gt", "ge", "iter", "len", "index", "int",
                                    "float")}})()


class _Merge:
    """How one value bound by the two sides of a run-time branch comes out of it."""

    def __init__(self):
        self.buffer = None      # the merge tensor (created in the parent before the first side that needs it)


def _flat(v):
    if isinstance(v, tuple):
        return list(v), tuple
    if isinstance(v, list):
        return list(v), list
    return [v], None


def _in_parent(make):
    """Run ``make()`` in the graph enclosing the branch body being traced (its node then precedes the loop)."""
    frame = ctx._stack.pop()
    try:
        return make()
    finally:
        ctx._stack.append(frame)


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    try:
        return bool(a == b) if not isinstance(a, sympy.Basic) else sym.equal(a, b) is True
    except (TypeError, ValueError):
        return False


def _branch(c, fns, before, loc, one_sided=()):
    """Trace ``fns[0]`` and ``fns[1]`` as the two sides of a run-time branch on ``c`` (each a loop of 1
    trip when its side is taken, else 0); the values they return merged. ``before``: the values before
    the branch (those a side returns unchanged need no merge buffer), or None. ``one_sided``: the
    positions only one side binds; one unbound before the branch is unbound after it (a temporary of
    that side: nothing to merge)."""
    from .api import assemble, zeros
    trips = (sympy.Piecewise((1, c), (0, True)), sympy.Piecewise((0, c), (1, True)))
    results, kinds = [], []
    merges: dict = {}
    sides = list(zip(fns, trips))
    if fns[1] is None and before is None:
        sides = sides[:1]               # pypto.cond(pred, fn): no else side to trace
    for side, (fn, trip) in enumerate(sides):
        lp = loop(0, trip, name=f"{'then' if side == 0 else 'else'}{next(_ids)}")
        lp.loc = loc
        facts = _facts(c if side == 0 else sympy.Not(c))
        for _ in lp:
            if facts[0] or facts[1]:
                ctx.current().refine = _refiner(ctx.current().graph, facts, loc)
            out = fn() if fn is not None else (before if before is not None else None)
            flat, kind = _flat(out)
            if side == 1 and len(flat) != len(results[0]):
                raise PyptoError(f"the two sides of a run-time branch return {len(results[0])} and {len(flat)} "
                                 "values", loc=loc)
            for k, v in enumerate(flat):
                if not isinstance(v, Tensor):
                    continue
                other = results[0][k] if side == 1 else None
                base = before[k] if before is not None and k < len(before) else _UNBOUND
                if k in one_sided and base is _UNBOUND:
                    continue
                if side == 0 and v is base:
                    continue            # unchanged: merged only if the other side changes it
                if side == 1 and v is base and other is base:
                    continue
                if side == 1 and other is v:
                    continue            # the same tensor of the enclosing graph on both sides
                m = merges.get(k)
                if m is None:
                    shape, dt = tuple(v.shape), v.dtype
                    m = merges[k] = _in_parent(lambda: zeros(*shape, dtype=dt)) if side == 0 else None
                    if side == 1:
                        # side 0 left it unchanged (or it is new here): start from side 0's value
                        if not isinstance(other, Tensor):
                            raise PyptoError(f"value {k} of a run-time branch is a tensor on one side and "
                                             f"{other!r} on the other", loc=loc)
                        m = merges[k] = _in_parent(lambda: _copy_of(other, zeros, assemble))
                _check_shape(m, v, k, loc)
                assemble(v, [0] * len(v.shape), m)
            results.append(flat)
            kinds.append(kind)
    if len(results) == 1:
        if any(v is not None for v in results[0]):
            raise PyptoError("pypto.cond(pred, true_fn) without a false_fn returns nothing on the false side: "
                             "true_fn must return None (write results into a tensor, or give false_fn)", loc=loc)
        return None
    merged = []
    for k, (a, b) in enumerate(zip(*results)):
        if k in one_sided and before[k] is _UNBOUND:
            merged.append(_UNBOUND)
            continue
        if k in merges and not isinstance(b, Tensor):
            raise PyptoError(f"value {k} of a run-time branch is a tensor on one side and {b!r} on the other",
                             loc=loc)
        if k in merges:
            merged.append(merges[k])
        elif isinstance(a, Tensor) or isinstance(b, Tensor):
            if a is not b:
                raise PyptoError(f"value {k} of a run-time branch is {a!r} on one side and {b!r} on the other",
                                 loc=loc)
            merged.append(a)
        elif _same(a, b):
            merged.append(a)
        elif _scalar(a) and _scalar(b):
            merged.append(sympy.Piecewise((a, c), (b, True)))
        elif a is _UNBOUND or b is _UNBOUND:
            merged.append(_UNBOUND)
        else:
            raise PyptoError(f"value {k} of a run-time branch is {a!r} on one side and {b!r} on the other: only "
                             "tensors and integer scalars are merged after a run-time branch", loc=loc)
    kind = kinds[0]
    return merged[0] if kind is None else kind(merged)


def _facts(c):
    """What a side of a branch on ``c`` knows: ({symbol: value} from equalities, [e: e >= 0 holds]).
    ``i != last`` of a loop(start, stop, step) index is ``i + step < stop`` (a later iteration exists),
    ``i != start`` is ``i >= start + step``."""
    subs, nonneg = {}, []
    if isinstance(c, sympy.And):
        for a in c.args:
            s, n = _facts(a)
            subs.update(s)
            nonneg += n
    elif isinstance(c, sympy.Eq):
        for a, b in ((c.lhs, c.rhs), (c.rhs, c.lhs)):
            if isinstance(a, sympy.Symbol) and a in _loop_spans:
                subs[a] = b
                break
    elif isinstance(c, sympy.Ne):
        for a, b in ((c.lhs, c.rhs), (c.rhs, c.lhs)):
            if isinstance(a, sympy.Symbol) and a in _loop_spans:
                start, stop, step = _loop_spans[a]
                if sym.equal(b, _loop_ends[a][1]) is True:
                    nonneg.append(sym.simplify(stop - step - a - 1))
                elif sym.equal(b, start) is True:
                    nonneg.append(sym.simplify(a - start - step))
                break
    elif isinstance(c, Relational) and _int_like(c):
        d = {sympy.StrictLessThan: c.rhs - c.lhs - 1, sympy.LessThan: c.rhs - c.lhs,
             sympy.StrictGreaterThan: c.lhs - c.rhs - 1, sympy.GreaterThan: c.lhs - c.rhs}.get(type(c))
        if d is not None:
            nonneg.append(sym.simplify(d))
    return subs, nonneg


def _refined_dim(d, facts):
    """The size ``d`` under a branch side's facts, when they make it a constant (a tail's
    ``min(step, stop - i)`` on the side where ``i`` is not the last index is ``step``); else ``d``."""
    if isinstance(d, int) or not isinstance(d, sympy.Basic) or not d.free_symbols:
        return d
    subs, nonneg = facts
    r = ctx.loop_ranges

    def provable(x):
        try:
            return sym.prove_nonnegative(sympy.expand(x), r) or any(
                sym.prove_nonnegative(sympy.expand(x - f), r) for f in nonneg)
        except (TypeError, ValueError):
            return False

    def pick(e):
        keep = [a for a in e.args
                if not any(b is not a and (provable(a - b) if isinstance(e, sympy.Min) else provable(b - a))
                           for b in e.args)]
        return e.func(*keep) if keep else e

    e = d.subs(subs) if subs else d
    e = e.replace(lambda x: isinstance(x, (sympy.Min, sympy.Max)), pick)
    e = sym.simplify(e)
    return int(e) if isinstance(e, (int, sympy.Integer)) else d


def _refiner(graph, facts, loc):
    """A branch side's reading of the values it captures: one whose shape the side's facts make
    static is read through a view of that static shape at offset 0 (the same data: the extents agree
    whenever this side runs, and a view's bounds are checked against its source at run time)."""
    seen: dict = {}

    def refine(node):
        if node in seen:
            return seen[node]
        info = graph.info(node)
        out = node
        if isinstance(info, ValueInfo) and info.shape:
            shape = tuple(_refined_dim(d, facts) for d in info.shape)
            if shape != tuple(info.shape):
                attrs = {"offsets": (0,) * len(shape), "shape": shape, "tile_shape": shape}
                out = graph.add_node("view", [node], attrs, get_op("view").infer([info], attrs), loc)
                seen[out] = out
        seen[node] = out
        return out
    refine.size = lambda d: _refined_dim(d, facts)
    return refine


def _copy_of(t, zeros, assemble):
    m = zeros(*tuple(t.shape), dtype=t.dtype)
    assemble(t, [0] * len(t.shape), m)
    return m


def _check_shape(m, v, k, loc):
    if len(m.shape) != len(v.shape) or any(sym.equal(a, b) is False for a, b in zip(m.shape, v.shape)) \
            or m.dtype != v.dtype:
        raise PyptoError(f"value {k} of a run-time branch is {v.dtype}{list(v.shape)} on one side and "
                         f"{m.dtype}{list(m.shape)} on the other: both sides must give the same shape and dtype",
                         loc=loc)


def _scalar(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, sympy.Basic) and not
                                                                 _is_boolean(v))


def _is_boolean(v) -> bool:
    """A sympy truth value (a relation, And / Or / Not, true / false); a Symbol is a sympy Boolean too,
    but pypto's symbols (sizes, loop indices, data scalars) are integers."""
    return isinstance(v, Boolean) and not isinstance(v, sympy.Expr)


def cond(pred, true_fn, false_fn=None):
    """``true_fn()`` if ``pred`` else ``false_fn()``: decided at trace time when it can be, else a run-time
    branch of the control program (both traced; tensors they return are merged, see the module doc)."""
    loc = user_location()
    c = condition(pred, loc)
    if c is True:
        return true_fn()
    if c is False:
        return false_fn() if false_fn is not None else None
    return _branch(c, (true_fn, false_fn), None, loc)


# the helpers frontend/conditions.py's rewrite of a jit function's body calls
def _choose(pred, then_fn, else_fn, before, one_sided=()):
    """``then_fn()`` or ``else_fn()`` when trace time decides ``pred``, else both as a run-time branch
    (``before``, ``one_sided``: see _branch)."""
    loc = user_location()
    c = condition(pred, loc)
    if c is True:
        return then_fn()
    if c is False:
        return else_fn()
    return _branch(c, (then_fn, else_fn), before, loc, one_sided)


def if_stmt(pred, then_fn, else_fn, before, one_sided=()):
    """An ``if`` statement: ``then_fn(*before)`` / ``else_fn(*before)`` return the values of the names the
    statement binds (``one_sided``: the positions of those only one side binds)."""
    return _choose(pred, lambda: then_fn(*before), lambda: else_fn(*before), tuple(before), frozenset(one_sided))


def if_return(pred, then_fn, else_fn, before):
    """``if pred: ... return a`` followed by the rest of a function body (``else_fn``): the value returned."""
    return _choose(pred, lambda: then_fn(*before), lambda: else_fn(*before), None)


def if_exp(pred, then_fn, else_fn):
    """``a if pred else b``."""
    return _choose(pred, then_fn, else_fn, None)


_CMP = {"==": sympy.Eq, "!=": sympy.Ne, "<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge}
_PY = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _symbolic(v) -> bool:
    return isinstance(v, sympy.Basic) and bool(v.free_symbols)


def _number(v) -> bool:
    return isinstance(v, (sympy.Basic, numbers.Number)) and not isinstance(v, bool)


def _compare1(op, a, b):
    if op in ("==", "!=") and isinstance(a, (tuple, list)) and type(a) is type(b) and \
            any(_symbolic(v) for v in (*a, *b)):
        # a shape against a shape: element by element (Python's would compare sympy structurally)
        eq = len(a) == len(b) and bool_and(*[(lambda x=x, y=y: _compare1("==", x, y)) for x, y in zip(a, b)]) \
            if a or b else True
        return eq if op == "==" else bool_not(eq)
    if (_symbolic(a) or _symbolic(b)) and _number(a) and _number(b):
        r = _CMP[op](a, b)
        d = _decide(r) if isinstance(r, Boolean) else None
        return d if d is not None else r
    return _PY[op](a, b)                # plain values, tensors, None, strings ...: Python's own


def compare(ops, *operands):
    """``a op b [op c ...]``: Python's answer unless both operands are numbers and one is a symbolic
    scalar (a size, a loop index, a data scalar), then a sympy relation (decided later, or a run-time
    condition)."""
    if len(ops) == 1:
        return _compare1(ops[0], *operands)
    return compare_chain(ops, operands[0], *[(lambda v=v: v) for v in operands[1:]])


def compare_chain(ops, first, *thunks):
    """``a op b op c ...``: each operand evaluated once, in order, none after the first false link."""
    links, a = [], first
    for op, th in zip(ops, thunks):
        b = th()
        links.append(lambda r=_compare1(op, a, b): r)
        a = b
        if not _is_cond(links[-1]()) and not links[-1]():
            break
    return bool_and(*links)


def contains(a, b, negate: bool):
    """``a in b`` / ``a not in b``: over a tuple, list, set or range holding a symbolic scalar (or one
    looked up), ``a == e`` for the elements (Python's ``in`` would compare sympy expressions
    structurally); Python's own otherwise."""
    if isinstance(b, range) and _symbolic(a) and _number(a):
        if b.step == 1:
            r = bool_and(lambda: _compare1(">=", a, b.start), lambda: _compare1("<", a, b.stop))
        elif len(b) <= 64:
            r = bool_or(*[(lambda e=e: _compare1("==", a, e)) for e in b]) if len(b) else False
        else:
            raise PyptoError(f"`{a} in {b}` on a run-time value: a range of step {b.step} has {len(b)} "
                             "values", loc=user_location(), hint="write the condition with comparisons and %")
    elif isinstance(b, (tuple, list, set, frozenset)) and (
            _symbolic(a) or any(_symbolic(e) for e in b)):
        r = bool_or(*[(lambda e=e: _compare1("==", a, e) if _number(a) and _number(e) else a == e)
                      for e in b]) if len(b) else False
    else:
        return (a not in b) if negate else (a in b)
    return bool_not(r) if negate else r


def _is_cond(v) -> bool:
    return isinstance(v, Boolean) and not isinstance(v, BooleanAtom) or _symbolic(v)


def _truth(v):
    """Python's truth value of an operand of and / or / not: True / False, or a sympy condition when
    only the run decides it."""
    if _is_cond(v) or isinstance(v, Tensor):
        return condition(v, user_location())     # a tensor: the error
    return bool(v)


def _logic(v):
    """``v`` as an operand of a sympy And / Or."""
    t = _truth(v)
    return sympy.true if t is True else (sympy.false if t is False else t)


def bool_and(*thunks):
    """``a and b ...``: Python's value (the first false operand, else the last) and short-circuit; an
    operand only the run decides makes a sympy And of conditions (a Piecewise of two integer values)."""
    value = thunks[0]()
    if len(thunks) == 1:
        return value
    t = _truth(value)
    if t is False:
        return value
    rest = bool_and(*thunks[1:])
    if t is True:
        return rest
    if _scalar(value) and _scalar(rest):
        return sympy.Piecewise((rest, t), (value, True))
    return sympy.And(t, _logic(rest))


def bool_or(*thunks):
    """``a or b ...``: Python's value (the first true operand, else the last); see bool_and."""
    value = thunks[0]()
    if len(thunks) == 1:
        return value
    t = _truth(value)
    if t is True:
        return value
    rest = bool_or(*thunks[1:])
    if t is False:
        return rest
    if _scalar(value) and _scalar(rest):
        return sympy.Piecewise((value, t), (rest, True))
    return sympy.Or(t, _logic(rest))


def bool_not(v):
    """``not v``."""
    if _is_cond(v) or isinstance(v, Tensor):
        c = condition(v, user_location())
        return (not c) if isinstance(c, bool) else sympy.Not(c)
    return not v


def bound(values: dict, names):
    """The current values of ``names`` (``_UNBOUND`` for those not bound yet)."""
    return tuple(values.get(n, _UNBOUND) for n in names)


__all__ = ["loop", "item", "cond", "is_loop_begin", "is_loop_end"]

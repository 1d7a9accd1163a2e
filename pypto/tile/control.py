"""Program ids and ``pt.range``: a loop with run-time bounds whose body is traced once.

``for j in pt.range(start, stop):`` yields one symbolic index. Tiles that the body rebinds
(``acc = acc * alpha + o``) or updates in place (``acc += o``) are loop-carried: found by comparing the
tiles the calling function's variables hold before and after the body (one level into lists, tuples
and dicts). Inside the body, reads of such a variable before its update mean "the value at the start
of this iteration"; after the loop, the variable holds the value after the last iteration.
"""
from __future__ import annotations

import sys

import sympy

from ..errors import PyptoError, ShapeError, TypeMismatchError, user_location
from ..symbolic import index_symbol
from . import trace
from .api import Tile
from .ir import Carry, Loop, Value


def program_id(axis: int = 0):
    """The coordinate of this program along grid axis ``axis`` (a symbolic index while tracing)."""
    p = trace.current().program
    if not isinstance(axis, int) or not 0 <= axis < p.grid_rank:
        raise PyptoError(f"pt.program_id({axis!r}): the grid has {p.grid_rank} axis(es)")
    return p.pids[axis]


def num_programs(axis: int = 0):
    """The grid's extent along ``axis`` (a run-time size)."""
    p = trace.current().program
    if not isinstance(axis, int) or not 0 <= axis < p.grid_rank:
        raise PyptoError(f"pt.num_programs({axis!r}): the grid has {p.grid_rank} axis(es)")
    return p.grid_sizes[axis]


def cdiv(a, b):
    """Ceiling division of sizes (ints or symbolic)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return sympy.ceiling(sympy.sympify(a) / b)


def _is_index(x) -> bool:
    return isinstance(x, (int, sympy.Expr)) and not isinstance(x, bool)


_counter = [0]


def range(start, stop=None, step=1):    # noqa: A001
    """``for j in pt.range(start, stop, step)``: a loop with run-time bounds (the body is traced once)."""
    if stop is None:
        start, stop = 0, start
    loc = user_location()
    for name, x in (("start", start), ("stop", stop), ("step", step)):
        if not _is_index(x):
            raise TypeMismatchError(f"pt.range: {name} must be an integer or a symbolic index, found {x!r}",
                                    loc=loc)
    if not (isinstance(step, int) and step > 0):
        raise PyptoError(f"pt.range: step must be a positive int, found {step!r}", loc=loc)
    return _loop(start, stop, step, loc)


def _loop(start, stop, step, loc):
    tr = trace.current()
    frame = sys._getframe(1)
    _counter[0] += 1
    var = index_symbol(f"j{_counter[0]}")
    loop = Loop(var, start, stop, step, [], [], loc)
    before = _tiles_of(frame)
    tr.push_loop(loop)
    try:
        yield var
    except GeneratorExit:
        tr.pop_loop()
        raise
    if tr.loop is not loop:
        raise PyptoError("pt.range: loops must nest (a loop body ended inside another)", loc=loc)
    tr.pop_loop()
    after = _tiles_of(frame)
    _close(loop, before, after, loc)


def _tiles_of(frame) -> dict:
    """path -> Tile for every tile reachable from the frame's variables (one level into containers)."""
    out = {}
    for name, obj in frame.f_locals.items():
        if isinstance(obj, Tile):
            out[(name,)] = obj
        elif isinstance(obj, (list, tuple)):
            for i, x in enumerate(obj):
                if isinstance(x, Tile):
                    out[(name, i)] = x
        elif isinstance(obj, dict):
            for k, x in obj.items():
                if isinstance(x, Tile):
                    out[(name, k)] = x
    return {p: (t, t._v) for p, t in out.items()}


def _inside(v: Value, loop: Loop) -> bool:
    lp = v.loop
    while lp is not None:
        if lp is loop:
            return True
        lp = lp.parent
    return False


def _label(path) -> str:
    return path[0] + "".join(f"[{p!r}]" for p in path[1:])


def _close(loop: Loop, before: dict, after: dict, loc) -> None:
    """Find the carried tiles, rewrite the body to read their iteration-start values, and make the
    variables hold the loop's results."""
    by_init: dict = {}          # id(init value) -> [init, next, [paths], [tiles]]
    for path, (tile, now) in after.items():
        old = before.get(path)
        if old is None or old[1] is now:
            continue
        init = old[1]
        ent = by_init.setdefault(id(init), [init, now, [], []])
        if ent[1] is not now:
            raise PyptoError(f"pt.range: the tiles {_label(ent[2][0])} and {_label(path)} start the loop as one tile "
                             "and are updated differently", loc=loc, hint="give each a copy: pt.copy(tile)")
        ent[2].append(path)
        ent[3].append(tile)
    # in-place updates of tiles no variable rebinds
    for path, (tile, old) in before.items():
        if tile._v is not old and id(old) not in by_init:
            by_init[id(old)] = [old, tile._v, [path], [tile]]
    for init, nxt, paths, tiles in by_init.values():
        name = _label(paths[0])
        if tuple(init.shape) != tuple(nxt.shape) or init.dtype != nxt.dtype:
            raise ShapeError(f"pt.range: the carried tile '{name}' enters the loop as {init.dtype}"
                             f"[{init.shape[0]}, {init.shape[1]}] and leaves an iteration as {nxt.dtype}"
                             f"[{nxt.shape[0]}, {nxt.shape[1]}]", loc=loc,
                             hint="a carried tile keeps its shape and dtype (pt.cast the update)")
        still = [_label(p) for p, (t, v) in after.items() if v is init]
        if still:
            raise PyptoError(f"pt.range: the tile carried as '{name}' is also read unchanged as "
                             f"'{still[0]}' in the loop", loc=loc, hint="give it a copy: pt.copy(tile)")
        # the carried tile's valid shape: the update's when it does not change from iteration to iteration
        free = set().union(*(sympy.sympify(x).free_symbols for x in nxt.valid))
        valid = nxt.valid if loop.var not in free and not any(_inside_var(s, loop) for s in free) else init.valid
        phi = Value(init.shape, init.dtype, valid, None, loop, "c")
        result = Value(init.shape, init.dtype, valid, None, loop.parent, "r")
        loop.carried.append(Carry(phi, init, nxt, result))
        _replace(loop.body, init, phi)
        for t in tiles:
            t._v = result
    # tiles created inside and rebound to no carried variable keep pointing at body values: using one
    # after the loop is an error (trace.check_scope)


def _inside_var(s, loop: Loop) -> bool:
    """Is symbol ``s`` the index of a loop nested in ``loop``?"""
    def rec(stmts):
        return any(isinstance(x, Loop) and (x.var == s or rec(x.body)) for x in stmts)
    return rec(loop.body)


def _replace(stmts, old: Value, new: Value) -> None:
    for s in stmts:
        if isinstance(s, Loop):
            for c in s.carried:
                if c.init is old:
                    c.init = new
            _replace(s.body, old, new)
        else:
            s.args = [new if a is old else a for a in s.args]

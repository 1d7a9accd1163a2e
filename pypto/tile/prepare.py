"""Clean-ups of the traced tile program before placement (each a small rewrite, in place):

* a transpose of a loaded tile becomes a transposed load (the DMA reads the box transposed);
* the copy ``pt.store`` inserts when a tile's valid shape differs from its view's is folded into the
  producing elementwise op (computing fewer rows/columns of a tile is always safe);
* dead ops (results nobody reads) are dropped;
* ops that compute the same tile in every iteration of a loop move in front of it.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from .ir import KernelProgram, Loop, Op, Value, walk_ops
from .optable import OPS

_NARROWABLE = {"binary", "rowexp", "colexp", "scalar", "unary"}
_NARROWABLE_OPS = {"cast", "copy", "select", "full"}


def uses(program: KernelProgram) -> dict:
    """id(value) -> [consumer Op or Loop (carry init)]."""
    out: dict = {}

    def rec(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                for c in s.carried:
                    out.setdefault(id(c.init), []).append(s)
                rec(s.body)
                for c in s.carried:
                    out.setdefault(id(c.next), []).append(s)
            else:
                for a in s.values():
                    out.setdefault(id(a), []).append(s)
    rec(program.body)
    return out


def _replace_value(stmts, old: Value, new: Value) -> None:
    for s in stmts:
        if isinstance(s, Loop):
            for c in s.carried:
                if c.init is old:
                    c.init = new
                if c.next is old:
                    c.next = new
            _replace_value(s.body, old, new)
        else:
            s.args = [new if a is old else a for a in s.args]


def fold_transposed_loads(program: KernelProgram) -> None:
    for op in walk_ops(program.body):
        if op.op == "transpose" and op.args[0].op is not None and op.args[0].op.op == "load":
            view = op.args[0].op.args[0]
            op.op = "load"
            op.args = [replace(view, shape=(view.shape[1], view.shape[0]), valid=(view.valid[1], view.valid[0]),
                               trans=not view.trans)]


def narrow_store_copies(program: KernelProgram) -> None:
    u = uses(program)
    for op in list(walk_ops(program.body)):
        if op.op != "copy" or len(u.get(id(op.out), [])) != 1 or not isinstance(u[id(op.out)][0], Op) \
                or u[id(op.out)][0].op != "store":
            continue
        src = op.args[0]
        p = src.op
        if p is None or len(u.get(id(src), [])) != 1 or src.loop is not op.out.loop:
            continue
        if not (OPS[p.op].family in _NARROWABLE or p.op in _NARROWABLE_OPS):
            continue
        src.valid = op.out.valid
        _replace_value(program.body, op.out, src)
        op.op, op.args, op.out = "_dead", [], None


def _inside(v: Value, loop: Loop) -> bool:
    lp = v.loop
    while lp is not None:
        if lp is loop:
            return True
        lp = lp.parent
    return False


def _loop_vars(loop: Loop) -> set:
    out = {loop.var}
    for s in loop.body:
        if isinstance(s, Loop):
            out |= _loop_vars(s)
    return out


def hoist_invariants(program: KernelProgram) -> None:
    """Move ops that do not change from iteration to iteration (operands defined before the loop, no
    loop index in their scalars; loads only of tensors the kernel never stores) in front of the loop."""
    stored = set(program.outputs)

    def invariant(op: Op, loop: Loop, lvars: set) -> bool:
        if op.out is None or op.op == "_dead":
            return False
        if op.op == "load" and (op.args[0].tensor in stored or
                                any(lvars & sympy.sympify(o).free_symbols for o in op.args[0].offsets) or
                                any(lvars & sympy.sympify(o).free_symbols for o in op.args[0].valid)):
            return False
        for a in op.args:
            if isinstance(a, Value):
                if _inside(a, loop):
                    return False
            elif isinstance(a, sympy.Basic) and a.free_symbols & lvars:
                return False
        return all(not (lvars & sympy.sympify(x).free_symbols) for x in op.out.valid)

    def rec(stmts, parent_loop):
        k = 0
        while k < len(stmts):
            s = stmts[k]
            if isinstance(s, Loop):
                rec(s.body, s)
                lvars = _loop_vars(s)
                moved = [o for o in s.body if isinstance(o, Op) and invariant(o, s, lvars)]
                while moved:
                    for o in moved:
                        s.body.remove(o)
                        o.out.loop = parent_loop
                    stmts[k:k] = moved
                    k += len(moved)
                    moved = [o for o in s.body if isinstance(o, Op) and invariant(o, s, lvars)]
            k += 1
    rec(program.body, None)


def dead_code(program: KernelProgram) -> None:
    """Drop ops whose results nobody reads (stores stay), to a fixed point."""
    while True:
        u = uses(program)
        removed = False

        def rec(stmts):
            nonlocal removed
            keep = []
            for s in stmts:
                if isinstance(s, Loop):
                    rec(s.body)
                    keep.append(s)
                elif s.op == "_dead" or (s.op != "store" and s.out is not None and not u.get(id(s.out))):
                    removed = True
                else:
                    keep.append(s)
            stmts[:] = keep
        rec(program.body)
        if not removed:
            return


def prepare(program: KernelProgram) -> KernelProgram:
    fold_transposed_loads(program)
    narrow_store_copies(program)
    dead_code(program)
    hoist_invariants(program)
    return program

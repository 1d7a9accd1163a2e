"""The Professional-mode parser: a kernel's Python AST, interpreted at compile time, into Block IR.

Compile-time values (ints, floats, tile types, tiles, tile groups, tensors) are Python objects;
run-time scalars are sympy expressions over the kernel's scalar and size symbols, the loop variables
and ``BLOCK_IDX`` / ``BLOCK_NUM`` / ``SUBBLOCK_IDX``. Statements inside ``with pl.section_vector()``
and ``with pl.section_cube()`` emit into the AIV and AIC blocks. ``pl.range`` loops become ``For``
(unrolled by the period of the tile groups they advance, so every slot is static); run-time ``if``
becomes ``If``; helper functions are inlined; Python ``range`` / ``if`` over compile-time values are
unrolled / folded.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import operator
import os
import types
from dataclasses import dataclass, field

import sympy

from pypto import symbolic
from pypto.errors import PyptoError
from pypto.ir.block import If

from .builder import SectionBuilder
from .dsl import DslFunction, REGISTRY
from .errors import ParseError, Span
from .source import FunctionSource, function_source
from .values import Cursor, TensorValue, TileGroup, TileValue

MAX_UNROLL = 8


# --------------------------------------------------------------------------- helper value kinds
class Poison:
    """A name that exists but must not be used (defined inside a loop, or differently in two branches)."""

    def __init__(self, why: str):
        self.why = why


@dataclass
class Intrinsic:
    """A method of a parser value (``group.next``, ``tile.with_valid``) bound to its object."""
    fn: object
    obj: object
    name: str


@dataclass
class LocalFunction:
    """A ``def`` inside the kernel: inlined at each call, with the defining frame as its closure."""
    node: ast.FunctionDef
    frame: "Frame"


@dataclass
class LoopScope:
    names_before: set
    var: object
    span: Span
    bound_inside: set = field(default_factory=set)
    carried: set = field(default_factory=set)     # names the body reads before it assigns them
    # workspace slots referred to without acquiring them, by a use acquired before the body (see
    # attributes._refer_across_iterations); None while the body is only dry-run (loops._period)
    ws_refs: list | None = None
    ws_start: int = 0                   # the last workspace use id before the body


def carried_names(body) -> set:
    """Names a loop body reads before assigning them (in execution order) and also assigns: a value
    carried from one iteration to the next, which a kernel cannot express."""
    stored, read_first = set(), set()

    def loads(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in stored:
                read_first.add(n.id)

    def stores(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                stored.add(n.id)

    def visit(stmts):
        for st in stmts:
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                if st.value is not None:
                    loads(st.value)
                for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                    stores(t)
            elif isinstance(st, ast.AugAssign):
                loads(st.value)
                if isinstance(st.target, ast.Name) and st.target.id not in stored:
                    read_first.add(st.target.id)
                stores(st.target)
            elif isinstance(st, ast.For):
                loads(st.iter)
                stores(st.target)
                visit(st.body)
            elif isinstance(st, (ast.If, ast.While)):
                loads(st.test)
                visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.With):
                for item in st.items:
                    loads(item.context_expr)
                visit(st.body)
            else:
                loads(st)
    visit(body)
    return read_first & stored


class Frame:
    def __init__(self, source: FunctionSource, fn_globals: dict, closure: dict, env: dict, parent=None):
        self.source = source
        self.globals = fn_globals
        self.closure = closure
        self.env = env
        self.parent = parent          # lexical parent (nested defs)
        self.loops: list[LoopScope] = []
        self.rt_depth = 0             # nesting of run-time For/If bodies

    def span(self, node) -> Span:
        return self.source.span(node)


class _Return(Exception):
    def __init__(self, value):
        self.value = value


@dataclass
class Call:
    """One DSL call being given its meaning: evaluated arguments plus where each came from."""
    parser: "Parser"
    frame: Frame
    node: ast.Call
    args: list
    kwargs: dict
    arg_nodes: list
    kw_nodes: dict
    name: str = ""

    @property
    def span(self) -> Span:
        return self.frame.span(self.node)

    def arg_span(self, key) -> Span:
        node = self.kw_nodes.get(key) if isinstance(key, str) else (
            self.arg_nodes[key] if key < len(self.arg_nodes) else None)
        return self.frame.span(node) if node is not None else self.span

    def error(self, message: str, hint: str | None = None, at=None, cls=ParseError):
        return cls(message, self.arg_span(at) if at is not None else self.span, hint)

    def bind(self, params: list, usage: str) -> dict:
        """Bind positional and keyword arguments to ``params`` (names; ``(name, default)`` for optional)."""
        out, names = {}, []
        for p in params:
            names.append(p[0] if isinstance(p, tuple) else p)
        if len(self.args) > len(names):
            raise self.error(f"{self.name} takes at most {len(names)} arguments ({usage}), found {len(self.args)}",
                             hint=f"usage: {usage}")
        for n, v in zip(names, self.args):
            out[n] = v
        for k, v in self.kwargs.items():
            if k not in names:
                raise self.error(f"{self.name} has no argument '{k}'", hint=f"usage: {usage}", at=k)
            if k in out:
                raise self.error(f"{self.name} got argument '{k}' twice", hint=f"usage: {usage}", at=k)
            out[k] = v
        for p in params:
            if isinstance(p, tuple):
                out.setdefault(p[0], p[1])
            elif p not in out:
                raise self.error(f"{self.name} is missing argument '{p}' ({usage}); found {len(self.args)} "
                                 f"positional argument{'s' if len(self.args) != 1 else ''}", hint=f"usage: {usage}")
        return out

    def where(self, pname: str):
        """The argument index or keyword under which parameter ``pname`` was passed (for carets)."""
        return pname if pname in self.kw_nodes else None


def is_runtime(v) -> bool:
    return isinstance(v, sympy.Basic) and not (v.is_Integer or v in (sympy.true, sympy.false))


def norm(v):
    """sympy integers / booleans that are constants become Python values."""
    if isinstance(v, sympy.Basic):
        if v.is_Integer:
            return int(v)
        if v is sympy.true:
            return True
        if v is sympy.false:
            return False
        if v.is_Float or v.is_Rational:
            return float(v)
    return v


def _is_library(fn) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    f = os.path.abspath(code.co_filename)
    from pypto.errors import _is_internal
    return _is_internal(f) or f"{os.sep}site-packages{os.sep}" in f or f"{os.sep}dist-packages{os.sep}" in f \
        or code.co_filename.startswith("<")


_SYM_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: symbolic.floordiv, ast.Mod: lambda a, b: sympy.Mod(a, b), ast.Pow: operator.pow,
}
_PY_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.MatMult: operator.matmul,
}
_PY_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_SYM_CMP = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge,
            ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne}


# --------------------------------------------------------------------------- the parser
class Parser:
    def __init__(self, fn, kernel_name: str, bindings: dict, *, machine, consts: dict | None = None,
                 tiling_key=None, pipeline=None, has_cube: bool | None = None):
        self.fn = fn
        self.kernel_name = kernel_name
        self.bindings = bindings
        self.machine = machine
        self.consts = consts or {}
        self.tiling_key = tiling_key
        self.pipeline = pipeline
        self.sections: dict = {}
        self.section: SectionBuilder | None = None
        self.slots: list = []
        self.groups: list = []
        self.workspaces: list = []
        self.cursors: dict = {}           # (group uid, core) -> Cursor
        self.valid_facts: dict = {}       # slot uid -> valid shape the slot currently holds
        self.written_slots: set = set()   # slots an op has written (a loop's probe reads this)
        self.loop_ranges: dict = {}       # loop var -> (lo, hi) inclusive, for proving tails full
        self.ws_uses = 0
        self.ws_acquired: list = []       # every workspace slot acquisition, in parse order (see loops._period)
        self.manual_sync = False
        self.manual_sync_span: Span | None = None
        self.var_names: set = set()
        self._alive: list = []
        self.loop_src: dict = {}          # id(For) -> id of its `for` statement in the source
        self.copy_of: dict = {}           # id(stmt) -> ("copy", u): the unrolled loop-body copy it belongs to
        self.name_hint: str | None = None  # the name being assigned (names tiles in the IR)
        self.marked_loops: list = []      # Block IR text of each pipelined loop as marked for the shared pass
        self.stage_slots = None           # pipeline_marks.StageSlots while a pipelined loop's body is parsed
        self.source = function_source(fn)
        self.has_cube = has_cube if has_cube is not None else _mentions(self.source.tree, "section_cube")

    # ------------------------------------------------------------------ entry
    def parse(self):
        closure = _closure_of(self.fn)
        frame = Frame(self.source, self.fn.__globals__, closure, dict(self.bindings))
        try:
            self.exec_body(self.source.tree.body, frame)
        except _Return as r:
            if r.value is not None:
                raise ParseError("a kernel returns nothing: results are written into its tensor arguments",
                                 self.source.span(self.source.tree)) from None
        if not self.sections:
            raise ParseError(f"kernel {self.kernel_name} has no section: put its body in "
                             "`with pl.section_vector():` or `with pl.section_cube():`",
                             self.source.span(self.source.tree),
                             hint="the vector core runs section_vector, the cube core section_cube")
        return self

    # ------------------------------------------------------------------ statements
    def exec_body(self, stmts, frame: Frame) -> None:
        for s in stmts:
            self.exec_stmt(s, frame)

    def exec_stmt(self, node, frame: Frame) -> None:
        handler = getattr(self, f"_stmt_{type(node).__name__}", None)
        if handler is None:
            raise ParseError(f"`{type(node).__name__}` statements are not supported in a kernel",
                             frame.span(node), hint=_UNSUPPORTED_HINTS.get(type(node).__name__))
        handler(node, frame)

    def _stmt_Expr(self, node, frame):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return                                         # docstring
        self.ev(node.value, frame)

    def _stmt_Pass(self, node, frame):
        pass

    def _stmt_Assign(self, node, frame):
        named = [t for t in node.targets if isinstance(t, ast.Name)]
        self.name_hint = named[0].id if named else None
        try:
            value = self.ev(node.value, frame)
        finally:
            self.name_hint = None
        for t in node.targets:
            self.assign(t, value, frame)

    def _stmt_AnnAssign(self, node, frame):
        if node.value is not None:
            self.assign(node.target, self.ev(node.value, frame), frame)

    def _stmt_AugAssign(self, node, frame):
        if not isinstance(node.target, ast.Name):
            raise ParseError("augmented assignment needs a plain name on the left", frame.span(node.target))
        cur = self.lookup(node.target.id, node.target, frame)
        value = self.binop(type(node.op), cur, self.ev(node.value, frame), node, frame)
        self.assign(node.target, value, frame)

    def _stmt_FunctionDef(self, node, frame):
        frame.env[node.name] = LocalFunction(node, frame)

    def _stmt_Return(self, node, frame):
        if frame.rt_depth:
            raise ParseError("`return` inside a pl.range loop or a run-time `if` cannot be compiled",
                             frame.span(node), hint="return at the end of the helper, outside run-time control flow")
        raise _Return(self.ev(node.value, frame) if node.value is not None else None)

    def _stmt_Assert(self, node, frame):
        cond = self.ev(node.test, frame)
        if is_runtime(cond):
            raise ParseError("assert needs a compile-time condition", frame.span(node.test))
        if not cond:
            msg = self.ev(node.msg, frame) if node.msg is not None else "assertion failed"
            raise ParseError(str(msg), frame.span(node.test))

    def _stmt_If(self, node, frame):
        cond = norm(self.ev(node.test, frame))
        if not is_runtime(cond):
            self.exec_body(node.body if cond else node.orelse, frame)
            return
        sec = self.require_section(frame, node, "a run-time `if`")
        if not isinstance(cond, sympy.logic.boolalg.Boolean):
            cond = sympy.Ne(cond, 0)
        before = self.state()
        env_before = dict(frame.env)
        frame.rt_depth += 1
        try:
            sec.push()
            self.exec_body(node.body, frame)
            then_body = sec.pop()
            after_then, env_then = self.state(), frame.env
            self.restore(before)
            frame.env = dict(env_before)
            sec.push()
            self.exec_body(node.orelse, frame)
            else_body = sec.pop()
            after_else, env_else = self.state(), frame.env
        finally:
            frame.rt_depth -= 1
        self.merge_states(after_then, after_else, cond)
        frame.env = _merge_env(env_before, env_then, env_else, cond, frame.span(node).line)
        sec.emit(If(cond, then_body, else_body, loc=frame.span(node).loc))

    def _stmt_With(self, node, frame):
        from .control import SectionMarker, StageMarker
        if len(node.items) != 1 or node.items[0].optional_vars is not None:
            raise ParseError("use `with pl.section_vector():`, `with pl.section_cube():` or `with pl.stage(k):`",
                             frame.span(node))
        marker = self.ev(node.items[0].context_expr, frame)
        if isinstance(marker, SectionMarker):
            self.enter_section(marker, node, frame)
        elif isinstance(marker, StageMarker):
            self.exec_body(node.body, frame)
        else:
            raise ParseError("`with` in a kernel takes pl.section_vector(), pl.section_cube() or pl.stage(k)",
                             frame.span(node.items[0].context_expr))

    def enter_section(self, marker, node, frame):
        if self.section is not None:
            raise ParseError("sections do not nest", frame.span(node.items[0].context_expr),
                             hint="close the current section before opening another")
        sec = self.sections.get(marker.core)
        if sec is None:
            sec = self.sections[marker.core] = SectionBuilder(marker.core, self.kernel_name)
        self.section = sec
        try:
            self.exec_body(node.body, frame)
        finally:
            self.section = None

    def _stmt_For(self, node, frame):
        if node.orelse:
            raise ParseError("for/else is not supported in a kernel", frame.span(node))
        it = node.iter
        if isinstance(it, ast.Call):
            callee = self.ev(it.func, frame)
            if callee is REGISTRY.get("range"):
                from .loops import runtime_loop
                runtime_loop(self, node, frame)
                return
            if callee is builtins.range:
                args = [norm(self.ev(a, frame)) for a in it.args]
                for a, an in zip(args, it.args):
                    if is_runtime(a) or not isinstance(a, int):
                        raise ParseError("Python `range` needs compile-time int bounds (it is unrolled while "
                                         "parsing); this bound is known only at run time", frame.span(it),
                                         hint="use pl.range(...) for a loop with run-time bounds")
                values = list(range(*args))
            else:
                values = self.ev(it, frame)
        else:
            values = self.ev(it, frame)
        if is_runtime(values) or not isinstance(values, (list, tuple, range)):
            raise ParseError("a kernel loop iterates over pl.range(...), Python range(...) with compile-time "
                             "bounds, or a compile-time list", frame.span(it))
        for v in values:
            self.assign(node.target, v, frame)
            self.exec_body(node.body, frame)

    def _stmt_While(self, node, frame):
        raise ParseError("`while` loops are not supported in a kernel", frame.span(node),
                         hint="use `for i in pl.range(start, stop, step)`")

    # ------------------------------------------------------------------ names
    def assign(self, target, value, frame: Frame) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if is_runtime(value) or not isinstance(value, (list, tuple)) or len(value) != len(target.elts):
                raise ParseError("cannot unpack this value into "
                                 f"{len(target.elts)} names", frame.span(target))
            for t, v in zip(target.elts, value):
                self.assign(t, v, frame)
            return
        if not isinstance(target, ast.Name):
            raise ParseError("assign to plain names only (tiles are written by ops, not by subscripting)",
                             frame.span(target))
        name = target.id
        value = norm(value)
        if frame.loops:
            scope = frame.loops[-1]
            if name in scope.names_before and name not in scope.bound_inside and name in scope.carried:
                old = frame.env.get(name)
                if not _rebindable(old, value):
                    raise ParseError(f"'{name}' is defined before this pl.range loop and reassigned inside it: "
                                     "a value cannot be carried from one iteration to the next",
                                     frame.span(target),
                                     hint="compute it from the loop variable (e.g. k = k0 + i * step), or use a "
                                          "new name inside the loop")
            scope.bound_inside.add(name)
        frame.env[name] = value

    def lookup(self, name: str, node, frame: Frame):
        f = frame
        while f is not None:
            if name in f.env:
                v = f.env[name]
                if isinstance(v, Poison):
                    raise ParseError(f"'{name}' cannot be used here: {v.why}", frame.span(node))
                return v
            if name in f.closure:
                return f.closure[name]
            if f.parent is None and name in f.globals:
                return f.globals[name]
            f = f.parent
        if name in frame.globals:
            return frame.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        known = set(frame.env) | set(frame.closure) | set(frame.globals)
        close = difflib.get_close_matches(name, sorted(known), n=1)
        raise ParseError(f"name '{name}' is not defined", frame.span(node),
                         hint=f"did you mean '{close[0]}'?" if close else "define it before use, or pass it in")

    # ------------------------------------------------------------------ expressions
    def ev(self, node, frame: Frame):
        handler = getattr(self, f"_ev_{type(node).__name__}", None)
        if handler is None:
            raise ParseError(f"`{type(node).__name__}` expressions are not supported in a kernel", frame.span(node))
        return handler(node, frame)

    def _ev_Constant(self, node, frame):
        return node.value

    def _ev_Name(self, node, frame):
        return self.lookup(node.id, node, frame)

    def _ev_Tuple(self, node, frame):
        return tuple(self._elts(node.elts, frame))

    def _ev_List(self, node, frame):
        return list(self._elts(node.elts, frame))

    def _elts(self, elts, frame):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = self.ev(e.value, frame)
                if is_runtime(v) or not isinstance(v, (list, tuple)):
                    raise ParseError("only compile-time sequences can be unpacked with *", frame.span(e))
                out.extend(v)
            else:
                out.append(self.ev(e, frame))
        return out

    def _ev_Dict(self, node, frame):
        return {self.ev(k, frame): self.ev(v, frame) for k, v in zip(node.keys, node.values)}

    def _ev_ListComp(self, node, frame):
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise ParseError("list comprehensions in a kernel take one `for` clause", frame.span(node))
        gen = node.generators[0]
        seq = self.ev(gen.iter, frame)
        if is_runtime(seq) or not isinstance(seq, (list, tuple, range)):
            raise ParseError("a comprehension iterates over compile-time values", frame.span(gen.iter))
        out = []
        saved = dict(frame.env)
        try:
            for v in seq:
                self.assign(gen.target, v, frame)
                if all(self._truth(self.ev(c, frame), c, frame) for c in gen.ifs):
                    out.append(self.ev(node.elt, frame))
        finally:
            frame.env = saved
        return out

    _ev_GeneratorExp = _ev_ListComp

    def _truth(self, v, node, frame):
        v = norm(v)
        if is_runtime(v):
            raise ParseError("this condition must be known at compile time", frame.span(node))
        return bool(v)

    def _ev_Attribute(self, node, frame):
        obj = self.ev(node.value, frame)
        from .attributes import attribute
        return attribute(self, obj, node.attr, node, frame)

    def _ev_Subscript(self, node, frame):
        obj = self.ev(node.value, frame)
        idx = norm(self.ev(node.slice, frame))
        from .attributes import subscript
        return subscript(self, obj, idx, node, frame)

    def _ev_Slice(self, node, frame):
        parts = [norm(self.ev(p, frame)) if p is not None else None for p in (node.lower, node.upper, node.step)]
        if any(is_runtime(p) for p in parts):
            raise ParseError("slices need compile-time bounds", frame.span(node))
        return slice(*parts)

    def _ev_UnaryOp(self, node, frame):
        v = norm(self.ev(node.operand, frame))
        if isinstance(node.op, ast.Not):
            return sympy.Not(v) if is_runtime(v) else (not v)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if is_runtime(v):
            raise ParseError("`~` is not defined on run-time scalars", frame.span(node))
        return ~v

    def _ev_BinOp(self, node, frame):
        return self.binop(type(node.op), self.ev(node.left, frame), self.ev(node.right, frame), node, frame)

    def binop(self, op, a, b, node, frame):
        a, b = norm(a), norm(b)
        for v in (a, b):
            if isinstance(v, (TileValue, TileGroup, TensorValue)):
                raise ParseError("tiles and tensors have no operators in a kernel: use destination-first ops "
                                 "such as pl.add(dst, a, b)", frame.span(node))
        if is_runtime(a) or is_runtime(b):
            if op is ast.Div:
                raise ParseError("`/` on run-time scalars would be true division; sizes and indices use `//`",
                                 frame.span(node), hint="write a // b (floor) or pl.ceil_div(a, b)")
            fn = _SYM_BINOPS.get(op)
            if fn is None:
                raise ParseError(f"operator {op.__name__} is not defined on run-time scalars", frame.span(node))
            return norm(fn(sympy.sympify(a), sympy.sympify(b)))
        try:
            return _PY_BINOPS[op](a, b)
        except KeyError:
            raise ParseError(f"operator {op.__name__} is not supported", frame.span(node)) from None
        except Exception as e:
            raise ParseError(f"cannot evaluate this expression at compile time: {e}", frame.span(node)) from None

    def _ev_BoolOp(self, node, frame):
        vals = []
        is_and = isinstance(node.op, ast.And)
        for v_node in node.values:
            v = norm(self.ev(v_node, frame))
            if not is_runtime(v):
                if is_and and not v:
                    return False if not vals else sympy.false
                if not is_and and v:
                    return True if not vals else sympy.true
                continue
            vals.append(v)
        if not vals:
            return is_and
        return sympy.And(*vals) if is_and else sympy.Or(*vals)

    def _ev_Compare(self, node, frame):
        left = norm(self.ev(node.left, frame))
        terms = []
        for op, rnode in zip(node.ops, node.comparators):
            right = norm(self.ev(rnode, frame))
            if is_runtime(left) or is_runtime(right):
                fn = _SYM_CMP.get(type(op))
                if fn is None:
                    raise ParseError(f"`{type(op).__name__}` cannot compare run-time scalars", frame.span(node))
                terms.append(fn(left, right))
            else:
                r = _PY_CMP[type(op)](left, right)
                if not r:
                    return False
            left = right
        if not terms:
            return True
        return norm(sympy.And(*terms)) if len(terms) > 1 else norm(terms[0])

    def _ev_IfExp(self, node, frame):
        cond = norm(self.ev(node.test, frame))
        if not is_runtime(cond):
            return self.ev(node.body if cond else node.orelse, frame)
        a, b = norm(self.ev(node.body, frame)), norm(self.ev(node.orelse, frame))
        if not all(isinstance(x, (int, sympy.Expr)) for x in (a, b)):
            raise ParseError("a run-time conditional expression selects between scalars only", frame.span(node))
        return sympy.Piecewise((a, cond), (b, True))

    def _ev_JoinedStr(self, node, frame):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                parts.append(format(self.ev(v.value, frame), self.ev(v.format_spec, frame) if v.format_spec else ""))
        return "".join(parts)

    def _ev_Call(self, node, frame):
        callee = self.ev(node.func, frame)
        args, arg_nodes = [], []
        for a in node.args:
            if isinstance(a, ast.Starred):
                seq = self.ev(a.value, frame)
                if is_runtime(seq) or not isinstance(seq, (list, tuple)):
                    raise ParseError("only compile-time sequences can be unpacked with *", frame.span(a))
                args.extend(seq)
                arg_nodes.extend([a] * len(seq))
            else:
                args.append(self.ev(a, frame))
                arg_nodes.append(a)
        kwargs, kw_nodes = {}, {}
        for k in node.keywords:
            if k.arg is None:
                d = self.ev(k.value, frame)
                if not isinstance(d, dict):
                    raise ParseError("** needs a compile-time dict", frame.span(k.value))
                kwargs.update(d)
                kw_nodes.update({key: k.value for key in d})
            else:
                kwargs[k.arg] = self.ev(k.value, frame)
                kw_nodes[k.arg] = k.value
        return self.call(callee, args, kwargs, node, arg_nodes, kw_nodes, frame)

    def call(self, callee, args, kwargs, node, arg_nodes, kw_nodes, frame):
        if isinstance(callee, DslFunction):
            c = Call(self, frame, node, args, kwargs, arg_nodes, kw_nodes, f"pl.{callee.name}")
            return callee.handler(self, c)
        if isinstance(callee, Intrinsic):
            c = Call(self, frame, node, args, kwargs, arg_nodes, kw_nodes, callee.name)
            return callee.fn(self, c, callee.obj)
        if isinstance(callee, LocalFunction):
            return self.inline(callee.node, callee.frame.source, callee.frame.globals, {}, args, kwargs, node, frame,
                               parent=callee.frame)
        if isinstance(callee, types.FunctionType) and not _is_library(callee):
            src = function_source(callee)
            return self.inline(src.tree, src, callee.__globals__, _closure_of(callee), args, kwargs, node, frame,
                               fn=callee)
        if isinstance(callee, types.MethodType) and isinstance(callee.__func__, types.FunctionType) \
                and not _is_library(callee.__func__):
            src = function_source(callee.__func__)
            return self.inline(src.tree, src, callee.__func__.__globals__, _closure_of(callee.__func__),
                               [callee.__self__] + args, kwargs, node, frame, fn=callee.__func__)
        return self.call_python(callee, args, kwargs, node, frame)

    def call_python(self, callee, args, kwargs, node, frame):
        symbolic_builtin = _SYMBOLIC_BUILTINS.get(callee) if _hashable(callee) else None
        if symbolic_builtin is not None and any(is_runtime(norm(a)) for a in args):
            return norm(symbolic_builtin(*[norm(a) for a in args]))
        for a in list(args) + list(kwargs.values()):
            if is_runtime(norm(a)):
                raise ParseError(f"{getattr(callee, '__name__', callee)!s} is evaluated at compile time and cannot "
                                 "take a run-time value", frame.span(node))
        if not callable(callee):
            raise ParseError(f"{type(callee).__name__} object is not callable", frame.span(node.func))
        try:
            return callee(*[norm(a) for a in args], **{k: norm(v) for k, v in kwargs.items()})
        except PyptoError as e:
            if getattr(e, "span", None) is None:
                raise ParseError(e.message, frame.span(node), hint=e.hint) from None
            raise
        except Exception as e:
            raise ParseError(f"{getattr(callee, '__name__', callee)!s}(...) failed at compile time: {e}",
                             frame.span(node)) from None

    def inline(self, fdef, source, fn_globals, closure, args, kwargs, node, frame, fn=None, parent=None):
        env = self._bind_params(fdef, args, kwargs, node, frame, fn)
        callee_frame = Frame(source, fn_globals, closure, env, parent)
        depth = getattr(self, "_inline_depth", 0)
        if depth > 32:
            raise ParseError("helper functions nest too deeply (recursion?)", frame.span(node))
        self._inline_depth = depth + 1
        try:
            self.exec_body(fdef.body, callee_frame)
        except _Return as r:
            return r.value
        except ParseError as e:
            if fn is not None and _only_plain_data(args, kwargs) and e.message.endswith("not supported in a kernel"):
                return self.call_python(fn, args, kwargs, node, frame)
            raise
        finally:
            self._inline_depth = depth
        return None

    def _bind_params(self, fdef, args, kwargs, node, frame, fn):
        a = fdef.args
        params = [p.arg for p in a.posonlyargs + a.args]
        defaults_nodes = a.defaults
        env: dict = {}
        if len(args) > len(params) and a.vararg is None:
            raise ParseError(f"{fdef.name}() takes {len(params)} positional arguments, found {len(args)}",
                             frame.span(node))
        for p, v in zip(params, args):
            env[p] = v
        if a.vararg is not None:
            env[a.vararg.arg] = tuple(args[len(params):])
        for k, v in kwargs.items():
            if k in params or k in [p.arg for p in a.kwonlyargs]:
                if k in env:
                    raise ParseError(f"{fdef.name}() got argument '{k}' twice", frame.span(node))
                env[k] = v
            elif a.kwarg is not None:
                env.setdefault(a.kwarg.arg, {})[k] = v
            else:
                raise ParseError(f"{fdef.name}() has no argument '{k}'", frame.span(node))
        defaults = _defaults(fn, fdef, frame, self)
        for p in params + [p.arg for p in a.kwonlyargs]:
            if p not in env:
                if p in defaults:
                    env[p] = defaults[p]
                else:
                    raise ParseError(f"{fdef.name}() is missing argument '{p}'", frame.span(node))
        return env

    # ------------------------------------------------------------------ sections and state
    def require_section(self, frame, node, what: str) -> SectionBuilder:
        if self.section is None:
            raise ParseError(f"{what} must be inside `with pl.section_vector():` or `with pl.section_cube():`",
                             frame.span(node))
        return self.section

    def cursor(self, group: TileGroup) -> Cursor:
        core = self.section.core if self.section is not None else None
        return self.cursors.setdefault((group.uid, core), Cursor())

    def state(self):
        """What a run-time branch or a probe may change: cursors and valid facts (names are per frame)."""
        return ({k: Cursor(c.pos, c.known) for k, c in self.cursors.items()}, dict(self.valid_facts))

    def restore(self, st) -> None:
        self.cursors = {k: Cursor(c.pos, c.known) for k, c in st[0].items()}
        self.valid_facts = dict(st[1])

    def merge_states(self, a, b, cond) -> None:
        """After a run-time if/else: keep what both branches agree on."""
        cursors = {}
        for k in set(a[0]) | set(b[0]):
            ca, cb = a[0].get(k, Cursor()), b[0].get(k, Cursor())
            cursors[k] = Cursor(ca.pos, ca.known and cb.known and ca.pos == cb.pos)
        self.cursors = cursors
        self.valid_facts = {k: v for k, v in a[1].items() if b[1].get(k) is not None and
                            tuple(map(str, b[1][k])) == tuple(map(str, v))}

    def valid_of(self, tile: TileValue) -> tuple:
        """The valid shape an op reads from ``tile``: the view's own, else what the slot last received."""
        if tile.valid is not None:
            return tile.valid
        fact = self.valid_facts.get(tile.slot.uid)
        return fact if fact is not None else tile.valid_shape

    def set_valid_fact(self, tile: TileValue, valid) -> None:
        self.written_slots.add(tile.slot.uid)
        if valid is None or tuple(map(str, valid)) == tuple(map(str, tile.valid_shape)):
            self.valid_facts.pop(tile.slot.uid, None)
        else:
            self.valid_facts[tile.slot.uid] = tuple(valid)

    def remember(self, stmt) -> None:
        """Keep ``stmt`` alive while the parser lives: maps keyed by id() must never see a reused id."""
        self._alive.append(stmt)

    def new_loop_var(self, name: str) -> sympy.Symbol:
        base, i = name, 1
        while name in self.var_names or name in _RESERVED:
            name = f"{base}_{i}"
            i += 1
        self.var_names.add(name)
        return symbolic.index_symbol(name)


# --------------------------------------------------------------------------- small helpers
_RESERVED = {"block_idx", "block_num", "subblock_idx"}
_SYMBOLIC_BUILTINS = {min: lambda *a: sympy.Min(*a), max: lambda *a: sympy.Max(*a), abs: sympy.Abs,
                      int: lambda a: a}
_UNSUPPORTED_HINTS = {"Try": "kernels have no exceptions", "Import": "import modules at the top of the file",
                      "ImportFrom": "import modules at the top of the file",
                      "Break": "loops run their full trip count; use the loop bounds",
                      "Continue": "use a run-time `if` around the rest of the body",
                      "Global": "use closure constants or arguments", "Nonlocal": "use arguments"}


def _merge_env(before: dict, a: dict, b: dict, cond, line: int) -> dict:
    """Names after a run-time if/else: equal values stay, scalars become a Piecewise, the rest cannot
    be used after the if."""
    out = {}
    for name in set(a) | set(b):
        va, vb = a.get(name, _MISSING), b.get(name, _MISSING)
        if va is vb or (not is_runtime(va) and not is_runtime(vb) and _same(va, vb)):
            out[name] = va
        elif va is _MISSING or vb is _MISSING:
            out[name] = Poison(f"it is assigned in only one branch of the run-time `if` at line {line}")
        elif all(isinstance(v, (int, sympy.Expr)) and not isinstance(v, bool) for v in (va, vb)):
            out[name] = norm(sympy.Piecewise((va, cond), (vb, True)))
        else:
            out[name] = Poison(f"the branches of the run-time `if` at line {line} assign it different values")
    return {k: out[k] for k in sorted(out, key=lambda k: (k not in before, k))}


_MISSING = object()


def _same(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:
        return False


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def _rebindable(old, new) -> bool:
    if isinstance(old, (TileValue, TensorValue)) and isinstance(new, (TileValue, TensorValue)):
        return True
    if isinstance(old, Poison):
        return True
    if not is_runtime(old) and not is_runtime(new):
        try:
            return bool(old == new) or (isinstance(old, (TileGroup, type)) and old is new)
        except Exception:
            return False
    return False


def _only_plain_data(args, kwargs) -> bool:
    def plain(v):
        if isinstance(v, (list, tuple)):
            return all(plain(x) for x in v)
        return isinstance(v, (int, float, str, bool, type(None)))
    return all(plain(v) for v in list(args) + list(kwargs.values()))


def _closure_of(fn) -> dict:
    code = fn.__code__
    out = {}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def _defaults(fn, fdef, frame, parser) -> dict:
    if fn is not None:
        import inspect
        sig = inspect.signature(fn)
        return {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
    out = {}
    a = fdef.args
    pos = a.posonlyargs + a.args
    for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
        out[p.arg] = parser.ev(d, frame)
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            out[p.arg] = parser.ev(d, frame)
    return out


def _mentions(tree, attr: str) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == attr) or (isinstance(n, ast.Name) and n.id == attr)
               for n in ast.walk(tree))


def poison_loop_locals(frame: Frame, scope: LoopScope, var, span: Span) -> None:
    """Names bound inside a finished loop whose values depend on its variable cannot be used after it."""
    for name in scope.bound_inside:
        v = frame.env.get(name)
        syms = set()
        if isinstance(v, sympy.Basic):
            syms = v.free_symbols
        elif isinstance(v, TileValue) and v.valid is not None:
            syms = symbolic.free_symbols(*v.valid)
        if var in syms:
            frame.env[name] = Poison(f"it was computed from the loop variable of the pl.range loop at line "
                                     f"{span.line} and is not defined after that loop")


__all__ = ["Parser", "Call", "Frame", "Intrinsic", "is_runtime", "norm", "MAX_UNROLL"]

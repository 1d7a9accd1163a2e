"""Python conditions on run-time values in a ``@pypto.jit`` function: its body is rewritten once
(``traceable``) so that they reach frontend/control.py instead of Python's own truth test.

Why a rewrite: ``i == 0`` on a sympy loop index is Python's structural equality (False: the else side
would silently run for every iteration) and ``bool(i < 2)`` is sympy's "cannot determine truth
value"; Python's ``if`` runs one side only, and a run-time branch needs both traced. So, in the
function's own body:
  * comparisons ``a op b`` (==, !=, <, <=, >, >=, chained) become ``control.compare``: Python's answer
    on plain values, a sympy relation on symbolic scalars (decided over the loops' ranges when it can);
  * ``and`` / ``or`` / ``not`` become ``control.bool_and`` / ``bool_or`` / ``bool_not`` (short-circuit kept);
  * ``if test: A else: B`` becomes two nested functions over the names A and B bind and
    ``control.if_stmt(test, then, else, current values)``, which runs one side when the test is decided
    at trace time and traces both as a branch of the control program when it is not;
  * ``a if test else b`` becomes ``control.if_exp(test, lambda: a, lambda: b)``;
  * ``while`` / ``assert`` tests and the tests of an ``if`` whose sides hold ``return`` / ``break`` /
    ``continue`` / ``yield`` / ``global`` / ``nonlocal`` become ``control.static_bool``: decided at trace
    time or an error at the user's line.
Helpers the jit function calls are not rewritten (their conditions on run-time values must use
``pypto.cond``); a function whose source Python cannot show (made by ``exec``) is traced as written,
with sympy's truth-value error still turned into a pypto error at the user's line.
Line numbers and file stay the user's (errors name them); closures and globals stay the function's own.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
import weakref

from ..errors import PyptoError, raising_user_location
from . import control

_HELPER = "_pypto_ctl_"
_CMP_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _call(attr, args, like):
    node = ast.Call(ast.Attribute(ast.Name(_HELPER, ast.Load()), attr, ast.Load()), args, [])
    return ast.copy_location(node, like)


def _lambda(body, like):
    return ast.copy_location(ast.Lambda(ast.arguments([], [], None, [], [], None, []), body), like)


class _Escapes(ast.NodeVisitor):
    """Whether statements leave their block other than by falling through (return, break ...)."""

    def __init__(self):
        self.found = False
        self.loop_depth = 0

    def visit_Return(self, node):
        self.found = True

    def visit_Yield(self, node):
        self.found = True

    visit_YieldFrom = visit_Await = visit_Global = visit_Nonlocal = visit_Yield

    def visit_Break(self, node):
        if self.loop_depth == 0:
            self.found = True

    visit_Continue = visit_Break

    def _loop(self, node):
        self.loop_depth += 1
        self.generic_visit(node)
        self.loop_depth -= 1

    visit_For = visit_While = visit_AsyncFor = _loop

    def visit_FunctionDef(self, node):
        pass                                   # a nested function's return is its own

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


def _escapes(stmts) -> bool:
    v = _Escapes()
    for s in stmts:
        v.visit(s)
    return v.found


class _Bound(ast.NodeVisitor):
    """Names a block of statements binds (in order of first binding)."""

    def __init__(self):
        self.names: list = []

    def _add(self, name):
        if name not in self.names:
            self.names.append(name)

    def visit_Name(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._add(node.id)

    def visit_FunctionDef(self, node):
        self._add(node.name)                   # its body binds names of its own

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node):
        pass

    def visit_ListComp(self, node):
        pass

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_Import(self, node):
        for a in node.names:
            self._add((a.asname or a.name).split(".")[0])

    visit_ImportFrom = visit_Import


def _bound(stmts) -> list:
    v = _Bound()
    for s in stmts:
        v.visit(s)
    return v.names


class _Rewrite(ast.NodeTransformer):
    def __init__(self):
        self.count = 0

    # ---------------------------------------------------------------- expressions
    def visit_Compare(self, node):
        self.generic_visit(node)
        if not all(type(op) in _CMP_OPS for op in node.ops):
            return node                        # is / in: Python's own
        ops = ast.Tuple([ast.Constant(_CMP_OPS[type(op)]) for op in node.ops], ast.Load())
        return _call("compare", [ops, node.left, *node.comparators], node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        name = "bool_and" if isinstance(node.op, ast.And) else "bool_or"
        return _call(name, [_lambda(v, v) for v in node.values], node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("bool_not", [node.operand], node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return _call("if_exp", [node.test, _lambda(node.body, node.body), _lambda(node.orelse, node.orelse)], node)

    # ---------------------------------------------------------------- statements
    def _static(self, test, what):
        return _call("static_bool", [test, ast.Constant(what)], test)

    def visit_While(self, node):
        self.generic_visit(node)
        node.test = self._static(node.test, "while condition")
        return node

    def visit_Assert(self, node):
        self.generic_visit(node)
        node.test = self._static(node.test, "assert condition")
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        return node

    def visit_If(self, node):
        self.generic_visit(node)
        if _escapes(node.body) or _escapes(node.orelse):
            node.test = self._static(node.test, "if condition (its sides return, break or continue)")
            return node
        self.count += 1
        k = self.count
        names = _bound(node.body) + [n for n in _bound(node.orelse) if n not in _bound(node.body)]
        names = [n for n in names if n != _HELPER]
        args = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])

        def side(label, stmts):
            ret = ast.Return(ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()))
            fn = ast.FunctionDef(f"_pypto_{label}_{k}", args, list(stmts or [ast.Pass()]) + [ret], [], None)
            for s in ast.walk(fn):
                if not hasattr(s, "lineno"):
                    ast.copy_location(s, node)
            return fn
        then_fn, else_fn = side("then", node.body), side("else", node.orelse)
        current = _call("bound", [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                  ast.Tuple([ast.Constant(n) for n in names], ast.Load())], node.test)
        # located at the test (not the whole statement): an error names the line of the `if`
        call = _call("if_stmt", [node.test, ast.Name(then_fn.name, ast.Load()), ast.Name(else_fn.name, ast.Load()),
                                 current], node.test)
        target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        out = [then_fn, else_fn, ast.copy_location(ast.Assign([target], call), node.test)]
        for s in out:
            ast.fix_missing_locations(s)
        return out


def _rewritten(fn):
    """The function with its conditions rewritten, or None when its source is not available."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != fn.__name__:
        return None                            # a lambda, or a source Python located imprecisely
    fdef.decorator_list = []
    rw = _Rewrite()
    fdef = rw.visit(fdef)
    code = fn.__code__
    freevars = list(code.co_freevars)
    # a factory whose locals are the function's free variables (so the new code closes over the same
    # names) and the helper module
    factory = ast.FunctionDef("_pypto_factory_", ast.arguments([], [ast.arg(n) for n in [*freevars, _HELPER]],
                                                               None, [], [], None, []),
                              [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], [], None)
    module = ast.Module([factory], [])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, code.co_firstlineno - 1)
    compiled = compile(module, code.co_filename, "exec")
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new_code = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    cells = dict(zip(freevars, fn.__closure__ or ()))
    cells[_HELPER] = types.CellType(control)
    try:
        closure = tuple(cells[n] for n in new_code.co_freevars)
    except KeyError:
        return None
    new = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, closure or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(getattr(fn, "__dict__", {}))
    return new


def traceable(fn):
    """``fn`` as the jit traces it: conditions rewritten (module doc), sympy's truth-value error at the
    user's line. Built once per function."""
    try:
        hit = _cache.get(fn)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    inner = _rewritten(fn) if isinstance(fn, types.FunctionType) else None
    inner = inner or fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except TypeError as e:
            if "truth value of Relational" not in str(e) and "truth value" not in str(e):
                raise
            raise PyptoError("a condition on a run-time value (a loop index, size or data scalar) was tested by "
                             "Python where pypto cannot branch on it", loc=raising_user_location(e),
                             hint="write the `if` in the @pypto.jit function itself, or use "
                                  "pypto.cond(pred, true_fn, false_fn)") from None
    try:
        _cache[fn] = call
    except TypeError:
        pass
    return call


__all__ = ["traceable"]

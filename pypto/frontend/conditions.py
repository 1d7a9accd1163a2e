"""Python conditions on run-time values in a ``@pypto.jit`` function: its body is rewritten once
(``traceable``) so that they reach frontend/control.py instead of Python's own truth test.

Why a rewrite: ``i == 0`` on a sympy loop index is Python's structural equality (False: the else side
would silently run for every iteration) and ``bool(i < 2)`` is sympy's "cannot determine truth
value"; Python's ``if`` runs one side only, and a run-time branch needs both traced. So, in the
function's own body:
  * comparisons ``a op b`` (==, !=, <, <=, >, >=) become ``control.compare``: Python's answer on plain
    values (and on None, strings, tensors), a sympy relation when both are numbers and one a symbolic
    scalar (decided over the loops' ranges when it can); a chain ``a < b < c`` ``control.compare_chain``
    (each operand evaluated once, none after the first false link); ``a in b`` / ``not in``
    ``control.contains`` (``==`` over a tuple / list / set / range holding a symbolic scalar);
  * ``and`` / ``or`` / ``not`` become ``control.bool_and`` / ``bool_or`` / ``bool_not`` (short-circuit
    and Python's value kept: ``n or 1`` is n; the first operand is evaluated in place, so a walrus in it
    binds the function's name; one past the first keeps Python's own ``and`` / ``or``);
  * ``if test: A else: B`` becomes two nested functions over the names A and B bind and
    ``control.if_stmt(test, then, else, current values)``, which runs one side when the test is decided
    at trace time and traces both as a branch of the control program when it is not;
  * ``a if test else b`` becomes ``control.if_exp(test, lambda: a, lambda: b)``;
  * ``while`` / ``assert`` tests and the tests of an ``if`` whose sides hold ``return`` / ``break`` /
    ``continue`` / ``yield`` / ``global`` / ``nonlocal`` become ``control.static_bool``: decided at trace
    time or an error at the user's line. So do those of an ``if`` whose sides could not move into nested
    functions without changing the program (``_Scope.unsafe``: they bind a name the function declares
    ``global`` or that a nested function / lambda defined elsewhere in it reads, or they ``del`` a name),
    and of ``a if c else b`` with a walrus in a side. In a class body (whose names nested functions
    and lambdas do not see) ``if`` / ``a if c else b`` tests are static_bool and and / or / chains
    Python's own.
  * a call ``f(...)`` becomes ``call(f, ...)``: a Python function (or method) of the user's own files is
    called rewritten the same way, so helpers branch like the jit function (pypto's, torch's and other
    libraries' functions run as they are).
A function whose source Python cannot show (made by ``exec``, a lambda), a decorator's wrapper
(``functools.wraps``: inspect would show the wrapped function's source) or one that uses ``super()`` runs as
written; there Python's own tests of a run-time value (``i == 0``, ``n in (1, 2)``, ``if n:``, sympy's
relations) are decided over the loops' ranges or are a pypto error at the user's line (frontend/truth.py),
as are ``bool()`` / ``any()`` / ``sorted()`` of one anywhere.
Line numbers, columns and file stay the user's (errors and tracebacks name them: each node the rewrite
makes is located at the user's node it stands for, ``_at``); closures and globals stay the function's own.
"""
from __future__ import annotations

import ast
import functools
import inspect
import os
import types
import weakref

from ..errors import PyptoError, _is_internal, raising_user_location
from . import control

_HELPER = "_pypto_ctl_"
_CMP_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_helpers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# calls left as they are: they read the calling frame
_DIRECT = ("super", "locals", "globals", "vars", "eval", "exec", "dir")


def _at(node, like):
    """``node`` and every node in it made here (without a location) at ``like``'s source location; the
    user's nodes in it keep their own. Every generated node is located when it is made: a node left
    without one would take that of whatever statement encloses it (an ``if`` made into side functions
    spans lines), and CPython places a method call at the end line of its callee's attribute, so
    ``_pypto_ctl_.call(...)`` inside a side named the last line of the ``if``."""
    stack = [node]
    while stack:                               # not into a located node: the user's (or located already)
        x = stack.pop()
        if "lineno" in x._attributes and not hasattr(x, "lineno"):
            ast.copy_location(x, like)
            stack.extend(ast.iter_child_nodes(x))
        elif x is node or "lineno" not in x._attributes:
            stack.extend(ast.iter_child_nodes(x))
    return node


def _helper(attr, like):
    """``_pypto_ctl_.attr``, located at the start of ``like`` (zero width): the call it makes is at
    ``like``'s first line, where Python would place the user's own expression."""
    node = ast.Attribute(ast.Name(_HELPER, ast.Load()), attr, ast.Load())
    for x in (node, node.value):
        x.lineno = x.end_lineno = like.lineno
        x.col_offset = x.end_col_offset = like.col_offset
    return node


def _call(attr, args, like):
    return _at(ast.Call(_helper(attr, like), args, []), like)


def _lambda(body, like):
    return _at(ast.Lambda(ast.arguments([], [], None, [], [], None, []), body), like)


def _eager(value, like):
    """A thunk of ``value`` evaluated where it stands (a default argument): a walrus in it binds the
    enclosing function's name, as in the original."""
    return _at(ast.Lambda(ast.arguments([], [ast.arg("_v")], None, [], [], None, [value]),
                          ast.Name("_v", ast.Load())), like)


def _params(names):
    """A side function's parameters: new nodes for each side (a node shared by two sides would have its
    line moved twice by ``ast.increment_lineno``)."""
    return ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])


def _binds(node) -> bool:
    """Whether an expression binds a name of its scope (a walrus), so it cannot move into a lambda."""
    return any(isinstance(x, ast.NamedExpr) for x in ast.walk(node))


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


def _escapes_but_return(stmts) -> bool:
    """Whether statements leave their block other than by falling through or returning."""
    v = _Escapes()
    v.visit_Return = lambda node: None
    for st in stmts:
        v.visit(st)
    return v.found


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
        for x in ast.walk(node):               # a comprehension's own names are its own, a walrus's are not
            if isinstance(x, ast.NamedExpr):
                self._add(x.target.id)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_MatchAs(self, node):             # match-statement captures: case [a, *rest] / {**kw} / x as y
        if node.name:
            self._add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node):
        if node.name:
            self._add(node.name)

    def visit_MatchMapping(self, node):
        if node.rest:
            self._add(node.rest)
        self.generic_visit(node)

    def visit_Import(self, node):
        for a in node.names:
            self._add((a.asname or a.name).split(".")[0])

    visit_ImportFrom = visit_Import


def _bound(stmts) -> list:
    v = _Bound()
    for s in stmts:
        v.visit(s)
    return v.names


class _Scope:
    """What moving statements of a user function into nested side functions would break: names it
    declares ``global`` (a side would bind its own), and the names each nested function or lambda of it
    reads (a closure reads the function's variable, not a side's copy)."""

    def __init__(self, fdef):
        self.globals, self.closures = set(), []
        stack = list(fdef.body)
        while stack:
            x = stack.pop()
            if isinstance(x, ast.Global):
                self.globals.update(x.names)
            if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                reads = {n.id for n in ast.walk(x) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                self.closures.append((x.lineno, x.end_lineno, reads))
                continue
            stack.extend(ast.iter_child_nodes(x))

    def unsafe(self, names, first: int, last: int, stmts) -> bool:
        """Whether statements on lines first..last binding ``names`` cannot move into a side function:
        a name is global, or read by a closure defined outside those lines, or the statements ``del``."""
        if self.globals.intersection(names):
            return True
        if any(not first <= a <= last and reads.intersection(names) for a, _, reads in self.closures):
            return True
        return any(isinstance(x, ast.Delete) for st in stmts for x in _walk_scope(st))


def _walk_scope(node):
    """The nodes of a statement that belong to its function's scope (not nested functions' bodies)."""
    stack = [node]
    while stack:
        x = stack.pop()
        yield x
        if not isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) or x is node:
            stack.extend(ast.iter_child_nodes(x))


class _Rewrite(ast.NodeTransformer):
    def __init__(self):
        self.count = 0
        self.scopes: list = []
        self.in_class = [False]                # a class body: its names are not visible to nested functions

    def visit_ClassDef(self, node):
        self.in_class.append(True)
        try:
            self.generic_visit(node)
        finally:
            self.in_class.pop()
        return node

    # ---------------------------------------------------------------- expressions
    def visit_Compare(self, node):
        self.generic_visit(node)
        if not all(type(op) in _CMP_OPS for op in node.ops):
            if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                return _call("contains", [node.left, node.comparators[0],
                                          ast.Constant(isinstance(node.ops[0], ast.NotIn))], node)
            return node                        # is / is not, chains with in: Python's own
        ops = ast.Tuple([ast.Constant(_CMP_OPS[type(op)]) for op in node.ops], ast.Load())
        if len(node.ops) == 1 or any(_binds(c) for c in node.comparators[1:]) or self.in_class[-1]:
            return _call("compare", [ops, node.left, *node.comparators], node)
        # a chain evaluates each operand once and stops at the first false link, as Python does
        return _call("compare_chain", [ops, node.left, _eager(node.comparators[0], node.comparators[0]),
                                       *[_lambda(c, c) for c in node.comparators[1:]]], node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if any(_binds(v) for v in node.values[1:]) or self.in_class[-1]:
            return node                        # a walrus past the first operand: Python's own
        name = "bool_and" if isinstance(node.op, ast.And) else "bool_or"
        return _call(name, [_eager(node.values[0], node.values[0]), *[_lambda(v, v) for v in node.values[1:]]],
                     node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("bool_not", [node.operand], node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _DIRECT:
            return node
        # the helper's attribute where the user's callee stands (and ends): Python places the call at
        # the callee's end line, as for the user's own ``obj.method(...)``
        helper = ast.Attribute(ast.Name(_HELPER, ast.Load()), "call", ast.Load())
        ast.copy_location(helper.value, node.func)
        return _at(ast.Call(ast.copy_location(helper, node.func), [node.func, *node.args], node.keywords), node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        if _binds(node.body) or _binds(node.orelse) or self.in_class[-1]:
            node.test = self._static(node.test, "condition of `a if c else b` (a side binds a name with :=)")
            return node
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
        user = not node.name.startswith("_pypto_")     # a side function made here shares its user scope
        if user:
            self.scopes.append(_Scope(node))
        self.in_class.append(False)
        try:
            node.body = self._fold(node.body)
            self.generic_visit(node)
        finally:
            self.in_class.pop()
            if user:
                self.scopes.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def _fold(self, stmts):
        """A function body's ``if test: ... return a`` followed by more statements, as
        ``return if_return(test, then, else)`` with the rest of the body as the else side."""
        for k, st in enumerate(stmts):
            if not (isinstance(st, ast.If) and st.body and isinstance(st.body[-1], ast.Return)):
                continue
            rest = list(st.orelse) + list(stmts[k + 1:])
            if _escapes_but_return(st.body) or _escapes_but_return(rest):
                return stmts
            moved = [st, *stmts[k + 1:]]
            if self.scopes and self.scopes[-1].unsafe(set(_bound(st.body) + _bound(rest)), st.lineno,
                                                      moved[-1].end_lineno, moved):
                return stmts
            if not rest or not isinstance(rest[-1], ast.Return):
                rest.append(ast.copy_location(ast.Return(ast.Constant(None)), st))
            self.count += 1
            n = self.count
            names = _bound(st.body) + [v for v in _bound(rest) if v not in _bound(st.body)]
            names = [v for v in names if v != _HELPER]
            sides = []
            for label, body in (("then", st.body), ("else", rest)):
                args = _params(names)
                fn = ast.FunctionDef(f"_pypto_{label}_{n}", args, self._fold(list(body)), [], None)
                for x in ast.walk(fn):
                    if not hasattr(x, "lineno"):
                        ast.copy_location(x, st)
                sides.append(fn)
            current = _call("bound", [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                      ast.Tuple([ast.Constant(v) for v in names], ast.Load())], st.test)
            call = _call("if_return", [st.test, ast.Name(sides[0].name, ast.Load()),
                                       ast.Name(sides[1].name, ast.Load()), current], st.test)
            out = stmts[:k] + sides + [ast.copy_location(ast.Return(call), st.test)]
            for x in out:
                ast.fix_missing_locations(x)
            return out
        return stmts

    def visit_If(self, node):
        self.generic_visit(node)
        if _escapes(node.body) or _escapes(node.orelse):
            node.test = self._static(node.test, "if condition (its sides return, break or continue)")
            return node
        if self.in_class[-1]:
            node.test = self._static(node.test, "if condition in a class body")
            return node
        if self.scopes and self.scopes[-1].unsafe(set(_bound(node.body) + _bound(node.orelse)), node.lineno,
                                                  node.end_lineno, [*node.body, *node.orelse]):
            node.test = self._static(node.test, "if condition (its sides bind a global, a name a nested "
                                                "function reads, or del a name)")
            return node
        self.count += 1
        k = self.count
        names = _bound(node.body) + [n for n in _bound(node.orelse) if n not in _bound(node.body)]
        names = [n for n in names if n != _HELPER]

        def side(label, stmts):
            ret = ast.Return(ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()))
            fn = ast.FunctionDef(f"_pypto_{label}_{k}", _params(names), list(stmts or [ast.Pass()]) + [ret], [],
                                 None)
            for s in ast.walk(fn):
                if not hasattr(s, "lineno"):
                    ast.copy_location(s, node)
            return fn
        then_fn, else_fn = side("then", node.body), side("else", node.orelse)
        current = _call("bound", [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                  ast.Tuple([ast.Constant(n) for n in names], ast.Load())], node.test)
        # located at the test (not the whole statement): an error names the line of the `if`
        then_names, else_names = set(_bound(node.body)), set(_bound(node.orelse))
        one_sided = ast.Tuple([ast.Constant(k) for k, n in enumerate(names)
                               if (n in then_names) != (n in else_names)], ast.Load())
        call = _call("if_stmt", [node.test, ast.Name(then_fn.name, ast.Load()), ast.Name(else_fn.name, ast.Load()),
                                 current, one_sided], node.test)
        target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        out = [then_fn, else_fn, ast.copy_location(ast.Assign([target], call), node.test)]
        for s in out:
            ast.fix_missing_locations(s)
        return out


def _rewritten(fn):
    """The function with its conditions rewritten, or None when its source is not available."""
    if getattr(fn, "__wrapped__", None) is not None:
        return None                            # a decorator's wrapper: inspect would show the wrapped source
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    src = "".join(lines)
    # an indented source (a method, a nested function) is parsed inside an `if 1:` (one line more), not
    # dedented: its nodes keep the columns of the user's file (tracebacks underline the right text) and
    # its string literals their whitespace-only lines
    indented = src[:1].isspace()
    try:
        tree = ast.parse("if 1:\n" + src if indented else src)
    except SyntaxError:
        return None
    body = tree.body[0].body if indented else tree.body
    fdef = body[0] if body else None
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
    ast.increment_lineno(module, first - 1 - indented)      # the source's first line is the user's `first`
    compiled = compile(module, code.co_filename, "exec")
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new_code = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    if "__class__" in freevars:
        return None                            # zero-argument super() needs the class cell of a class body
    cells = dict(zip(freevars, fn.__closure__ or ()))
    cells[_HELPER] = types.CellType(_NAMESPACE)
    try:
        closure = tuple(cells[n] for n in new_code.co_freevars)
    except KeyError:
        return None
    new = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, closure or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(getattr(fn, "__dict__", {}))
    return new


def _is_library(filename: str) -> bool:
    """An installed package's file (a virtual environment's or the system's site / dist-packages, which
    errors._is_internal does not cover when they lie outside the standard library's directory)."""
    parts = os.path.abspath(filename).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _helper_version(fn):
    """A user function as a call inside a rewritten body runs it: rewritten too (cached), or as it is."""
    try:
        hit = _helpers.get(fn)
    except TypeError:
        return fn
    if hit is None:
        hit = fn
        code = fn.__code__
        if _HELPER in code.co_freevars or code.co_name == "<lambda>":
            pass                               # made by a rewritten body (rewritten already), or a lambda
        elif not _is_internal(code.co_filename) and not _is_library(code.co_filename):
            try:
                hit = _rewritten(fn) or fn
            except Exception:                  # noqa: BLE001  a rewrite that fails leaves the function as written
                hit = fn
        _helpers[fn] = hit
    return hit


def call(f, /, *args, **kwargs):
    """``f(*args, **kwargs)`` from a rewritten body (module doc)."""
    if type(f) is types.FunctionType:
        f = _helper_version(f)
    elif type(f) is types.MethodType and type(f.__func__) is types.FunctionType:
        g = _helper_version(f.__func__)
        if g is not f.__func__:
            f = types.MethodType(g, f.__self__)
    return f(*args, **kwargs)


# what a rewritten body calls: control.py's condition helpers and ``call``
_NAMESPACE = types.SimpleNamespace(**{n: getattr(control, n) for n in (
    "compare", "compare_chain", "contains", "bool_and", "bool_or", "bool_not", "if_exp", "if_stmt", "if_return", "static_bool", "bound")},
    call=call)


def traceable(fn):
    """``fn`` as the jit traces it: conditions rewritten (module doc), sympy's truth-value error at the
    user's line. Built once per function."""
    try:
        hit = _cache.get(fn)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    try:
        inner = _rewritten(fn) if isinstance(fn, types.FunctionType) else None
    except Exception:                          # noqa: BLE001  a rewrite that fails leaves the function as written
        inner = None
    inner = inner or fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except TypeError as e:
            if "cannot determine truth value" not in str(e):      # sympy's, on a Relational
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

"""The package layering (issue 13): every import of pypto/, pypto_pro/ and models/ — imports inside
functions included — points down the table below, and no two packages import each other even
through sub-packages (the runtime's, passes' and ir's own sub-packages count as packages).

A unit is a top-level module or package of pypto (``pypto.ir``, ``pypto.dtypes`` ...), ``pypto``
itself (its ``__init__``, the public facade), ``pypto_pro`` or ``models``. A unit may import its
own modules and any unit of a lower rank; units of one rank do not import each other."""
from __future__ import annotations

import ast
import collections
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOPS = ("pypto", "pypto_pro", "models")

# rank: units. Lower ranks are imported by higher ones, never the other way.
LAYERS = [
    ("errors",),
    ("dtypes",),
    ("symbolic",),
    ("machine", "sanitize"),
    ("backends",),        # the backend table (frontend.jit reads it); loads runtimes lazily, see LAZY
    ("ir",),
    ("ops",),
    ("frontend",),
    ("passes",),
    ("codegen",),
    ("runtime",),
    ("creation", "nn", "fx", "tile", "testing", "pypto_pro"),   # front ends and helpers over the stack
    ("dynamo",),          # torch.compile backend over fx
    ("pypto",),           # pypto/__init__.py re-exports the public API of everything below
    ("models",),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# (importer, imported): allowed upward only inside a function body, so that loading the importer
# does not load the imported unit (a registry that finds its implementations when first asked).
# Such an import is no load-time dependency: the cycle check leaves it out too.
LAZY = {("backends", "runtime")}

SPLIT = {"runtime", "passes", "ir"}     # packages whose sub-packages count on their own for cycles


def _modname(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(root: pathlib.Path, dotted: str) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _in_function(node, parents) -> bool:
    """Whether ``node`` sits in a function body (its code runs when called, not when loaded)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


@functools.lru_cache(maxsize=4)
def imports(root: pathlib.Path = ROOT) -> tuple:
    """(importing module, imported module, 'file:line', inside a function) for every import of the
    project's own modules. ``from a import b`` names module ``a.b`` when b is a module, else ``a``."""
    out = []
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            mod = _modname(root, path)
            package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
            tree = ast.parse(path.read_text(), str(path))
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                    else:
                        base = node.module
                    targets = [f"{base}.{a.name}" if _is_module(root, f"{base}.{a.name}") else base
                               for a in node.names]
                else:
                    continue
                where = f"{path.relative_to(root)}:{node.lineno}"
                for target in targets:
                    if target.split(".")[0] in TOPS:
                        out.append((mod, target, where, _in_function(node, parents)))
    return tuple(out)


def unit(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if parts[0] == "pypto" and len(parts) > 1 else parts[0]


def violations(root: pathlib.Path = ROOT) -> dict:
    """{importing unit: ['file:line: a -> b (why)', ...]} for every import against the table."""
    found = collections.defaultdict(list)
    for mod, target, where, lazy in imports(root):
        a, b = unit(mod), unit(target)
        if a == b:
            continue
        for u in (a, b):
            if u not in RANK:
                found[a].append(f"{where}: unit '{u}' is not in LAYERS (tests/test_layering.py): give it a rank")
        if a not in RANK or b not in RANK:
            continue
        if RANK[b] < RANK[a] or (lazy and (a, b) in LAZY):
            continue
        why = "same rank" if RANK[a] == RANK[b] else "upward"
        found[a].append(f"{where}: {mod} imports {target} ({a} -> {b}: {why}"
                        + (", inside a function" if lazy else "") + ")")
    return found


def _group(root: pathlib.Path, mod: str) -> str:
    """The package a module counts for in the cycle check."""
    p = mod.split(".")
    if p[0] != "pypto":
        return p[0]
    if len(p) == 1:
        return "pypto"
    if p[1] in SPLIT and len(p) > 2 and (root / "pypto" / p[1] / p[2]).is_dir():
        return f"pypto.{p[1]}.{p[2]}"
    return f"pypto.{p[1]}"


def package_cycles(root: pathlib.Path = ROOT) -> list:
    """Strongly connected sets of packages (more than one) in the package import graph; the facade
    ``pypto`` takes no part (everything imports through it and it imports everything), nor do the
    LAZY imports inside functions."""
    edges, where = collections.defaultdict(set), {}
    for mod, target, loc, in_function in imports(root):
        if in_function and (unit(mod), unit(target)) in LAZY:
            continue
        a, b = _group(root, mod), _group(root, target)
        if a != b and "pypto" not in (a, b):
            edges[a].add(b)
            where.setdefault((a, b), loc)
    index, low, stack, on_stack, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return [(comp, [f"{a}->{b} ({where[a, b]})" for a in comp for b in comp if (a, b) in where]) for comp in comps]


def _units():
    return sorted({unit(_modname(ROOT, p)) for top in TOPS for p in (ROOT / top).rglob("*.py")})


@pytest.mark.parametrize("name", _units())
def test_unit_imports_only_lower_layers(name):
    bad = violations().get(name, [])
    assert not bad, f"{len(bad)} import(s) against the layering:\n" + "\n".join(bad)


def test_no_package_cycles():
    cycles = package_cycles()
    assert not cycles, "\n".join(f"cycle {', '.join(c)}: {'; '.join(ties)}" for c, ties in cycles)


def test_every_unit_has_a_rank():
    assert set(_units()) <= set(RANK), sorted(set(_units()) - set(RANK))


def _tree(tmp_path, files: dict) -> pathlib.Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in TOPS:
        (tmp_path / top).mkdir(exist_ok=True)
    return tmp_path


def test_the_checker_finds_planted_violations(tmp_path):
    """An upward import inside a function, a same-rank import, a lazy registry import and a cycle
    through sub-packages, in a small tree: each is reported (or allowed) as the rules say."""
    root = _tree(tmp_path, {
        "pypto/__init__.py": "from . import ir\n",
        "pypto/ir/__init__.py": "",
        "pypto/ir/verify.py": "import os\n\ndef f():\n    from ..ops import registry\n",
        "pypto/ops/__init__.py": "",
        "pypto/ops/registry.py": "from ..ir import verify\n",
        "pypto/nn/__init__.py": "from pypto.tile import x\n",
        "pypto/tile/__init__.py": "",
        "pypto/tile/x.py": "",
        "pypto/backends.py": "def load():\n    from .runtime import sim\n",
        "pypto/runtime/sim/w.py": "from ... import backends\n",
        "pypto/dtypes.py": "from .runtime import sim\n",
        "pypto/runtime/__init__.py": "",
        "pypto/runtime/sim/__init__.py": "from ..cpu import y\n",
        "pypto/runtime/cpu/__init__.py": "",
        "pypto/runtime/cpu/y.py": "from ..sim import z\n",
        "pypto/runtime/sim/z.py": "",
    })
    found = violations(root)
    assert found["ir"] == ["pypto/ir/verify.py:4: pypto.ir.verify imports pypto.ops.registry "
                           "(ir -> ops: upward, inside a function)"]
    assert found["nn"] == ["pypto/nn/__init__.py:1: pypto.nn imports pypto.tile.x (nn -> tile: same rank)"]
    assert "backends" not in found and "ops" not in found
    assert found["dtypes"] == ["pypto/dtypes.py:1: pypto.dtypes imports pypto.runtime.sim (dtypes -> runtime: upward)"]
    cycles = sorted(c for c, _ in package_cycles(root))
    assert cycles == [["pypto.ir", "pypto.ops"], ["pypto.runtime.cpu", "pypto.runtime.sim"]]

"""``import pypto`` is light (issue 20, item 3): it loads torch, the errors, the dtypes and the backend
table, and nothing of sympy, networkx, the front end, nn or the runtimes until a name needs them; every
public name still resolves (``pypto.<name>`` and ``from pypto import <name>``) to the very object the
module that defines it holds, and a program runs after a light import."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["sympy", "networkx", "torch._dynamo", "pypto.symbolic", "pypto.frontend", "pypto.nn", "pypto.ops",
         "pypto.passes", "pypto.runtime", "pypto.fx", "pypto.dynamo", "pypto.machine"]


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter (this checkout first on sys.path); it prints one JSON line."""
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_part():
    loaded = _fresh(f"""
        import json, sys
        import pypto
        print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))
    """)
    assert not any(loaded.values()), [m for m, on in loaded.items() if on]


def test_first_use_loads_what_the_name_needs_and_a_program_runs():
    out = _fresh("""
        import json, sys
        import torch
        import pypto
        before = "sympy" in sys.modules
        @pypto.jit(backend="reference")
        def f(x: pypto.Tensor[[pypto.DYNAMIC, 8], pypto.float32]):
            return pypto.exp(x) + 1.0
        x = torch.randn(5, 8)
        err = (f(x) - (torch.exp(x) + 1.0)).abs().max().item()
        print(json.dumps({"before": before, "after": "sympy" in sys.modules, "err": err}))
    """)
    assert out["before"] is False and out["after"] is True
    assert out["err"] <= 1e-6


NAMES = {  # name -> the module that defines it
    "jit": "pypto.frontend.jit", "JitFunction": "pypto.frontend.jit", "Tensor": "pypto.frontend.tensor",
    "TensorSpec": "pypto.frontend.tensor", "DYNAMIC": "pypto.symbolic", "dynamic": "pypto.symbolic",
    "floordiv": "pypto.symbolic", "ceildiv": "pypto.symbolic", "set_machine": "pypto.machine",
    "MachineSpec": "pypto.machine", "last_report": "pypto.runtime.report", "loop": "pypto.frontend.control",
    "min": "pypto.frontend.api", "max": "pypto.frontend.api", "setitem": "pypto.frontend.api",
    "exp": "pypto.frontend.api", "softmax": "pypto.frontend.api", "matmul": "pypto.frontend.api",
    "zeros": "pypto.creation", "randn": "pypto.creation", "from_torch": "pypto.creation",
    "Module": "pypto.nn", "Parameter": "pypto.nn", "set_vec_tile_shapes": "pypto.frontend.hints",
    "PyptoError": "pypto.errors", "float16": "pypto.dtypes", "set_backend": "pypto.backends",
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_public_names_are_the_defining_modules_objects(name):
    import importlib

    import pypto
    assert getattr(pypto, name) is getattr(importlib.import_module(NAMES[name]), name)
    namespace: dict = {}
    exec(f"from pypto import {name}", namespace)
    assert namespace[name] is getattr(pypto, name)


def test_subpackages_and_unknown_names():
    import pypto
    import pypto.nn.functional
    assert pypto.nn.functional is pypto.nn.functional and pypto.tile.__name__ == "pypto.tile"
    assert {"jit", "Tensor", "exp", "nn", "DYNAMIC"} <= set(dir(pypto))
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        pypto.no_such_thing  # noqa: B018

import importlib.util
import os

import pytest

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tile"))


def load_example(name: str):
    """An example of examples/tile by path (examples/pro has modules of the same names)."""
    spec = importlib.util.spec_from_file_location(f"tile_example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def examples():
    return {n: load_example(n) for n in ("flash_attention", "layer_norm", "matmul_gelu")}

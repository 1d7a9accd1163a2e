import importlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


def backend_unavailable(name: str) -> str | None:
    """Why the pypto backend ``name`` cannot run here (None when it can)."""
    if name == "reference":
        return None
    if importlib.util.find_spec("pypto.passes.pipeline") is None:
        return f"backend '{name}' needs pypto.passes.pipeline (the lowering), which does not exist yet"
    try:
        importlib.import_module(f"pypto.runtime.{name}")
    except Exception as e:     # noqa: BLE001 - any import failure means the backend is not usable
        return f"pypto.runtime.{name} does not import: {e}"
    return None


BACKENDS = ["reference", "sim", "cpu"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    why = backend_unavailable(request.param)
    if why:
        pytest.skip(why)
    return request.param


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch and reads its own counters."""
    import pypto.dynamo
    torch._dynamo.reset()
    pypto.dynamo.reset()
    yield
    torch._dynamo.reset()

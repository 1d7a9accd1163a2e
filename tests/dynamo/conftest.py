import pytest
import torch

from dynamo_cases import backend_unavailable


@pytest.fixture
def backend(request):
    """The pypto backend named by the test's parameter; skipped (with the reason) where it cannot run."""
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

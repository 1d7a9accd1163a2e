"""Backend parameters for the torch.compile tests: which pypto backends exist here, which are slow,
and the check that something really ran through pypto."""
import importlib
import importlib.util

import pytest


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


def backends(slow=("cpu",)):
    """Parameters for the ``backend`` fixture: every backend, the ``slow`` ones marked slow (the cpu
    backend runs g++ per kernel)."""
    return [pytest.param(b, id=b, marks=[pytest.mark.slow] if b in slow else []) for b in ("reference", "sim", "cpu")]


def check_ran_in_pypto(backend: str) -> None:
    """After the answer was checked: something must have run through pypto. On a lowered backend a
    partition its lowering cannot compile yet runs in eager (right answer, logged): that is an expected
    failure naming the gap, not a pass."""
    import pypto.dynamo as pd
    if pd.failures and backend != "reference":
        pytest.xfail(f"the {backend} lowering cannot compile this yet (ran in eager): {pd.failures[-1][1]}")
    assert not pd.failures, f"pypto fell back to eager: {list(pd.failures)}"
    assert pd.counters["partitions"] >= 1 and pd.counters["runs"] >= 1, "nothing ran through pypto"

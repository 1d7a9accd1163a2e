import os

import pytest
from hypothesis import settings

# Property tests run a fixed, reproducible set of examples (the suite and CI must not fail on a
# draw nobody has seen); PYPTO_HYPOTHESIS_RANDOM=1 (with PYPTO_HYPOTHESIS_EXAMPLES=N) hunts for new ones.
settings.register_profile("pypto-fixed", derandomize=True, database=None)
settings.register_profile("pypto-hunt")
settings.load_profile("pypto-hunt" if os.environ.get("PYPTO_HYPOTHESIS_RANDOM") == "1" else "pypto-fixed")

# The cpu backend runs its checked build in the tests: the GM bounds rule of every load and store is
# compiled in, as the sim checks it (pypto/runtime/cpu/gm_check.py). PYPTO_CPU_CHECK=0 tests the
# unchecked build.
os.environ.setdefault("PYPTO_CPU_CHECK", "1")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow") or os.environ.get("PYPTO_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow or PYPTO_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

"""The README's Python blocks that are meant to run do run, as written: each block preceded by a
``<!-- test: <name> -->`` line is executed in a fresh namespace, then its check (below, by name)
compares what it computed with torch. A marked block without a check, or a check whose block is
gone, fails, so that neither can rot silently. Also pinned: pytest.ini and tests/conftest.py agree
on how slow cases run, and the README says how long the suite takes."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKED = re.compile(r"^<!-- test: (\w+)[^\n]*-->\n```python\n(.*?)^```", re.S | re.M)


def marked_blocks(text: str) -> dict[str, tuple[int, str]]:
    """name -> (line of the block's first code line in the README, code)."""
    blocks = {}
    for m in MARKED.finditer(text):
        assert m.group(1) not in blocks, f"two README blocks are named {m.group(1)}"
        blocks[m.group(1)] = (text.count("\n", 0, m.start(2)) + 1, m.group(2))
    return blocks


def _check_example(ns):
    x, w = ns["x"], ns["w"]
    xf = x.float()
    want = torch.nn.functional.silu(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
    torch.testing.assert_close(ns["rmsnorm_silu"](x, w).float(), want, rtol=2e-2, atol=2e-2)
    assert ns["rmsnorm_silu"].trace_count == 1                  # one compilation for rows 1, 77 and 300
    x = torch.randn(100, 128)
    out = torch.empty_like(x)
    ns["scale_rows"](x, out)
    torch.testing.assert_close(out, x * 2.0 + 1.0)
    for cu in ([0, 5, 5, 100], [0, 41, 73]):                    # an empty sequence, lengths across the branch
        cu = torch.tensor(cu, dtype=torch.int32)
        x = torch.randn(int(cu[-1]) + 2, 128)
        out = torch.zeros_like(x)
        ns["varlen_scale"](cu, x, out)
        want = torch.zeros_like(x)
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            want[s:e] = x[s:e] * (0.5 if e - s > 40 else 2.0)
        torch.testing.assert_close(out, want)
    assert ns["varlen_scale"].trace_count == 1


def _check_torch_compile(ns):
    x = torch.randn(2, 33, 512)                                # another sequence length
    with torch.no_grad():
        torch.testing.assert_close(ns["fast"](x), ns["model"](x), rtol=2e-3, atol=2e-3)
    assert ns["y"].shape == (2, 77, 512) and not ns["y"].requires_grad


CHECKS = {"example": _check_example, "torch_compile": _check_torch_compile}


def test_every_marked_block_has_a_check_and_every_check_a_block():
    assert set(marked_blocks(README.read_text())) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_readme_block_runs_as_written(name):
    import pypto
    line, code = marked_blocks(README.read_text())[name]
    ns: dict = {"__name__": f"readme_{name}"}
    saved = pypto.get_backend()
    try:
        exec(compile("\n" * (line - 1) + code, str(README), "exec"), ns)   # errors name the README's lines
        CHECKS[name](ns)
    finally:
        pypto.set_backend(saved)


def test_slow_cases_run_as_pytest_ini_and_conftest_both_say():
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    assert "-m slow" not in ini["pytest"]["addopts"]
    assert "--runslow" in ini["pytest"]["markers"]
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert '"--runslow"' in conftest and "PYPTO_RUN_SLOW" in conftest


def test_readme_says_how_long_the_suite_takes():
    text = README.read_text()
    m = re.search(r"Run the tests \(([^)]*?\d+(?:-\d+)? minutes[^)]*)\)", text, re.S)
    assert m, "README: 'Run the tests (N-M minutes ...)' is gone"

"""Property: random programs (tests/fuzz/programs.py: chains of elementwise, reduction, softmax,
matmul, view and cast ops on shapes with tails, size-1 and dynamic dims, fp32/fp16/bf16) give on
the sim and cpu backends what torch computes in float64 from the same rounded inputs, within the
propagated rounding-error bound of tests/fuzz/reference.py. The example set is fixed (seeds
0..N-1); ``python -m tests.fuzz.hunt`` draws thousands more.

Cost: on sim a batch of 25 programs takes a few seconds. On cpu every jit function is one g++
-O3 build (about half a second per kernel, 2-3 kernels per program), so the default run checks
24 programs of at most 4 steps in two builds and the 200 programs run under --runslow."""
import pytest

from .programs import generate
from .runner import check

SIM_PROGRAMS = 200
SIM_BATCH = 25
CPU_FAST_PROGRAMS = 24
CPU_FAST_BATCH = 12           # one g++ build of ~25 kernels: ~20 s
CPU_FAST_STEPS = 4
CPU_BATCH = 50


def _assert_none_failed(failures):
    assert not failures, f"{len(failures)} random programs failed:\n" + "\n".join(f.report() for f in failures)


@pytest.mark.parametrize("first", range(0, SIM_PROGRAMS, SIM_BATCH), ids=lambda s: f"seeds{s}-{s + SIM_BATCH - 1}")
def test_random_programs_on_sim_match_torch(first):
    _assert_none_failed(check([generate(s) for s in range(first, first + SIM_BATCH)], "sim"))


@pytest.mark.parametrize("first", range(0, CPU_FAST_PROGRAMS, CPU_FAST_BATCH),
                         ids=lambda s: f"seeds{s}-{s + CPU_FAST_BATCH - 1}")
def test_short_random_programs_on_cpu_match_torch(first):
    programs = [generate(s, max_steps=CPU_FAST_STEPS) for s in range(first, first + CPU_FAST_BATCH)]
    _assert_none_failed(check(programs, "cpu"))


@pytest.mark.slow
@pytest.mark.parametrize("first", range(0, SIM_PROGRAMS, CPU_BATCH), ids=lambda s: f"seeds{s}-{s + CPU_BATCH - 1}")
def test_random_programs_on_cpu_match_torch(first):
    """The sim set's programs on cpu (a g++ build of ~130 kernels per batch: about a minute)."""
    _assert_none_failed(check([generate(s) for s in range(first, first + CPU_BATCH)], "cpu"))

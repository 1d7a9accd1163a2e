"""What the Tensor-level compiler lowers runs on the cpu backend as the reference interpreter computes
it: every registry-op case of tests/passes/test_lower_ops.py, and random programs drawn like
tests/passes/test_lower_property.py's (elementwise, scalars, reductions, softmax, matmul; fp32 / fp16
/ bf16; tile hints). The sim backend is held to the same reference by those tests.

All kernels are compiled up front in a few g++ runs (kernels with distinct names batch together);
the runs then find them already built. The quick suite takes a sample; --runslow takes them all.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pypto  # noqa: E402
from pypto.passes.pipeline import lower  # noqa: E402
from pypto.runtime import cpu  # noqa: E402
from tests.passes.passes_helpers import assert_match  # noqa: E402
from tests.passes.test_lower_ops import CASES  # noqa: E402
from tests.passes.test_lower_property import BINARY, TOL, UNARY, build as build_program  # noqa: E402

QUICK_CASES = ["transpose", "permute", "expand", "arange", "pad", "gather_last", "index_select", "remainder_int",
               "masked_fill", "argmin", "isfinite", "round_sign", "pow", "logical", "casts", "cumsum_f16",
               "softmax_dim0", "bmm_mT", "mean_all", "named_elementwise"]
SLOW = os.environ.get("PYPTO_RUN_SLOW") == "1" or "--runslow" in sys.argv
N_PROGRAMS = 24 if SLOW else 6


def random_program(seed: int):
    """A program in tests/passes/test_lower_property.py's form: (shape, dtype, ops, tile hint)."""
    rng = random.Random(seed)
    rank = rng.randint(1, 3)
    shape = tuple(rng.choice([1, 3, 8, 17, 40, 64]) for _ in range(rank - 1)) + (rng.choice([8, 16, 24, 48, 96, 130]),)
    dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
    ops = []
    for k in range(rng.randint(2, 12)):
        kind = rng.choice(["unary", "unary", "binary", "binary", "scalar", "reduce", "softmax", "matmul"])
        if kind == "unary":
            ops.append(("unary", rng.choice(UNARY), rng.randint(0, k)))
        elif kind == "binary":
            ops.append(("binary", rng.choice(BINARY), rng.randint(0, k), rng.randint(0, k)))
        elif kind == "scalar":
            ops.append(("scalar", rng.choice(["mul", "add", "rsub"]), rng.choice([0.5, 2.0, -1.25]), rng.randint(0, k)))
        elif kind == "reduce":
            ops.append(("reduce", rng.choice(["sum", "amax", "amin", "mean"]), rng.choice([-1, 0]), rng.randint(0, k)))
        else:
            ops.append((kind, rng.randint(0, k)))
    hint = None
    if rng.random() < 0.5:
        hint = tuple(rng.choice([1, 2, 4]) for _ in range(rank - 1)) + (rng.choice([16, 32, 64, 128]),)
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=g) * 4 - 2).to(dtype)
    w = (torch.rand((shape[-1], shape[-1]), generator=g) - 0.5).to(dtype) / shape[-1] ** 0.5
    return build_program(ops, hint), (x, w), TOL[dtype]


def registry_cases():
    names = sorted(CASES) if SLOW else QUICK_CASES
    return {f"op:{n}": (CASES[n][0], CASES[n][1], (1e-5, 1e-4) if n in ("bmm_mT", "matmul_vector") else None)
            for n in names}


def program_cases():
    return {f"program:{s}": random_program(s) for s in range(N_PROGRAMS)}


ALL = {**registry_cases(), **program_cases()}


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """Lower every case and compile all their kernels in as few g++ runs as names allow."""
    batches: list[dict] = []
    for fn, args, _ in ALL.values():
        graph = lower(pypto.jit(fn, backend="reference").trace(*[a.clone() for a in args]))
        for batch in batches:
            if not set(batch) & set(graph.kernels):
                batch.update(graph.kernels)
                break
        else:
            batches.append(dict(graph.kernels))
    for batch in batches:
        cpu.build(batch)


@pytest.mark.parametrize("name", list(ALL))
def test_cpu_equals_reference(name):
    fn, args, tol = ALL[name]
    on_cpu = pypto.jit(fn, backend="cpu")
    reference = pypto.jit(fn, backend="reference")
    cpu_args, ref_args = [a.clone() for a in args], [a.clone() for a in args]
    builds = cpu.STATS.builds
    out = on_cpu(*cpu_args)
    assert cpu.STATS.builds == builds, "the kernels were compiled up front"
    expected = reference(*ref_args)
    assert_match(out, expected, tol)
    assert_match(cpu_args, ref_args, tol)        # arguments written in place

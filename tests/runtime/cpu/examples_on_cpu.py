"""The examples' kernels on the cpu backend, each checked against torch by its example (small sizes).

    python tests/runtime/cpu/examples_on_cpu.py [case ...]     # every case when none is named

test_cpu_sanitizers.py runs this in a child process whose compiler is g++ with AddressSanitizer and
UndefinedBehaviorSanitizer (a sanitizer report aborts the child).
"""
from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]


def _example(kind: str, stem: str):
    spec = importlib.util.spec_from_file_location(f"example_{kind}_{stem}", ROOT / "examples" / kind / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rmsnorm_silu():
    """The README's first example, on the cpu backend, with its three row counts."""
    import pypto
    import pypto.nn.functional as F

    @pypto.jit(backend="cpu")
    def rmsnorm_silu(x: pypto.Tensor[[pypto.DYNAMIC, 256], pypto.float16], w: pypto.Tensor[[256], pypto.float16]):
        return F.silu(F.rms_norm(x, w, eps=1e-6))

    w = torch.randn(256, dtype=torch.float16)
    for rows in (1, 77, 300):
        x = torch.randn(rows, 256, dtype=torch.float16)
        ref = torch.nn.functional.silu(torch.nn.functional.rms_norm(x.float(), (256,), w.float(), 1e-6))
        torch.testing.assert_close(rmsnorm_silu(x, w).float(), ref, rtol=1e-2, atol=1e-2)


def _tile(stem: str, **sizes):
    def run():
        import pypto
        pypto.set_backend("cpu")
        _example("tile", stem).main(**sizes)
    return run


CASES = {
    "pro_add": lambda: _example("pro", "add").main(256, 384, backend="cpu"),
    "pro_softmax": lambda: _example("pro", "softmax").main(rows=37, cols=256, backend="cpu", block_dim=3),
    "pro_matmul": lambda: _example("pro", "matmul").main(m=200, k=300, n=260, out_dtype=torch.float32,
                                                         backend="cpu", block_dim=3),
    "pro_flash_attention": lambda: _example("pro", "flash_attention").main(bh=1, seq=256, backend="cpu",
                                                                           block_dim=2, handoff="fp16"),
    "pro_flash_attention_256": lambda: _example("pro", "flash_attention").main(
        bh=1, seq=512, backend="cpu", block_dim=2, handoff="fp16", math="fp16", block_k=256),
    "tile_flash_attention": _tile("flash_attention", bh=1, seq=136, d=64),
    "tile_layer_norm": _tile("layer_norm", rows=21, n=128),
    "tile_matmul_gelu": _tile("matmul_gelu", m=70, k=40, n=72),
    "readme_rmsnorm_silu": _rmsnorm_silu,
}


def main(names) -> None:
    from pypto.runtime.cpu import BuildWarning
    warnings.simplefilter("error", BuildWarning)      # as in the test suite: a build that warns is a bug
    torch.set_num_threads(1)
    for name in names or CASES:
        torch.manual_seed(0)
        CASES[name]()
        print(f"{name}: matches torch", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

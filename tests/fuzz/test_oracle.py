"""The random-program machinery itself: programs are valid pypto, the float64 oracle agrees with the
reference backend (torch eager, per-op rounding) within its bound, and the comparison fails on a
result that is off by more than its bound."""
import torch

from . import reference
from .programs import generate, source
from .runner import check, jit_function


def test_generation_is_deterministic_and_draws_every_feature():
    texts = [source([generate(s)]) for s in range(300)]
    assert texts == [source([generate(s)]) for s in range(300)]
    joined = "\n".join(texts)
    for feature in ("pypto.dynamic(", "pypto.float16", "pypto.bfloat16", "pypto.float32", "pypto.softmax(",
                    "pypto.matmul(", " @ ", "b_trans=True", ".transpose(", "pypto.permute(", "pypto.reshape(",
                    "pypto.view(", ".expand(", "pypto.concat(", "pypto.cast(", "keepdim=True", "pypto.sum(",
                    "pypto.mean(", "amax(", "amin(", "[..., ", "pypto.log_softmax(", "None"):
        assert feature in joined, f"no program of seeds 0..299 uses {feature!r}"
    sizes = {d.sizes[0] for s in range(300) for inp in generate(s).inputs for d in inp.shape}
    assert {1, 7, 33, 130, 257} <= sizes


def test_oracle_agrees_with_the_reference_backend():
    """The reference backend runs the same text with torch at the programs' dtypes (one rounding
    per op): within the bound of every output."""
    assert check([generate(s) for s in range(1000, 1060)], "reference") == []


def test_comparison_fails_beyond_the_bound_and_passes_within_it():
    for seed in range(40):
        p = generate(seed)
        gen = torch.Generator().manual_seed(seed)
        xs = reference.make_inputs(p, 0, gen)
        (out, *_) = jit_function([p], "reference")(*xs)
        want = reference.evaluate(p, xs)[0]
        dtype = p.values[p.outputs[0]].dtype
        assert reference.mismatch(out, want, dtype) is None
        if not out.numel() or not torch.isfinite(want.r).all():
            continue
        bad = out.clone()
        idx = (want.e == want.e.min()).nonzero()[0].tolist() if want.e.dim() else []
        i = tuple(idx)
        bad[i] = (want.r[i] + 3 * reference.TOLERANCE * want.e[i] + 1e-30).to(bad.dtype)
        if bad[i].double() - want.r[i] <= reference.TOLERANCE * want.e[i]:
            continue                                     # the output dtype cannot hold a value that far off
        msg = reference.mismatch(bad, want, dtype)
        assert msg is not None and "1 of" in msg, (seed, msg)
        assert reference.mismatch(out.to(torch.float64), want, dtype).startswith("dtype")
        assert reference.mismatch(out.reshape(1, *out.shape), want, dtype).startswith("shape")

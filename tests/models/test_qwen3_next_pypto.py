"""The pypto Gated DeltaNet kernels and layer (models/qwen3_next) against the plain-torch oracles.

The oracle of the gated delta rule is the token-by-token ``recurrent_gated_delta_rule_ref`` (fp32
torch, written from the equations); the layer is compared with ``gated_deltanet_layer_ref`` with
the same HF-format weights. Errors are relative RMS (||actual - expected||_2 / ||expected||_2):
at most 1e-5 for fp32 inputs and 5e-3 for bf16 inputs, for outputs and final states.

Tests run on each backend of BACKENDS; a backend that cannot compile a kernel yet is skipped with
the reason (the op or pass that is missing), never silently. The full matrix (fixture ``backend``)
runs on the interpreter by default and on sim/cpu with --runslow (the simulator executes every PTO
instruction in Python; the cpu backend compiles each kernel with g++); a representative subset
(fixture ``any_backend``) runs on every backend by default.
"""
import functools

import pytest
import torch
import torch.nn.functional as F

import pypto
from models.qwen3_next import (GDNArgumentError, GDNCache, Qwen3NextGatedDeltaNet, Qwen3NextGDNConfig, causal_conv1d,
                               causal_conv1d_update, chunk_gated_delta_rule, fused_recurrent_gated_delta_rule)
from models.qwen3_next.functional import kernel_function
from models.qwen3_next.reference import (causal_conv1d_ref, causal_conv1d_update_ref, gated_deltanet_layer_ref,
                                         make_random_weights, recurrent_gated_delta_rule_ref)

from gdn_data import gdn_inputs

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3}
BACKENDS = ["reference", "sim", "cpu"]
# this file checks the Tensor-level kernels (the Professional-mode chunk kernel: test_qwen3_next_pro.py)
RULES = {"chunk": functools.partial(chunk_gated_delta_rule, impl="tensor"), "recurrent": fused_recurrent_gated_delta_rule}


def rel_err(actual, expected):
    expected = expected.double()
    return ((actual.double() - expected).norm() / expected.norm()).item()


def run(backend, fn, *args, **kwargs):
    """fn(*args, backend=backend, **kwargs), skipping (with the reason) when the backend cannot compile it."""
    try:
        return fn(*args, backend=backend, **kwargs)
    except (pypto.CompileError, pypto.BackendUnavailableError, NotImplementedError) as e:
        pytest.skip(f"backend '{backend}' cannot run this kernel yet: {type(e).__name__}: {e}")
    except pypto.PyptoError as e:
        if "lowering pipeline" in str(e) or "cannot lower" in str(e):
            pytest.skip(f"backend '{backend}' cannot run this kernel yet: {e}")
        raise


@pytest.fixture(params=[b if b == "reference" else pytest.param(b, marks=pytest.mark.slow) for b in BACKENDS])
def backend(request):
    return request.param


@pytest.fixture(params=BACKENDS)
def any_backend(request):
    return request.param


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The reference interpreter runs many small torch ops: on the shared 2-core machine intra-op
    threads only contend (a 1 MB clone takes 10x longer with 2 threads under load)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_oracle_cache: dict = {}


def oracle(q, k, v, g, beta, S0, **kwargs):
    """recurrent_gated_delta_rule_ref, memoised per input (a token loop: slow at T=1000)."""
    key = tuple(id(x) for x in (q, k, v, g, beta, S0)) + tuple(sorted((n, str(x)) for n, x in kwargs.items()))
    hit = _oracle_cache.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], (q, k, v, g, beta, S0))):
        result = recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                                use_qk_l2norm_in_kernel=True, **kwargs)
        hit = _oracle_cache[key] = ((q, k, v, g, beta, S0), result)
    return hit[1]


@functools.lru_cache(maxsize=None)
def cached_inputs(*args, **kwargs):
    return gdn_inputs(*args, **kwargs)


def check_rule(backend, rule, q, k, v, g, beta, S0, tol, **kwargs):
    o_ref, S_ref = oracle(q, k, v, g, beta, S0, **{n: x for n, x in kwargs.items() if n in ("cu_seqlens", "scale")})
    o, S = run(backend, RULES[rule], q, k, v, g, beta, initial_state=S0, output_final_state=True,
               use_qk_l2norm_in_kernel=True, **kwargs)
    assert o.dtype == v.dtype and o.shape == v.shape
    assert S.dtype == torch.float32 and S.shape == S_ref.shape
    assert rel_err(o, o_ref) <= tol, "output"
    assert rel_err(S, S_ref) <= tol, "final state"
    return o, S


# ----------------------------------------------------------------------------------------------
# Gated delta rule
# ----------------------------------------------------------------------------------------------

SEQ_LENS = [1, 63, 64, 65, pytest.param(1000, marks=pytest.mark.slow)]


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T", SEQ_LENS)
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
def test_rule_matches_recurrent_oracle(backend, rule, dtype, T, with_state):
    # B=2, H=2 key heads, HV=4 value heads (HV/H = 2), K=V=32
    q, k, v, g, beta, S0 = cached_inputs(2, T, 2, 4, 32, 32, dtype, seed=T, with_state=with_state)
    check_rule(backend, rule, q, k, v, g, beta, S0, TOL[dtype])


@pytest.mark.parametrize("rule,dtype,T,with_state", [("chunk", torch.float32, 65, True),
                                                     ("recurrent", torch.bfloat16, 3, False)],
                         ids=["chunk-fp32-T65-state", "recurrent-bf16-T3-no_state"])
def test_rule_on_every_backend(any_backend, rule, dtype, T, with_state):
    # B=2, H=1, HV=2 (HV/H = 2), K=V=16: the compiled backends' share of the default run stays short
    q, k, v, g, beta, S0 = cached_inputs(2, T, 1, 2, 16, 16, dtype, seed=T, with_state=with_state)
    check_rule(any_backend, rule, q, k, v, g, beta, S0, TOL[dtype])


@pytest.mark.parametrize("rule", list(RULES))
def test_varlen_runtime_offsets(backend, rule):
    q, k, v, g, beta, S0 = cached_inputs(1, 90, 2, 4, 32, 32, torch.float32, seed=8, N=3)
    check_rule(backend, rule, q, k, v, g, beta, S0, 1e-5, cu_seqlens=torch.tensor([0, 10, 25, 90]))


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_varlen_three_sequences(backend, rule, dtype):
    q, k, v, g, beta, S0 = cached_inputs(1, 150, 2, 4, 32, 32, dtype, seed=7, N=3)
    check_rule(backend, rule, q, k, v, g, beta, S0, TOL[dtype], cu_seqlens=torch.tensor([0, 17, 80, 150]))


@pytest.mark.parametrize("rule", list(RULES))
def test_varlen_lengths_are_runtime_sizes(rule):
    """Two packings with the same number of sequences share one compilation; an empty sequence
    keeps its initial state."""
    q, k, v, g, beta, S0 = gdn_inputs(1, 90, 1, 2, 16, 16, torch.float32, seed=3, N=3)
    fn = kernel_function(rule, "reference")
    counts = []
    for cu in ([0, 10, 45, 90], [0, 44, 45, 90]):      # distinct lengths in each (sizes are duck-typed)
        check_rule("reference", rule, q, k, v, g, beta, S0, 1e-5, cu_seqlens=torch.tensor(cu))
        counts.append(fn.trace_count)
    assert counts[1] == counts[0]
    _, S = check_rule("reference", rule, q, k, v, g, beta, S0, 1e-5, cu_seqlens=torch.tensor([0, 30, 30, 90]))
    assert torch.equal(S[1], S0[1])


@pytest.mark.parametrize("H,HV", [(1, 1), (2, 2), (1, 4)])
def test_head_group_ratios(backend, H, HV):
    q, k, v, g, beta, S0 = cached_inputs(1, 70, H, HV, 16, 8, torch.float32, seed=H * 10 + HV)
    for rule in RULES:
        check_rule(backend, rule, q, k, v, g, beta, S0, 1e-5)


@pytest.mark.parametrize("chunk_size", [16, 32, 128])
def test_chunk_sizes(chunk_size):
    q, k, v, g, beta, S0 = gdn_inputs(2, 150, 2, 4, 16, 16, torch.float32, seed=chunk_size)
    check_rule("reference", "chunk", q, k, v, g, beta, S0, 1e-5, chunk_size=chunk_size)


def test_strong_decay_does_not_overflow(backend):
    q, k, v, g, beta, S0 = cached_inputs(1, 200, 2, 4, 16, 16, torch.float32, seed=11, decay="strong")
    o, S = check_rule(backend, "chunk", q, k, v, g, beta, S0, 1e-5)
    assert torch.isfinite(o).all() and torch.isfinite(S).all()


def test_repeated_keys_are_solved_exactly():
    """Identical keys, beta near 1, no decay: (I + A)^-1 has A = strictly-lower 0.99s, whose powers
    grow like binomial coefficients; a power-series inverse would lose every digit here."""
    q, k, v, g, beta, S0 = gdn_inputs(1, 64, 1, 1, 16, 16, torch.float32, seed=2)
    k = k[:, :1].expand_as(k).contiguous()
    check_rule("reference", "chunk", q, k, v, torch.zeros_like(g), torch.full_like(beta, 0.99), S0, 1e-5)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("case", ["T65", "T1", "varlen"])
def test_per_head_layout(rule, case):
    """The per-head layout (loops over rows and heads, 2-D tiles: what the compiled backends run)
    computes the same as the batched one; checked here on the interpreter."""
    if case == "varlen":
        q, k, v, g, beta, S0 = cached_inputs(1, 150, 2, 4, 32, 32, torch.float32, seed=7, N=3)
        kwargs = dict(cu_seqlens=torch.tensor([0, 17, 80, 150]))
    else:
        q, k, v, g, beta, S0 = cached_inputs(2, int(case[1:]), 2, 4, 32, 32, torch.float32, seed=1)
        kwargs = {}
    check_rule("reference", rule, q, k, v, g, beta, S0, 1e-5, per_head=True, **kwargs)


def test_bf16_cube_operands_stay_within_bf16_tolerance():
    """cube_dtype=bf16 (matmul operands rounded to bf16, fp32 accumulation, as fla does) on bf16
    inputs: faster on the cube, error a few 1e-3, still within the bf16 tolerance."""
    q, k, v, g, beta, S0 = cached_inputs(1, 200, 2, 4, 32, 32, torch.bfloat16, seed=12)
    o, S = check_rule("reference", "chunk", q, k, v, g, beta, S0, TOL[torch.bfloat16], cube_dtype=pypto.bfloat16)
    o_exact, _ = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=S0, use_qk_l2norm_in_kernel=True,
                                        backend="reference")
    assert rel_err(o, o_exact) > 1e-4                           # the option does change the arithmetic


@pytest.mark.parametrize("C", [1, 16, 24, 64])
def test_unit_lower_inverse(C):
    """(I + A)^-1 of the kernels (blocked recursive merging) vs torch's triangular solve; the upper
    part of A and the diagonal blocks' consistency with A are what the kernel relies on."""
    from models.qwen3_next.kernels import ChunkMasks, unit_lower_inverse
    masks = ChunkMasks.of(C)
    A = (0.4 * torch.randn(3, C, C, generator=torch.Generator().manual_seed(C))).tril(-1)
    b, nb = masks.block, masks.nb
    A_diag = torch.stack([A[:, j * b:(j + 1) * b, j * b:(j + 1) * b] for j in range(nb)], dim=1)
    fn = pypto.jit(lambda A, A_diag: unit_lower_inverse(A, A_diag, masks), backend="reference")
    X = fn(A, A_diag)
    eye = torch.eye(C, dtype=torch.float64).expand(3, C, C)
    expected = torch.linalg.solve_triangular(eye + A.double(), eye, upper=False)
    assert rel_err(X, expected) <= 1e-6


def test_explicit_scale_and_no_state_output():
    q, k, v, g, beta, S0 = gdn_inputs(2, 40, 2, 4, 16, 16, torch.float32, seed=5)
    k = F.normalize(k, dim=-1)
    o_ref, _ = recurrent_gated_delta_rule_ref(q, k, v, g, beta, scale=0.3, initial_state=S0)
    o, S = chunk_gated_delta_rule(q, k, v, g, beta, scale=0.3, initial_state=S0, backend="reference")
    assert S is None and rel_err(o, o_ref) <= 1e-5
    S_before = S0.clone()
    fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                     backend="reference")
    assert torch.equal(S0, S_before)                      # the caller's initial state is not modified


def test_one_compilation_serves_every_length():
    fn = kernel_function("chunk", "reference")
    before = None
    for T in (5, 64, 130):
        q, k, v, g, beta, S0 = gdn_inputs(1, T, 1, 2, 16, 16, torch.float32, seed=T)
        check_rule("reference", "chunk", q, k, v, g, beta, S0, 1e-5, chunk_size=32)
        before = fn.trace_count if before is None else before
    assert fn.trace_count == before


# ----------------------------------------------------------------------------------------------
# Causal conv1d
# ----------------------------------------------------------------------------------------------

def test_causal_conv1d_on_every_backend(any_backend):
    test_causal_conv1d(any_backend, 9, True, torch.float32)


@pytest.mark.parametrize("T", [1, 2, 9, 64])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_causal_conv1d(backend, T, with_state, dtype):
    gen = torch.Generator().manual_seed(T)
    B, D, W = 2, 24, 4
    x = torch.randn(B, T, D, generator=gen).to(dtype)
    weight, bias = torch.randn(D, W, generator=gen).to(dtype), torch.randn(D, generator=gen).to(dtype)
    state = torch.randn(B, D, W - 1, generator=gen).to(dtype) if with_state else None
    y_ref, final_ref = causal_conv1d_ref(x, weight, bias, initial_state=state, output_final_state=True)
    y, final = run(backend, causal_conv1d, x, weight, bias, initial_state=state, output_final_state=True)
    assert y.dtype == dtype and final.dtype == dtype and final.shape == (B, D, W - 1)
    assert rel_err(y, y_ref) <= TOL[dtype]
    assert torch.equal(final, final_ref)


def test_causal_conv1d_options(backend):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 6, 8, generator=gen)
    weight = torch.randn(8, 1, 3, generator=gen)                  # torch Conv1d / HF layout [D, 1, W]
    y, final = run(backend, causal_conv1d, x, weight, activation=None)
    y_ref, _ = causal_conv1d_ref(x, weight[:, 0], activation=None)
    assert final is None and rel_err(y, y_ref) <= 1e-6


def test_causal_conv1d_update_on_every_backend(any_backend):
    test_causal_conv1d_update(any_backend, 4, torch.bfloat16)


@pytest.mark.parametrize("state_len", [3, 4], ids=["W-1", "W"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_causal_conv1d_update(backend, state_len, dtype):
    gen = torch.Generator().manual_seed(state_len)
    B, D, W = 2, 16, 4
    weight, bias = torch.randn(D, W, generator=gen).to(dtype), torch.randn(D, generator=gen).to(dtype)
    conv_state = torch.randn(B, D, state_len, generator=gen).to(dtype)
    expected_state = conv_state.clone()
    for t in range(3):
        x = torch.randn(B, D, generator=gen).to(dtype)
        y_ref = causal_conv1d_update_ref(x, expected_state, weight, bias)
        y = run(backend, causal_conv1d_update, x, conv_state, weight, bias)
        assert y.dtype == dtype and rel_err(y, y_ref) <= TOL[dtype]
        assert torch.equal(conv_state, expected_state)            # shifted in place


# ----------------------------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------------------------

def make_layer(dtype, seed, backend):
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=dtype, seed=seed)
    layer = Qwen3NextGatedDeltaNet.from_hf(cfg, weights).compile(backend=backend)
    return cfg, weights, layer


def run_layer(backend, layer, *args):
    return run(backend, lambda *a, backend: layer(*a), *args)


@pytest.mark.parametrize("backend_", ["reference", "sim", pytest.param("cpu", marks=pytest.mark.slow)])
def test_layer_prefill_on_every_backend(backend_):
    """(The layer compiles some twenty kernels: on cpu that is g++ time, so cpu runs with --runslow.)"""
    test_layer_prefill(backend_, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_prefill(backend, dtype):
    cfg, weights, layer = make_layer(dtype, 3, backend)
    x = torch.randn(2, 73, cfg.hidden_size, generator=torch.Generator().manual_seed(5)).to(dtype)
    y = run_layer(backend, layer, x)
    assert y.dtype == dtype and y.shape == x.shape
    assert rel_err(y, gated_deltanet_layer_ref(x, weights, cfg)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_prefill_then_decode(backend, dtype):
    cfg, weights, layer = make_layer(dtype, 4, backend)
    x = torch.randn(2, 68, cfg.hidden_size, generator=torch.Generator().manual_seed(6)).to(dtype)
    cache, cache_ref = GDNCache(), GDNCache()
    steps = [slice(0, 65), slice(65, 66), slice(66, 67), slice(67, 68)]   # prefill, then 3 decode steps
    for s in steps:
        y = run_layer(backend, layer, x[:, s], cache)
        y_ref = gated_deltanet_layer_ref(x[:, s], weights, cfg, cache=cache_ref)
        assert rel_err(y, y_ref) <= TOL[dtype], s
    assert rel_err(cache.recurrent_state, cache_ref.recurrent_state) <= TOL[dtype]
    assert rel_err(cache.conv_state, cache_ref.conv_state) <= TOL[dtype]


def test_layer_per_head_layout():
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, seed=9)
    layer = Qwen3NextGatedDeltaNet.from_hf(cfg, weights, per_head=True).compile(backend="reference")
    x = torch.randn(1, 20, cfg.hidden_size, generator=torch.Generator().manual_seed(9))
    cache, cache_ref = GDNCache(), GDNCache()
    for s in (slice(0, 19), slice(19, 20)):
        y = layer(x[:, s], cache)
        assert rel_err(y, gated_deltanet_layer_ref(x[:, s], weights, cfg, cache=cache_ref)) <= 1e-5


def test_layer_chunked_continuation():
    cfg, weights, layer = make_layer(torch.float32, 6, "reference")
    x = torch.randn(1, 90, cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    cache, cache_ref = GDNCache(), GDNCache()
    for s in (slice(0, 40), slice(40, 90)):
        y = layer(x[:, s], cache)
        assert rel_err(y, gated_deltanet_layer_ref(x[:, s], weights, cfg, cache=cache_ref)) <= 1e-5
    assert rel_err(cache.recurrent_state, cache_ref.recurrent_state) <= 1e-5


def test_layer_state_dict_round_trip():
    cfg = Qwen3NextGDNConfig.small()
    weights = make_random_weights(cfg, dtype=torch.bfloat16, seed=8)
    layer = Qwen3NextGatedDeltaNet.from_hf(cfg, weights)
    hf = layer.hf_state_dict()
    assert set(hf) == set(weights)
    for name, t in weights.items():
        assert hf[name].dtype == t.dtype and torch.equal(hf[name], t), name
    other = Qwen3NextGatedDeltaNet(cfg, dtype=torch.bfloat16)
    other.load_state_dict(layer.state_dict())                   # its own format loads too
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), layer.state_dict().values()))
    layer.float().bfloat16()                                    # A_log and dt_bias stay exact fp32
    assert layer.A_log.dtype == torch.float32 and torch.equal(layer.A_log.data, weights["A_log"])


# ----------------------------------------------------------------------------------------------
# Errors name the caller's line
# ----------------------------------------------------------------------------------------------

def _line_of(marker):
    import inspect
    src, start = inspect.getsourcelines(test_argument_errors)
    return start + next(i for i, s in enumerate(src) if marker in s)


def test_argument_errors():
    q, k, v, g, beta, S0 = gdn_inputs(2, 8, 2, 4, 8, 8, torch.float32)
    cases = [
        (lambda: chunk_gated_delta_rule(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3]),  # mark:heads
         "multiple of the number of key heads", "mark:heads"),
        (lambda: fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=S0[:1]),  # mark:state
         "initial_state", "mark:state"),
        (lambda: chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 4, 8])),  # mark:cu
         "B == 1", "mark:cu"),
        (lambda: chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=0),  # mark:chunk
         "chunk_size", "mark:chunk"),
        (lambda: causal_conv1d(q[0, 0], torch.randn(2, 4)),  # mark:conv
         "channels last", "mark:conv"),
        (lambda: causal_conv1d_update(q[0, 0], torch.zeros(2, 2, 1), torch.randn(8, 4)),  # mark:update
         "conv_state", "mark:update"),
    ]
    for fn, message, marker in cases:
        with pytest.raises(GDNArgumentError, match=message) as info:
            fn()
        assert isinstance(info.value, pypto.ShapeError) and isinstance(info.value, ValueError)
        assert info.value.loc.file == __file__ and info.value.loc.line == _line_of(marker), marker

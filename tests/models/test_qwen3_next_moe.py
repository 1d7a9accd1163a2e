"""Qwen3NextSparseMoeBlock / Qwen3NextMLP (models/qwen3_next/moe.py) against the plain-torch oracle
(moe_reference.py, always) and transformers' modules with the same weights (when installed).

fp32: relative RMS <= 1e-4. bf16: no worse than the oracle's own bf16 run against fp32 (the oracle equals
transformers' block, test_the_reference_is_transformers_block). Run-time trip counts: experts with no
token (a loop of 0 chunks), every token to one expert, tails of the 16-row chunks, dynamic T (one trace
of each program for every T). dispatch_plan's blocked scan against a stable sort (several blocks, tails)."""
import pytest
import torch

import pypto
from models.qwen3_next import moe_reference as R
from models.qwen3_next.config import Qwen3NextConfig
from models.qwen3_next.moe import Qwen3NextMLP, Qwen3NextSparseMoeBlock, build_programs

CHUNK = 16                                   # rows per chunk: T = 7 .. 33 gives several chunks and tails


def rel_rms(a, b) -> float:
    a, b = a.float(), b.float()
    return ((a - b).pow(2).mean() / b.pow(2).mean()).sqrt().item()


def block(config, state, backend="sim", dtype=torch.float32):
    m = Qwen3NextSparseMoeBlock(config, dtype=dtype, rows_per_chunk=CHUNK)
    m.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    m.compile(backend=backend)
    return m


def ref(x, state, config):
    return R.sparse_moe_block(x, state, config.num_experts_per_tok, config.norm_topk_prob)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)                     # fixed tokens: a bf16 router near a tie picks as measured


@pytest.fixture(scope="module")
def tiny():
    c = Qwen3NextConfig.tiny()
    return c, R.random_state(c, generator=torch.Generator().manual_seed(0))


def one_expert_state(config, favourite: int, second: int, seed=1):
    """A router that sends every positive token to ``favourite`` first and ``second`` next."""
    st = R.random_state(config, generator=torch.Generator().manual_seed(seed))
    gate = torch.zeros_like(st["gate.weight"])
    gate[favourite] = 1.0
    gate[second] = 0.5
    st["gate.weight"] = gate
    return st


# ---------------------------------------------------------------------- the oracle and the weights
def test_the_reference_is_transformers_block(tiny):
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next",
                                   reason="transformers with Qwen3-Next is optional")
    c, st = tiny
    hf = modeling.Qwen3NextSparseMoeBlock(c.to_hf())
    hf.load_state_dict(st)
    x = torch.randn(2, 9, c.hidden_size)
    with torch.no_grad():
        assert rel_rms(ref(x, st, c), hf(x)) <= 1e-6


def test_state_dict_has_transformers_keys_and_layouts(tiny):
    c, st = tiny
    m = Qwen3NextSparseMoeBlock(c)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {k: tuple(v.shape) for k, v in st.items()}
    m.load_state_dict(st)
    assert all(torch.equal(m.hf_state_dict()[k], v) for k, v in st.items())
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next",
                                   reason="transformers with Qwen3-Next is optional")
    hf_keys = {k: tuple(v.shape) for k, v in modeling.Qwen3NextSparseMoeBlock(c.to_hf()).state_dict().items()}
    assert hf_keys == {k: tuple(v.shape) for k, v in m.state_dict().items()}


def test_a_wrong_state_dict_is_refused(tiny):
    c, st = tiny
    m = Qwen3NextSparseMoeBlock(c)
    bad = dict(st)
    bad["experts.down_proj"] = bad["experts.down_proj"][:, :, :-1]
    with pytest.raises(pypto.PyptoError, match="down_proj"):
        m.load_state_dict(bad)


# ---------------------------------------------------------------------- the block on sim and cpu
def test_the_block_matches_the_reference_with_dynamic_T(tiny):
    c, st = tiny
    m = block(c, st)
    for B, T in ((2, 7), (1, 33), (1, 1)):           # tails, several chunks per expert, one token
        x = torch.randn(B, T, c.hidden_size)
        out, logits = m(x, return_router_logits=True)
        assert out.shape == (B, T, c.hidden_size)
        assert rel_rms(out, ref(x, st, c)) <= 1e-4
        assert rel_rms(logits, torch.nn.functional.linear(x.reshape(B * T, -1), st["gate.weight"])) <= 1e-5
    assert [p.trace_count for p in m._programs[next(iter(m._programs))]] == [1, 1]


def test_the_block_matches_transformers_on_cpu(tiny):
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next",
                                   reason="transformers with Qwen3-Next is optional")
    c, st = tiny
    hf = modeling.Qwen3NextSparseMoeBlock(c.to_hf())
    hf.load_state_dict(st)
    x = torch.randn(2, 11, c.hidden_size)
    with torch.no_grad():
        expected = hf(x)
    assert rel_rms(block(c, st, backend="cpu")(x), expected) <= 1e-4


def test_bf16_is_no_worse_than_torch_bf16(tiny):
    c, st = tiny
    x = torch.randn(2, 13, c.hidden_size)
    exact = ref(x, st, c)
    stb = {k: v.bfloat16() for k, v in st.items()}
    torch_err = rel_rms(ref(x.bfloat16(), stb, c), exact)
    out = block(c, st, dtype=torch.bfloat16)(x.bfloat16())
    assert out.dtype == torch.bfloat16
    assert rel_rms(out, exact) <= torch_err * 1.05, (rel_rms(out, exact), torch_err)


def test_experts_with_no_tokens_and_one_expert_for_all():
    """Every token to expert 5 then 2: six experts run 0 chunks (a trip count of 0 read at run time),
    two run every token; with top-1 one expert takes all (and norm_topk_prob off: its weight is its
    probability, not 1)."""
    for k in (2, 1):
        c = Qwen3NextConfig.tiny(num_experts_per_tok=k, norm_topk_prob=k == 2)
        st = one_expert_state(c, favourite=5, second=2)
        x = torch.rand(1, 21, c.hidden_size) + 0.1           # positive: the router's order is fixed
        _, _, ids = R.route(x.reshape(21, -1), st["gate.weight"], k, True)
        assert set(ids.flatten().tolist()) == ({5, 2} if k == 2 else {5})
        assert rel_rms(block(c, st)(x), ref(x, st, c)) <= 1e-4


def test_grouped_matmul_with_counts_given():
    """The experts program alone, fed with counts computed here, zeros among them and a tail."""
    c = Qwen3NextConfig.tiny(num_experts_per_tok=1)
    st = R.random_state(c, generator=torch.Generator().manual_seed(3))
    _, experts = build_programs(c, pypto.float32, CHUNK, backend="sim")
    counts = torch.tensor([0, 17, 0, 0, 3, 32, 0, 1], dtype=torch.int32)
    N = int(counts.sum())
    offsets = (torch.cumsum(counts, 0) - counts).to(torch.int32)
    ids = torch.repeat_interleave(torch.arange(c.num_experts), counts.long())
    rows = torch.randperm(N)                                  # token t's row in expert order
    ids_by_token = ids[rows]                                  # so token t goes to expert ids[rows[t]]
    x = torch.randn(N, c.hidden_size)
    x_perm = torch.empty_like(x)
    x_perm[rows] = x
    w = torch.ones(N, 1)
    out = experts(x, x_perm, counts, offsets, rows.to(torch.int32), w,
                  st["experts.gate_up_proj"].reshape(-1, c.hidden_size),
                  st["experts.down_proj"].reshape(-1, c.moe_intermediate_size), st["shared_expert.gate_proj.weight"], st["shared_expert.up_proj.weight"],
                  st["shared_expert.down_proj.weight"], st["shared_expert_gate.weight"], torch.empty_like(x))
    I = c.moe_intermediate_size
    expected = torch.stack([R.swiglu_mlp(x[t], st["experts.gate_up_proj"][e, :I], st["experts.gate_up_proj"][e, I:],
                                         st["experts.down_proj"][e]) for t, e in enumerate(ids_by_token.tolist())])
    expected += torch.sigmoid(x @ st["shared_expert_gate.weight"].T) * R.swiglu_mlp(
        x, st["shared_expert.gate_proj.weight"], st["shared_expert.up_proj.weight"], st["shared_expert.down_proj.weight"])
    assert rel_rms(out, expected) <= 1e-4


def test_the_dense_form_inside_an_enclosing_trace(tiny):
    c, st = tiny
    m = Qwen3NextSparseMoeBlock(c)
    m.load_state_dict(st)

    @pypto.jit
    def layer(h: pypto.Tensor[[1, pypto.DYNAMIC, c.hidden_size], pypto.float32]):
        return m(h) + h

    x = torch.randn(1, 10, c.hidden_size)
    assert rel_rms(layer(x), ref(x, st, c) + x) <= 1e-4


def test_bad_input_is_a_clear_error(tiny):
    c, st = tiny
    m = Qwen3NextSparseMoeBlock(c)
    with pytest.raises(pypto.ShapeError, match="hidden_size is 64"):
        m(torch.randn(1, 3, 32))
    with pytest.raises(pypto.ShapeError, match=r"\[B, T, hidden\]"):
        m(torch.randn(3, c.hidden_size))


# ---------------------------------------------------------------------- the dense MLP
def test_the_mlp_matches_transformers_mlp(tiny):
    c, _ = tiny
    mlp = Qwen3NextMLP(c)
    g = torch.Generator().manual_seed(4)
    weights = {"gate_proj.weight": torch.randn(c.intermediate_size, c.hidden_size, generator=g) / 8,
               "up_proj.weight": torch.randn(c.intermediate_size, c.hidden_size, generator=g) / 8,
               "down_proj.weight": torch.randn(c.hidden_size, c.intermediate_size, generator=g) / 11}
    mlp.load_state_dict(weights)
    x = torch.randn(2, 5, c.hidden_size)
    expected = R.swiglu_mlp(x, weights["gate_proj.weight"], weights["up_proj.weight"], weights["down_proj.weight"])
    assert rel_rms(mlp(x), expected) <= 1e-5
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next",
                                   reason="transformers with Qwen3-Next is optional")
    hf = modeling.Qwen3NextMLP(c.to_hf())
    hf.load_state_dict(weights)
    with torch.no_grad():
        assert rel_rms(hf(x), expected) <= 1e-6


# ---------------------------------------------------------------------- the linear-cost dispatch plan
def _plan_reference(ids, E):
    """counts, offsets, rows (each (token, slot)'s row in expert order, tokens in order inside an expert)
    and token_of_row, from a stable sort of the flattened expert ids."""
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    rows = torch.empty_like(order)
    rows[order] = torch.arange(order.numel())
    counts = torch.bincount(flat, minlength=E)
    return counts, torch.cumsum(counts, 0) - counts, rows, order // ids.shape[1]


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_dispatch_plan_in_blocks(backend):
    """dispatch_plan's blocked prefix scan against a stable sort: blocks of 4 tokens, so N = 37 is ten
    blocks with a tail and N = 3 one partial block (dynamic N, one trace); experts with no token."""
    from models.qwen3_next.moe import dispatch_plan
    E, k = 6, 3

    @pypto.jit(backend=backend)
    def plan(ids: pypto.Tensor[[pypto.DYNAMIC, k], pypto.int64]):
        return dispatch_plan(ids, E, block=4)

    for N in (37, 3):
        scores = torch.randn(N, E)
        scores[:, 5] = -10.0                                  # expert 5 never picked
        ids = torch.topk(scores, k, -1).indices               # distinct experts per token, as top-k
        counts, offsets, rows, token_of_row = plan(ids)
        want = _plan_reference(ids, E)
        for got, exp in zip((counts, offsets, rows, token_of_row), want):
            assert got.dtype == torch.int32 and torch.equal(got.long(), exp.long())
    assert plan.trace_count == 1


def test_the_block_with_several_dispatch_blocks(tiny):
    """More tokens than one block of dispatch_plan's scan (DISPATCH_BLOCK): the carried per-expert
    prefix across blocks, bf16 and fp32."""
    from models.qwen3_next.moe import DISPATCH_BLOCK
    c, st = tiny
    T = DISPATCH_BLOCK + 45
    x = torch.randn(2, T, c.hidden_size)
    assert rel_rms(block(c, st)(x), ref(x, st, c)) <= 1e-4
    got = block(c, st, dtype=torch.bfloat16)(x.bfloat16())
    want = ref(x, st, c)
    own = ref(x.bfloat16(), {k_: v.bfloat16() for k_, v in st.items()}, c)
    assert rel_rms(got, want) <= 1.05 * rel_rms(own, want), (rel_rms(got, want), rel_rms(own, want))


@pytest.mark.parametrize("backend", ["sim", "cpu", "reference"])
def test_the_unpermute_kernel(backend):
    """unpermute.py's one-kernel unpermute and weighted sum against torch: fp32 and bf16 rows (fp32
    result), N = 37 (tiles of 16 tokens and a tail) and 5, H = 600 (a 512-column chunk and a tail), a row
    index outside y_perm an error naming the unpermute."""
    from models.qwen3_next.unpermute import unpermute
    k, H, DYN = 3, 600, pypto.DYNAMIC
    for dt in (torch.float32, torch.bfloat16):
        pdt = pypto.dtypes.from_torch(dt)

        @pypto.jit(backend=backend)
        def f(y: pypto.Tensor[[DYN, H], pdt], rows: pypto.Tensor[[DYN, k], pypto.int32],
              w: pypto.Tensor[[DYN, k], pdt]):
            return unpermute(y, rows, w)
        for N in (37, 5):
            y = torch.randn(N * k, H).to(dt)
            rows = torch.randperm(N * k).reshape(N, k).to(torch.int32)
            w = torch.rand(N, k).to(dt)
            want = (y[rows.long()].float() * w.float().unsqueeze(-1)).sum(1)
            got = f(y, rows, w)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    if backend != "reference":
        rows[1, 2] = N * k
        with pytest.raises(pypto.IndexOutOfRangeError, match="the MoE unpermute"):
            f(y, rows, w)


def test_the_block_matches_the_reference_on_cpu(tiny):
    """The two programs (row gather / scatter, blocked dispatch plan, unpermute kernel) built with g++."""
    c, st = tiny
    m = block(c, st, backend="cpu")
    for B, T in ((2, 19), (1, 3)):
        x = torch.randn(B, T, c.hidden_size)
        assert rel_rms(m(x), ref(x, st, c)) <= 1e-4

"""The whole Qwen3-Next causal LM (models/qwen3_next/model.py) against the plain-torch model of model_reference.py
(always) and transformers' Qwen3NextForCausalLM with the same weights (when transformers is installed): logits,
greedy tokens, prefill then decode through the caches, left-padded batches, dense-MLP layers, HF weights both ways,
bad input. The tiny config (Qwen3NextConfig.tiny: 3 GDN layers and 1 gated-attention layer, 8 experts top-2)."""
import inspect

import pytest
import torch

import pypto
from models.qwen3_next.config import Qwen3NextConfig
from models.qwen3_next.model import ModelInputError, Qwen3NextForCausalLM
from models.qwen3_next.model_reference import forward_ref, generate_ref, random_hf_weights

FP32_TOL = 1e-4
BF16_SLACK = 1.5        # our bf16 logits' error against fp32 may be at most this times transformers' own


def rel_rms(a, b, mask=None):
    a, b = a.double(), b.double()
    if mask is not None:                      # only real (not padding) positions
        a, b = a[mask.bool()], b[mask.bool()]
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def ids_of(B, T, vocab, seed):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def left_padded(prompts, pad=0):
    """[B, T] ids and mask of prompts of different lengths, padded on the left (transformers' convention)."""
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):] = p
        mask[b, T - len(p):] = 1
    return ids, mask


def build(cfg, weights, backend, dtype=torch.float32):
    model = Qwen3NextForCausalLM(cfg, dtype=dtype)
    model.load_state_dict(weights)
    return model.compile(backend=backend)


@pytest.fixture(scope="module")
def tiny():
    cfg = Qwen3NextConfig.tiny()
    return cfg, random_hf_weights(cfg, seed=1)


@pytest.fixture(scope="module")
def sim_model(tiny):
    return build(*tiny, "sim")


def hf_model(cfg, weights, dtype=torch.float32):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed: HF comparison skipped")
    hf = transformers.Qwen3NextForCausalLM(cfg.to_hf()).eval()
    hf.load_state_dict(weights)
    return hf.to(dtype)


# ------------------------------------------------------------------ logits
@pytest.mark.parametrize("backend", ["sim", pytest.param("cpu", marks=pytest.mark.slow)])
def test_logits_match_the_reference_and_transformers_through_the_hf_state_dict(tiny, sim_model, backend):
    cfg, weights = tiny
    model = sim_model if backend == "sim" else build(cfg, weights, backend)
    ids = ids_of(2, 11, cfg.vocab_size, seed=2)
    logits = model(ids)
    assert logits.shape == (2, 11, cfg.vocab_size) and logits.dtype == torch.float32
    assert rel_rms(logits, forward_ref(ids, weights, cfg)) <= FP32_TOL
    hf = hf_model(cfg, model.hf_state_dict())          # HF loads what we give back, strict
    with torch.no_grad():
        expected = hf(ids).logits
    assert rel_rms(logits, expected) <= FP32_TOL


def test_cpu_forward_then_prefill_and_two_decode_steps_match_the_reference(tiny):
    """The whole tiny model on the cpu backend (generated C++): the logits of a forward, then a prefill of 9
    tokens and 2 one-token decode steps through the caches, against the plain-torch model (no transformers)."""
    cfg, weights = tiny
    model = build(cfg, weights, "cpu")
    ids = ids_of(2, 11, cfg.vocab_size, seed=12)
    expected = forward_ref(ids, weights, cfg)
    logits = model(ids)
    assert logits.shape == (2, 11, cfg.vocab_size) and logits.dtype == torch.float32
    assert rel_rms(logits, expected) <= FP32_TOL
    caches = model.new_caches(2, 11)
    steps = [model(ids[:, :9], caches=caches)]
    for t in (9, 10):
        steps.append(model(ids[:, t:t + 1], caches=caches, position_ids=torch.full((2, 1), t)))
        assert rel_rms(steps[-1], expected[:, t:t + 1]) <= FP32_TOL, t
    assert rel_rms(torch.cat(steps, 1), expected) <= FP32_TOL


@pytest.mark.slow
def test_bf16_is_no_worse_than_transformers_bf16(tiny):
    cfg, weights = tiny
    ids = ids_of(1, 10, cfg.vocab_size, seed=4)
    hf32 = hf_model(cfg, weights)
    with torch.no_grad():
        exact = hf32(ids).logits
        hf_err = rel_rms(hf32.to(torch.bfloat16)(ids).logits, exact)
    bf16 = {k: v.to(torch.bfloat16) if k.split(".")[-1] not in ("A_log", "dt_bias") else v
            for k, v in weights.items()}
    ours = build(cfg, bf16, "sim", dtype=torch.bfloat16)(ids)
    assert ours.dtype == torch.bfloat16
    assert rel_rms(ours, exact) <= BF16_SLACK * hf_err, (rel_rms(ours, exact), hf_err)


# ------------------------------------------------------------------ caches and generation
def test_prefill_then_decode_through_the_caches_equals_the_full_forward(tiny, sim_model):
    cfg, weights = tiny
    ids = ids_of(2, 12, cfg.vocab_size, seed=5)
    full = sim_model(ids)
    caches = sim_model.new_caches(2, 12)
    steps = [sim_model(ids[:, :10], caches=caches)]
    for t in range(10, 12):                     # decode steps: one token each, the caches continue
        steps.append(sim_model(ids[:, t:t + 1], caches=caches, position_ids=torch.full((2, 1), t)))
    assert rel_rms(torch.cat(steps, 1), full) <= FP32_TOL


@pytest.mark.slow
def test_greedy_generate_matches_transformers_and_the_reference(tiny, sim_model):
    cfg, weights = tiny
    ids = ids_of(1, 7, cfg.vocab_size, seed=6)
    out = sim_model.generate(ids, max_new_tokens=6)
    assert out.shape == (1, 13) and torch.equal(out[:, :7], ids)
    assert torch.equal(out, generate_ref(ids, weights, cfg, 6))
    hf = hf_model(cfg, weights)
    with torch.no_grad():
        expected = hf.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, expected)


def test_batch_of_two_prompt_lengths_left_padded_generates_as_each_alone_and_as_transformers(tiny, sim_model):
    cfg, weights = tiny
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (9, 5)]
    ids, mask = left_padded(prompts)
    out = sim_model.generate(ids, max_new_tokens=3, attention_mask=mask)
    assert torch.equal(out[:, :9], ids)
    for b, p in enumerate(prompts):            # each row as if it ran alone
        alone = generate_ref(p[None], weights, cfg, 3)
        assert torch.equal(out[b, -3:], alone[0, -3:]), b
    hf = hf_model(cfg, weights)
    with torch.no_grad():
        expected = hf.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(out, expected)


@pytest.mark.slow
def test_left_padded_logits_match_the_reference_at_real_positions(tiny, sim_model):
    cfg, weights = tiny
    gen = torch.Generator().manual_seed(11)
    ids, mask = left_padded([torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (8, 3)])
    logits = sim_model(ids, attention_mask=mask)
    assert rel_rms(logits, forward_ref(ids, weights, cfg, attention_mask=mask), mask) <= FP32_TOL


@pytest.mark.slow
def test_dense_mlp_layers_from_mlp_only_layers_and_sparse_step():
    cfg = Qwen3NextConfig.tiny(decoder_sparse_step=2, mlp_only_layers=[3])   # only layer 1 is sparse
    assert [cfg.is_sparse_layer(i) for i in range(4)] == [False, True, False, False]
    weights = random_hf_weights(cfg, seed=8)
    assert "model.layers.0.mlp.gate_proj.weight" in weights and "model.layers.1.mlp.gate.weight" in weights
    model = build(cfg, weights, "sim")
    ids = ids_of(1, 6, cfg.vocab_size, seed=9)
    logits = model(ids)
    assert rel_rms(logits, forward_ref(ids, weights, cfg)) <= FP32_TOL
    hf = hf_model(cfg, model.hf_state_dict())
    with torch.no_grad():
        assert rel_rms(logits, hf(ids).logits) <= FP32_TOL


# ------------------------------------------------------------------ weights
def test_hf_state_dict_round_trip_and_tied_embeddings():
    cfg = Qwen3NextConfig.tiny(tie_word_embeddings=True)
    weights = random_hf_weights(cfg, seed=10)
    assert "lm_head.weight" not in weights
    model = Qwen3NextForCausalLM(cfg)
    model.load_state_dict(weights)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    back = model.hf_state_dict()
    for k, v in weights.items():
        assert torch.equal(back[k], v), k
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf_keys = set(transformers.Qwen3NextForCausalLM(cfg.to_hf()).state_dict())
    assert set(back) | {"lm_head.weight"} == hf_keys | {"lm_head.weight"}


def test_a_missing_or_misshaped_weight_is_a_clear_error(tiny):
    cfg, weights = tiny
    model = Qwen3NextForCausalLM(cfg)
    broken = dict(weights)
    del broken["model.norm.weight"]
    with pytest.raises(pypto.PyptoError, match="missing key 'model.norm.weight'"):
        model.load_state_dict(broken)
    broken = dict(weights, **{"model.layers.0.post_attention_layernorm.weight": torch.zeros(3)})
    with pytest.raises(pypto.PyptoError, match="post_attention_layernorm.weight"):
        model.load_state_dict(broken)


# ------------------------------------------------------------------ bad input
def test_bad_input_names_the_users_line(tiny, sim_model):
    cfg, _ = tiny
    cases = [
        (lambda: sim_model(torch.tensor([[1, cfg.vocab_size]])), ModelInputError, "input_ids\\[0, 1\\] = 256"),
        (lambda: sim_model(torch.tensor([[1, -1]])), ModelInputError, "not a token id"),
        (lambda: sim_model(torch.tensor([1, 2, 3])), pypto.ShapeError, "\\[batch, seq\\]"),
        (lambda: sim_model(torch.ones(1, 3)), pypto.TypeMismatchError, "integer token ids"),
        (lambda: sim_model(torch.ones(1, 3, dtype=torch.long), attention_mask=torch.ones(1, 4)),
         pypto.ShapeError, "attention_mask"),
        (lambda: sim_model(torch.ones(1, 3, dtype=torch.long), attention_mask=torch.tensor([[1, 0, 1]])),
         ModelInputError, "left"),
        (lambda: sim_model.generate(torch.ones(1, 3, dtype=torch.long), max_new_tokens=-1),
         ModelInputError, "max_new_tokens"),
    ]
    for call, error, message in cases:
        line = inspect.getsourcelines(call)[1]
        with pytest.raises(error, match=message) as info:
            call()
        assert info.value.loc is not None and info.value.loc.file == __file__ and info.value.loc.line == line, \
            (message, info.value.loc)

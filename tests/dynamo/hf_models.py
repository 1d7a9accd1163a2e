"""Tiny random-weight transformers models (Llama, Qwen3, Mistral, BERT, T5, GPT-2) for the torch.compile
benchmark and tests; ``transformers`` is optional (``unavailable()`` says why when it is missing)."""
from __future__ import annotations

import importlib.util

import torch

VOCAB = 128


def unavailable() -> str | None:
    return None if importlib.util.find_spec("transformers") else "transformers is not installed"


def _configs():
    import transformers as tf
    common = dict(vocab_size=VOCAB, max_position_embeddings=128)
    decoder = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, **common)
    return {
        "llama": (tf.LlamaConfig, decoder),
        "qwen3": (tf.Qwen3Config, dict(decoder, head_dim=8)),
        "mistral": (tf.MistralConfig, dict(decoder, sliding_window=None)),
        "bert": (tf.BertConfig, dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, **common)),
        "t5": (tf.T5Config, dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                 num_heads=4, decoder_start_token_id=0)),
        "gpt2": (tf.GPT2Config, dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    }


NAMES = ("llama", "qwen3", "mistral", "bert", "t5", "gpt2")


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """The tiny model ``name`` in eval mode, SDPA attention, fixed random weights."""
    import transformers as tf
    cls, kw = _configs()[name]
    cfg = cls(**kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    if name == "t5":
        return tf.T5ForConditionalGeneration(cfg).eval()
    if name == "bert":
        return tf.BertModel(cfg).eval()
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def inputs(name: str, batch: int, seq: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed + seq)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    if name == "t5":
        return {"input_ids": ids, "decoder_input_ids": ids[:, : max(1, seq // 2)].contiguous()}
    return {"input_ids": ids}


def main_output(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out.last_hidden_state

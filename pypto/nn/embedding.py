"""Embedding: a lookup table of rows picked by integer ids."""
from __future__ import annotations

import torch

from . import functional as F, init
from .module import Module


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.weight = init.normal((num_embeddings, embedding_dim), dtype)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def default_dynamic_dims(self, arg: str, rank: int) -> tuple:
        return tuple(range(rank))          # ids [batch, seq]: every dim is a run-time size

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")

"""``PagedKVCache``: the keys and values of every full-attention layer of a model, in fixed-size pages.

One cache object serves all the model's full-attention layers (``layers``, their indices in the model):
each layer has its own pages, k_pages[layer] / v_pages[layer] [num_blocks, block_size, kv_heads, head_dim],
and its own lengths, seq_lens[layer] [B] int32; the block table [B, max_blocks] int32 is shared, because
every layer stores the same tokens: page block_table[b, j] of any layer holds tokens
j*block_size ... (j+1)*block_size - 1 of sequence b. Pages are given out on demand (``reserve``) from a
free list, in the order ``allocate(batch, blocks=...)`` was given (any order: the kernels only follow the
table). Entries not given out are -1.

Only real tokens are stored: with left padding, a sequence's pads are never written, so seq_lens counts
real tokens and decode needs no mask. The block table and seq_lens are the device tensors the attention's
decode kernel reads in its control program (``block_table[b, j].item()``, ``seq_lens[b].item()``); the
host side here only decides which page comes next and advances the lengths after a layer ran.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch

from pypto.errors import PyptoError


class CacheError(PyptoError):
    """A paged KV cache cannot hold what is asked of it (out of pages, a sequence past max_blocks), or it is
    used before ``allocate``."""


class PagedKVCache:
    def __init__(self, config, num_blocks: int, block_size: int = 16, dtype=torch.float32,
                 layers: Optional[Iterable[int]] = None, max_blocks_per_seq: Optional[int] = None):
        if num_blocks < 1 or block_size < 1:
            raise CacheError(f"PagedKVCache: num_blocks and block_size must be >= 1, found {num_blocks}, {block_size}")
        self.num_blocks, self.block_size, self.dtype = num_blocks, block_size, dtype
        self.kv_heads, self.head_dim = config.num_key_value_heads, config.head_dim
        if layers is None:
            layers = [i for i, t in enumerate(config.layer_types) if t == "full_attention"]
        self.layers = list(layers)
        self.max_blocks_per_seq = max_blocks_per_seq or num_blocks
        shape = (num_blocks, block_size, self.kv_heads, self.head_dim)
        self.k_pages = {i: torch.zeros(shape, dtype=dtype) for i in self.layers}
        self.v_pages = {i: torch.zeros(shape, dtype=dtype) for i in self.layers}
        self.block_table: Optional[torch.Tensor] = None
        self.seq_lens: dict = {}
        self._free: list = []

    # ------------------------------------------------------------------ allocation
    def allocate(self, batch: int, blocks: Optional[Iterable[int]] = None) -> "PagedKVCache":
        """Start ``batch`` empty sequences; pages are then given out in the order of ``blocks`` (default 0, 1 ...)."""
        order = list(range(self.num_blocks)) if blocks is None else [int(b) for b in blocks]
        if sorted(order) != sorted(set(order)) or any(not 0 <= b < self.num_blocks for b in order):
            raise CacheError(f"PagedKVCache.allocate: blocks must be distinct page numbers in [0, {self.num_blocks})"
                             f", found {order}")
        self.batch = batch
        self._free = order
        self.block_table = torch.full((batch, self.max_blocks_per_seq), -1, dtype=torch.int32)
        self.seq_lens = {i: torch.zeros(batch, dtype=torch.int32) for i in self.layers}
        return self

    @property
    def allocated(self) -> bool:
        return self.block_table is not None

    def lengths(self, layer: int) -> torch.Tensor:
        """Tokens stored per sequence for ``layer`` ([B] int32, the device tensor the kernel reads)."""
        return self._lens(layer)

    def is_empty(self, layer: int) -> bool:
        return not self.allocated or int(self._lens(layer).max()) == 0

    def reserve(self, layer: int, new_lens: torch.Tensor) -> None:
        """Make sure sequence b has pages for its first new_lens[b] tokens (taken from the free list)."""
        lens = self._lens(layer)
        need = -(-new_lens.to(torch.int64) // self.block_size)
        for b in range(self.batch):
            if int(need[b]) > self.max_blocks_per_seq:
                raise CacheError(f"PagedKVCache: sequence {b} needs {int(new_lens[b])} tokens = {int(need[b])} pages "
                                 f"of {self.block_size}, more than max_blocks_per_seq={self.max_blocks_per_seq}")
            for j in range(int(need[b])):
                if int(self.block_table[b, j]) < 0:
                    if not self._free:
                        raise CacheError(f"PagedKVCache: out of pages (all {self.num_blocks} blocks of "
                                         f"{self.block_size} tokens are in use); sequence {b} of layer {layer} "
                                         f"needs {int(new_lens[b])} tokens, has {int(lens[b])}",
                                         hint="make the cache with more num_blocks")
                    self.block_table[b, j] = self._free.pop(0)

    def advance(self, layer: int, new_lens: torch.Tensor) -> None:
        self._lens(layer).copy_(new_lens.to(torch.int32))

    def _lens(self, layer: int) -> torch.Tensor:
        if not self.allocated:
            raise CacheError("PagedKVCache: call allocate(batch) before the first use")
        if layer not in self.seq_lens:
            raise CacheError(f"PagedKVCache: layer {layer} is not one of this cache's layers {self.layers}")
        return self.seq_lens[layer]

    # ------------------------------------------------------------------ reading back (tests, debugging)
    def keys(self, layer: int, b: int) -> torch.Tensor:
        """Sequence b's stored keys of ``layer`` in token order, [len, kv_heads, head_dim]."""
        return self._gather(self.k_pages[layer], layer, b)

    def values(self, layer: int, b: int) -> torch.Tensor:
        return self._gather(self.v_pages[layer], layer, b)

    def _gather(self, pages, layer: int, b: int) -> torch.Tensor:
        n = int(self._lens(layer)[b])
        nb = -(-n // self.block_size)
        rows = [pages[int(self.block_table[b, j])] for j in range(nb)]
        if not rows:
            return pages.new_zeros(0, self.kv_heads, self.head_dim)
        return torch.cat(rows)[:n]

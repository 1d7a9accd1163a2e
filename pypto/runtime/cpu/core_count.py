"""How many cores the cpu backend runs a launch on: fewer than the task asks for when the kernel is
block-count free (pypto/ir/block_count.py), the verdict cached per Kernel object."""
from __future__ import annotations

import weakref

from ...ir.block import Kernel
from ...ir.block_count import block_count_free

_FREE: dict[int, tuple] = {}     # id(Kernel) -> (weakref to it, block_count_free(kernel))


def _free_cached(kernel: Kernel) -> bool:
    hit = _FREE.get(id(kernel))
    if hit is not None and hit[0]() is kernel:
        return hit[1]
    free = block_count_free(kernel)
    try:
        _FREE[id(kernel)] = (weakref.ref(kernel, lambda _, k=id(kernel): _FREE.pop(k, None)), free)
    except TypeError:
        pass
    return free


def cores_to_run(kernel: Kernel | None, block_dim: int, threads: int, per_thread: int = 2) -> int:
    """How many cores the cpu backend runs a launch of ``block_dim`` cores on: two per host
    thread when the kernel is block-count free (some balancing between threads; each core's
    tiles stay a few tiles apart: at 8 cores, 512-byte tiles already ran 2x slower), else all."""
    target = max(1, threads) * per_thread
    if kernel is None or block_dim <= target or not _free_cached(kernel):
        return block_dim
    return target

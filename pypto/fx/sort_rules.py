"""ATen conversions for topk, sort and accumulating index_put (what index_add decomposes into), for
fx/rules.py's table. Sort results are always stable: a valid answer for torch's unstable sort too."""
from __future__ import annotations

import torch

from ..frontend import api


def topk(cx, input, k, dim=-1, largest=True, sorted=True):
    return tuple(api.topk(input, k, dim, largest, sorted))


def sort(cx, input, dim=-1, descending=False, stable=None):
    return tuple(api.sort(input, dim, descending))


def index_put_accumulate(cx, input, indices, values, accumulate=False):
    """x.index_put_((idx,), v, accumulate=True), i.e. torch.index_add(x, 0, idx, v) as core ATen writes it:
    ``values`` broadcast to [len(idx), *x.shape[1:]]."""
    (index,) = indices
    want = [index.shape[0], *input.shape[1:]]
    if list(values.shape) != want:
        values = api.expand(api.reshape(values, [1] * (len(want) - values.ndim) + list(values.shape)), *want) \
            if values.ndim < len(want) else api.expand(values, *want)
    return api.index_add(input, 0, index, api.cast(values, input.dtype))


def index_put_accepts(a):
    if a.get("accumulate") is not True:
        return "index_put without accumulate (an index copy) has no pypto rule"
    idx = a.get("indices")
    if not isinstance(idx, (list, tuple)) or len(idx) != 1 or not isinstance(idx[0], torch.fx.Node):
        return "index_put: only one index tensor, for dim 0"
    v = idx[0].meta.get("val")
    if not isinstance(v, torch.Tensor) or v.dim() != 1 or v.dtype not in (torch.int32, torch.int64):
        return "index_put: the index must be a 1-D int32 / int64 tensor"
    return None

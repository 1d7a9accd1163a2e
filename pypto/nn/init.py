"""Default weight initialisation, as torch.nn's layers do it (so models start from the same
distributions): uniform in +-1/sqrt(fan_in) (torch's kaiming_uniform with a=sqrt(5)) for weights and
biases of Linear/Conv1d, N(0, 1) for Embedding, ones/zeros for norms."""
from __future__ import annotations

import math

import torch

from .. import dtypes
from .parameter import Parameter


def torch_dtype(dtype) -> torch.dtype:
    return dtypes.to_dtype(dtypes.float32 if dtype is None else dtype).torch_dtype


def uniform_fan_in(shape, fan_in: int, dtype=None) -> Parameter:
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return Parameter(torch.empty(shape, dtype=torch.float32).uniform_(-bound, bound).to(torch_dtype(dtype)))


def normal(shape, dtype=None) -> Parameter:
    return Parameter(torch.randn(shape, dtype=torch.float32).to(torch_dtype(dtype)))


def ones(shape, dtype=None) -> Parameter:
    return Parameter(torch.ones(shape, dtype=torch_dtype(dtype)))


def zeros(shape, dtype=None) -> Parameter:
    return Parameter(torch.zeros(shape, dtype=torch_dtype(dtype)))

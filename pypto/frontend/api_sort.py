"""Traced selection and ordering, torch-named: ``pypto.topk``, ``sort``, ``argsort``.

Indices are int64, as torch. Among equal values the lower index comes first (what torch.sort's
``stable=True`` guarantees; torch.topk's own tie order is unspecified)."""
from __future__ import annotations

from typing import NamedTuple

from .api import as_tensor, emit
from .api_reduce import normalize_dim
from .api_shape import gather
from .tensor import Tensor

__all__ = ["topk", "TopKResult", "sort", "SortResult", "argsort"]


class TopKResult(NamedTuple):
    """``(values, indices)`` as torch.return_types.topk."""
    values: Tensor
    indices: Tensor


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopKResult:
    """The ``k`` largest (``largest=False``: smallest) elements along ``dim`` and their int64 indices, best
    first; ties lowest index first. The result is always sorted (``sorted=False`` is allowed: torch then
    leaves the order unspecified). ``k`` is a static int and the dim's size static; other dims may be
    dynamic. Values and indices are two ops (each the same k rounds, see ops/sort.py); one left unused
    is not computed."""
    x = as_tensor(input, "topk")
    d = normalize_dim(x, dim, "topk")
    attrs = {"k": k, "dim": d, "largest": bool(largest)}
    return TopKResult(emit("topk", [x], {**attrs, "values": True}), emit("topk", [x], attrs))


class SortResult(NamedTuple):
    """``(values, indices)`` as torch.return_types.sort."""
    values: Tensor
    indices: Tensor


def argsort(input, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The int64 indices that sort ``input`` along ``dim``; always stable (equal elements keep their order,
    what torch guarantees with ``stable=True``). n * n work per row of n: meant for rows up to a few
    hundred (the experts of a router); the dim's size must be static."""
    x = as_tensor(input, "sort")
    d = normalize_dim(x, dim, "sort") if x.ndim else 0
    return emit("argsort", [x], {"dim": d, "descending": bool(descending)})


def sort(input, dim: int = -1, descending: bool = False, stable: bool = False) -> SortResult:
    """``(values, indices)`` of ``input`` sorted along ``dim``, as torch.sort with ``stable=True`` (the order
    is stable whatever ``stable`` says). The values are gathered at the indices."""
    x = as_tensor(input, "sort")
    indices = argsort(x, dim, descending)
    d = normalize_dim(x, dim, "sort") if x.ndim else 0
    return SortResult(gather(x, d, indices) if x.ndim else x, indices)

"""``pypto.Parameter``: a torch tensor that a Module registers as a weight.

It is a plain CPU torch tensor (no autograd: pypto compiles inference) tagged so that assigning it
to a Module attribute registers it. When a module is compiled, each parameter becomes a graph
input, so one compilation serves any weight values of the same shape and dtype.
"""
from __future__ import annotations

import torch

from .. import dtypes
from ..errors import TypeMismatchError


class Parameter(torch.Tensor):
    def __new__(cls, data=None, requires_grad: bool = False):
        from ..frontend.tensor import Tensor
        if data is None:
            data = torch.empty(0)
        if isinstance(data, Tensor):
            raise TypeMismatchError("pypto.Parameter needs concrete data (a torch tensor), found a traced "
                                    "pypto.Tensor", hint="create weights outside forward, e.g. with pypto.randn")
        if not isinstance(data, torch.Tensor):
            raise TypeMismatchError(f"pypto.Parameter: expected a torch tensor, found {type(data).__name__}")
        dtypes.from_torch(data.dtype)        # a dtype pypto can compile
        return torch.Tensor._make_subclass(cls, data.detach(), requires_grad)

    # results of torch ops on a Parameter are plain tensors, as with torch.nn.Parameter
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.data.clone(memory_format=torch.preserve_format), self.requires_grad)
        return memo[id(self)]

    def __reduce_ex__(self, proto):
        return (_rebuild_parameter, (self.data, self.requires_grad))

    def __repr__(self) -> str:
        return "pypto.Parameter containing:\n" + repr(self.data)


def _rebuild_parameter(data, requires_grad):
    return Parameter(data, requires_grad)

"""Linear and Identity layers."""
from __future__ import annotations

from . import functional as F, init
from .module import Module


class Linear(Module):
    """``y = x @ weight.T + bias``; weight [out_features, in_features] (torch's layout and state-dict keys)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = init.uniform_fan_in((out_features, in_features), in_features, dtype)
        if bias:
            self.bias = init.uniform_fan_in((out_features,), in_features, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    def forward(self, input):
        return input

"""Activation layers. The parameterless ones are generated from a table: layer name -> function."""
from __future__ import annotations

from . import functional as F
from .module import Module

_SIMPLE = {"SiLU": F.silu, "ReLU": F.relu, "Sigmoid": F.sigmoid, "Tanh": F.tanh}


def _simple_layer(name: str, fn):
    def forward(self, input):
        return fn(input)
    return type(name, (Module,), {"forward": forward, "__doc__": f"Elementwise {fn.__name__}, as torch.nn.{name}.",
                                  "__module__": __name__})


for _name, _fn in _SIMPLE.items():
    globals()[_name] = _simple_layer(_name, _fn)
SiLU, ReLU, Sigmoid, Tanh = (globals()[n] for n in _SIMPLE)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

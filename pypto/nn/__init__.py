"""pypto.nn: Module, Parameter and layers, used like torch.nn.

Calling a module compiles its forward (parameters and buffers become graph inputs; see
``Module.compile`` for backends and dynamic dims) and runs it: torch tensors in, torch tensors out.
"""
from .parameter import Parameter
from .module import Module, StateDictError, IncompatibleKeys
from . import functional
from .linear import Linear, Identity
from .norm import RMSNorm, LayerNorm
from .embedding import Embedding
from .conv import Conv1d
from .activation import SiLU, GELU, ReLU, Sigmoid, Tanh, Softplus, Softmax
from .container import Sequential, ModuleList, ModuleDict

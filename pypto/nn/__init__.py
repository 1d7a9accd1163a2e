"""pypto.nn: Module, Parameter and layers, used like torch.nn.

Calling a module (outside a trace) compiles its forward with the ``pypto.jit`` machinery and runs
it: torch tensors in, torch tensors out. Choices (see module.py, compiler.py):

- Parameters and buffers are graph inputs, not constants: one compilation serves new weights
  (``load_state_dict``); a new dtype (``.half()``) or shape is a new cache entry. Tied weights are
  one input. Buffers assigned or written in forward (``self.buf = ...``, ``self.buf[...] = ...``) are
  written back after the run. Plain tensor attributes are captured as constants: register tensors
  that change as buffers.
- The cache key is forward's arguments (tensor dtypes, static dims, the equality pattern of dynamic
  dims, non-tensor values), the state's dtypes/shapes and the modules' train/eval flags.
- Dynamic dims: annotations on forward win; else ``compile(dynamic=...)``; else the module's
  ``default_dynamic_dims``: every dim but the last for [batch, seq, hidden] inputs (norms: all but the
  normalized dims; Conv1d: batch and time; Embedding: all). Dynamic dims are duck-sized: equal values
  at trace time share one size symbol, so x [B, T, H] and mask [B, T] broadcast; named dims
  (``dynamic={"x": {0: "B", 1: "T"}}``) never merge.
- A module called inside a trace (a submodule, or a module inside a ``@pypto.jit`` function) is
  inlined; its parameters are the enclosing module's inputs (or constants in a plain jit function).
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

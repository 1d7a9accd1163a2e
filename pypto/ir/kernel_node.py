"""Kernels as graph nodes: what a Professional-mode (``pl.jit``) or Tile-level (``pt.kernel``) kernel called
inside a traced pypto function hands to the Tensor-level pipeline, defined here, below the op registry and
the passes, so that neither imports the front end that made the kernel.

A call records one ``custom_kernel`` TensorGraph node (``pypto/ops/kernel_node.py``) whose inputs are the
kernel's tensor arguments (``KernelNode.params`` order) and whose results are the new values of the
arguments it writes (``KernelNode.outputs``), read through ``kernel_result`` nodes. The node's
``attrs["kernel"]`` is the ``KernelNode``:

* ``reference(tensors, env)``: its meaning on torch tensors (the ``reference`` backend; the pt kernel's
  tile interpreter, or the pl kernel's own function given to it);
* ``build(machine)``: the compiled kernel for a machine, a ``KernelBuild`` -- Block IR that needs no
  further pass (on-chip addresses, synchronisation and event ids are the front end's), its GM
  workspaces, its scalar arguments (expressions over the traced graph's sizes) and its block_dim.

The tiling pass gives each argument a GM buffer (``passes/kernel_nodes.py``) and emits a ``KernelCall``
item of the TileGraph, which becomes one Task of the ExecutionGraph: its GM accesses are the kernel's
loads and stores of the bound buffers, so the host runtime orders it against the other tasks by the one
dependency model (runtime/host/deps.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SourceLoc
from .block import Kernel


@dataclass
class KernelBuild:
    """One compiled kernel of a node. ``workspaces``: (GM param, buffer shape, dtype) the launch allocates;
    ``views``: (GM param, shape, dtype, base GM param) buffers over a workspace's bytes; ``scalars``:
    kernel scalar param -> value (an int or an expression of the graph's sizes)."""
    kernel: Kernel
    workspaces: list = field(default_factory=list)
    views: list = field(default_factory=list)
    scalars: dict = field(default_factory=dict)
    block_dim: object = 1


class KernelNode:
    """The interface a front end's kernel call implements (see the module docstring). ``params``: the
    kernel's tensor params in node-input order; ``outputs``: those it writes, in result order (a param in
    ``fresh`` is an output only: the kernel writes all of it, so it has no old value to pass); ``level``:
    "pro" or "tile" (the report's decisions name it)."""
    name: str = "kernel"
    level: str = "kernel"
    params: tuple = ()
    outputs: tuple = ()
    fresh: dict = {}           # written params that are not inputs (written whole): param -> ValueInfo
    loc: SourceLoc | None = None

    def build(self, machine) -> KernelBuild:
        raise NotImplementedError

    def reference(self, tensors: dict, scalars: dict) -> dict:
        """tensors: param -> torch tensor (the node's inputs; written ones are copies the reference may
        change); scalars: the node's ``attrs["scalars"]`` evaluated; returns param -> new value per output."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.level}:{self.name}"


@dataclass
class KernelCall:
    """A TileGraph item: one launch of a prebuilt kernel. ``gm_args``: kernel GM param -> buffer."""
    name: str
    build: KernelBuild
    gm_args: dict
    loc: SourceLoc | None = None
    level: str = "kernel"             # KernelNode.level: "pro" | "tile"

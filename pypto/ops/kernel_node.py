"""Kernel nodes: a Professional-mode or Tile-level kernel called inside a traced function (``ir/kernel_node.py``).

``custom_kernel``: inputs are the kernel's tensor arguments in ``attrs["kernel"].params`` order; its result
is a list of ValueInfo, one per written argument (``attrs["kernel"].outputs``): the argument's new value,
of the argument's shape and dtype. ``kernel_result`` (attrs ``index``) reads one of them, as
``loop_result`` reads a loop's. ``attrs["scalars"]``: the kernel's run-time scalar arguments (expressions of
the graph's sizes, evaluated before the reference runs). The reference is the kernel's own (``KernelNode.reference``). The
node runs on no unit of the Tensor-level lowering: the tiling pass passes it through to its prebuilt
kernel (``passes/kernel_nodes.py``).
"""
from __future__ import annotations

import torch

from ..errors import PyptoError, ShapeError
from ..ir.tensor_graph import ValueInfo
from .registry import OpDef, register


def _kernel_infer(ins, attrs):
    node = attrs["kernel"]
    if len(ins) != len(node.params):
        raise ShapeError(f"kernel {node.name} takes {len(node.params)} tensors ({', '.join(node.params)}), "
                         f"found {len(ins)}", loc=node.loc)
    by_param = dict(zip(node.params, ins)) | dict(node.fresh)
    return [ValueInfo(tuple(by_param[p].shape), by_param[p].dtype, p) for p in node.outputs]


def _kernel_ref(ins, attrs):
    node = attrs["kernel"]
    tensors = dict(zip(node.params, ins))
    if any(t.device.type == "meta" for t in ins) and not node.fresh:
        return [torch.empty_like(tensors[p]) for p in node.outputs]
    # the kernel writes its arguments in place: give it copies, so the node's inputs keep their values
    tensors = {p: (t.clone() if p in node.outputs else t) for p, t in tensors.items()}
    out = node.reference(tensors, dict(attrs.get("scalars") or {}))
    return [out[p] for p in node.outputs]


def _result_infer(ins, attrs):
    results = ins[0]
    k = attrs["index"]
    if not isinstance(results, (list, tuple)) or not 0 <= k < len(results):
        raise PyptoError(f"kernel_result {k} of a node with {len(results)} results")
    return results[k]


register(OpDef("custom_kernel", "kernel", _kernel_infer, _kernel_ref, unit="none", flops_fn=lambda i, a, o: 0,
               doc="a pl / pt kernel called in a traced function; attrs: kernel (ir.kernel_node.KernelNode)"))
register(OpDef("kernel_result", "kernel", _result_infer, lambda ins, attrs: ins[0][attrs["index"]], unit="none",
               num_inputs=1, flops_fn=lambda i, a, o: 0, doc="attrs: index (which written argument)"))

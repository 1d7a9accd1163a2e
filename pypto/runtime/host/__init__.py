"""The host side of a run, one for every backend (sim, cpu, npu): what the host and the AICPU do
around the kernels. A backend runs a graph as

    env = bind_sizes(graph, args, env)                  # sizes.py
    bufs = GMBuffers(graph, args, env)                   # buffers.py
    geo = Geometry(bufs)                                 # regions.py
    instances, submissions = expand(graph, env, geo)     # control.py (dependencies: deps.py)

and then launches each instance after its ``deps`` in its own way.

Modules, in the order a run uses them:
  sizes.py     size symbols of the run; the sizes a kernel's GM params take from their buffers
  buffers.py   GM tensors of the run: arguments checked, outputs / workspaces allocated, views
  regions.py   GM regions as 2-D boxes of their base buffers
  deps.py      task dependencies from overlapping boxes (RAW / WAR / WAW), the one dependency model
  control.py   the control program: loops expanded into task instances, submissions (stitching)
  exprs.py     sympy scalar expressions compiled into Python (also the sim's block compiler's)
  one_task.py  the one-task graph of ``run_kernel``
  abi_args.py  a task instance's scalar arguments for generated code (cpu, npu)
  work.py      the work of a run counted from its Block IR (GM bytes, FLOPs, instructions: the cpu report)

What the backends keep: sim (runtime/sim) the machine model: cores, pipes, timing, the scheduler of
instances onto cores, the checks; cpu (runtime/cpu) the g++ build, ctypes launches and the run
order over host threads; npu (runtime/npu) the bisheng build and torch_npu launches.
"""
from __future__ import annotations

from .abi_args import abi_scalars
from .buffers import GMBuffers
from .control import TaskInstance, expand, kernel_accesses, written_bases
from .one_task import one_task_graph
from .regions import Geometry
from .sizes import bind_sizes, kernel_sizes

__all__ = ["GMBuffers", "abi_scalars", "Geometry", "TaskInstance", "bind_sizes", "expand", "kernel_accesses",
           "kernel_sizes", "one_task_graph", "written_bases"]

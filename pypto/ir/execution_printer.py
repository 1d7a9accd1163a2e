"""Text form of an ExecutionGraph: buffers, then the control program with its tasks."""
from __future__ import annotations

from .execution import ExecutionGraph, Loop, Task


def _task_line(t: Task) -> str:
    args = ", ".join(f"{k}={v}" for k, v in t.gm_args.items())
    scal = ", ".join(f"{k}={v}" for k, v in t.scalars.items())
    dim = f" x{t.block_dim}" if t.block_dim != 1 else ""
    loc = f"  # {t.loc}" if t.loc else ""
    return f"task {t.name or t.kernel}: {t.kernel}{dim}({args}{'; ' + scal if scal else ''}){loc}"


def print_execution_graph(g: ExecutionGraph) -> str:
    lines = [f"execution_graph  inputs({', '.join(g.inputs)})  outputs({', '.join(g.outputs)})"]
    for b in g.buffers.values():
        view = f"  view of {b.view_of}+{b.view_offset}" if b.view_of else ""
        lines.append(f"  buffer {b.name}: {b.role} {b.dtype}[{', '.join(map(str, b.shape))}]{view}")

    def rec(items, depth):
        pad = "  " * depth
        for it in items:
            if isinstance(it, Loop):
                lines.append(f"{pad}loop {it.var} in range({it.start}, {it.stop}, {it.step}):")
                rec(it.body, depth + 1)
            else:
                lines.append(pad + _task_line(it))
    rec(g.program, 1)
    return "\n".join(lines)

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
                cond = branch_condition(it)
                head = f"if {cond}:  # {it.var}: a run-time branch" if cond is not None else \
                    f"loop {it.var} in range({it.start}, {it.stop}, {it.step}):"
                lines.append(pad + head)
                rec(it.body, depth + 1)
            else:
                lines.append(pad + _task_line(it))
    for name, r in g.scalar_reads.items():
        lines.append(f"  data scalar {name} = {r.buffer}[{', '.join(map(str, r.index))}]  (read by the control program)")
    rec(g.program, 1)
    return "\n".join(lines)


def branch_condition(loop):
    """The condition of a run-time branch (a Loop of 1 trip when it holds, else 0), or None."""
    import sympy
    stop = loop.stop
    if not (isinstance(stop, sympy.Piecewise) and len(stop.args) == 2 and loop.start == 0 and loop.step == 1):
        return None
    (a, c), (b, t) = stop.args
    if t != sympy.true:
        return None
    if (a, b) == (1, 0):
        return c
    if (a, b) == (0, 1):
        return sympy.Not(c)
    return None

"""The scalar arguments of one launch of generated code (the cpu and npu backends): a task
instance's values for its kernel's ABI (codegen.abi.KernelABI: ``ints``, then ``reals``)."""
from __future__ import annotations

from ...errors import PyptoError


def abi_scalars(abi, inst) -> tuple[dict, dict]:
    """({int arg: value}, {real arg: value}) from the instance's scalars, its GM params' sizes and
    the program's sizes (kernel_env); an argument none of them gives is an error at the task's line."""
    env = inst.kernel_env()

    def value(a):
        v = env.get(a.name)
        if v is None:
            raise PyptoError(f"task {inst.label}: no value for {a.name} of kernel {inst.task.kernel}",
                             loc=inst.task.loc)
        return v
    return {a.name: int(value(a)) for a in abi.ints}, {a.name: float(value(a)) for a in abi.reals}

"""Data scalars at run time: the control program reads an element of an integer argument (a
``pypto.item``, ir.execution.ScalarRead) when an expression first needs its symbol.

``ScalarEnv`` is the environment the control program is expanded under (sizes, loop variables): a
dict whose missing data-scalar names are read on lookup (``__missing__``), so a read happens where the
program first needs it — a loop bound, a task's scalar, a view offset, a branch's condition — and
inside a branch only when the branch is taken. ``ScalarReader`` does the reads: the index evaluated
under the env, checked against the argument's shape, the value checked >= 0, each distinct element
read once per run (``count``: the reads made, which the sim charges to the AICPU's control thread).
A read of a tensor the program computes (``ScalarRead.source``) first calls ``before`` (set by
control.expand), which has the backend run the tasks expanded so far until that element's writers
are done.
"""
from __future__ import annotations

import torch

from ...errors import IndexOutOfRangeError, PyptoError
from .exprs import compile_tuple


class ScalarReader:
    """Reads the data scalars ``reads`` (name -> ScalarRead) from ``tensor_of(buffer name)`` (a torch
    tensor with the argument's data, or None when the run has none: a timing-only run of meta tensors)."""

    def __init__(self, reads: dict, tensor_of):
        self.reads, self.tensor_of = reads, tensor_of
        self.index = {n: compile_tuple(list(r.index), f"pypto.item index of {r.buffer}", r.loc)
                      for n, r in reads.items()}
        self.values: dict = {}          # (buffer, index) -> value: each element read once per run
        self.count = 0
        self.before = None              # (ScalarRead, index, env) -> None: wait for the element's writers

    def read(self, name: str, env) -> int:
        r = self.reads[name]
        idx = tuple(int(i) for i in self.index[name](env))
        key = (r.buffer, idx)
        hit = self.values.get(key)
        if hit is not None:
            return hit
        t = self.tensor_of(r.buffer)
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            if getattr(r, "source", None) is not None:
                raise PyptoError(f"the control program reads {r.buffer}[{', '.join(map(str, idx))}] (pypto.item), "
                                 "which this program computes, but a timing-only run computes no data", loc=r.loc,
                                 hint="run with data (timing_only=False), or compute the value in a program of "
                                      "its own and pass it in as an argument")
            raise PyptoError(f"the control program reads {r.buffer}[{', '.join(map(str, idx))}] (pypto.item) but "
                             f"this run has no data for '{r.buffer}'", loc=r.loc,
                             hint="a timing-only run still needs the real tensors the control program reads")
        shape = tuple(t.shape)
        if self.before is not None and len(idx) == len(shape) and all(0 <= i < n for i, n in zip(idx, shape)):
            self.before(r, idx, env)
        if len(idx) != len(shape) or any(not 0 <= i < n for i, n in zip(idx, shape)):
            raise IndexOutOfRangeError(f"pypto.item reads {r.buffer}[{', '.join(map(str, idx))}], outside its "
                                       f"shape {list(shape)}", loc=r.loc)
        value = int(t[idx])
        if value < 0:
            raise PyptoError(f"pypto.item read {value} from {r.buffer}[{', '.join(map(str, idx))}]: a data scalar "
                             "is a length, count, offset or block id, >= 0", loc=r.loc)
        self.values[key] = value
        self.count += 1
        return value


class ScalarEnv(dict):
    """Name -> value for evaluating the control program's expressions; a data scalar not yet bound is
    read (``reader``) on lookup and kept. ``child`` binds one more name (a loop variable)."""
    __slots__ = ("reader",)

    def __init__(self, values=(), reader: ScalarReader | None = None):
        super().__init__(values)
        self.reader = reader

    def __missing__(self, name):
        reader = self.reader
        if reader is None or name not in reader.reads:
            raise KeyError(name)
        value = self[name] = reader.read(name, self)
        return value

    def child(self, name: str, value) -> "ScalarEnv":
        e = ScalarEnv(self, self.reader)
        e[name] = value
        return e


def bind(env, reads: dict, tensor_of) -> ScalarEnv:
    """``env`` as a ScalarEnv reading ``reads`` (a plain copy when there are none)."""
    return ScalarEnv(env, ScalarReader(reads, tensor_of) if reads else None)


__all__ = ["ScalarEnv", "ScalarReader", "bind"]

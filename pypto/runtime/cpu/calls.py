"""The warm path of the cpu backend: a run plan's task instances as one C call.

A graph run again at sizes it already ran at (a torch.compile partition, a jit function in a loop)
has its plan (``cpu._Plan``): buffer shapes, the expanded task instances and their marshalled
launches. ``WarmRun`` is what is left to do per run once that is known: for every GM param of every
launch, which base buffer it lies in and at which byte offset (view offsets, loop variables: all
fixed by the plan), so a run only writes each base buffer's address into one array and
``pypto_run_calls`` (compiled into every kernel library, ``CALLS_SOURCE``) launches the instances in
program order (which every dependency follows), each over the threads, and times each launch. No
sizes are evaluated, no views made, no tensor per GM param looked up, no thread pool spun up: one
ctypes call per run.

A run that does not fit the plan exactly (other argument names, a dtype or shape off, a
non-contiguous or non-CPU argument, the plan's workspaces or the WarmRun held by a concurrent run)
takes the ordinary path (``cpu.run_with``), which checks and reports as before."""
from __future__ import annotations

import ctypes
import threading

import torch

from .library import KernelLibrary, PreparedLaunch

# compiled into every kernel library at the link (units.build_units adds it to the entry points)
CALLS_SOURCE = r"""
#include <cstddef>
#include <cstdint>
#include <ctime>
namespace pypto { namespace rt { struct LaunchConfig; } }
extern "C" {
struct pypto_call {
    int (*entry)(void* const* gm, const int64_t* ints, const double* reals,
                 const pypto::rt::LaunchConfig* config, char* message, size_t message_size);
    int64_t first_gm;       // this launch's GM params: gm_base / gm_offset[first_gm, first_gm + gm_count)
    int64_t gm_count;
    const int64_t* ints;
    const double* reals;
    const pypto::rt::LaunchConfig* config;
};

// Launches calls[begin, end) in order; GM param j of a call is bases[gm_base[j]] + gm_offset[j].
// Returns the index of the first launch that returned non-zero (its status in *status), else end.
int64_t pypto_run_calls(const pypto_call* calls, int64_t begin, int64_t end, char* const* bases,
                        const int64_t* gm_base, const int64_t* gm_offset, void** gm, double* seconds,
                        char* message, size_t message_size, int* status)
{
    for (int64_t i = begin; i < end; ++i) {
        const pypto_call& c = calls[i];
        for (int64_t j = 0; j < c.gm_count; ++j)
            gm[j] = bases[gm_base[c.first_gm + j]] + gm_offset[c.first_gm + j];
        timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const int rc = c.entry(gm, c.ints, c.reals, c.config, message, message_size);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        seconds[i] = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
        if (rc != 0) {
            *status = rc;
            return i;
        }
    }
    *status = 0;
    return end;
}
}
"""

_MESSAGE_BYTES = 4096


class _Call(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_void_p), ("first_gm", ctypes.c_int64), ("gm_count", ctypes.c_int64),
                ("ints", ctypes.c_void_p), ("reals", ctypes.c_void_p), ("config", ctypes.c_void_p)]


def _runner(lib: KernelLibrary):
    """The library's pypto_run_calls, or None (a library built before it existed, or by other means)."""
    fn = getattr(lib, "_run_calls", False)
    if fn is False:
        try:
            fn = lib._lib.pypto_run_calls
            fn.argtypes = [ctypes.POINTER(_Call), ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                           ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
            fn.restype = ctypes.c_int64
        except AttributeError:
            fn = None
        lib._run_calls = fn
    return fn


class WarmRun:
    """The per-run work of a plan, prepared once (see the module docstring). ``bases``: per base
    buffer, ("arg", name, shape, dtype) | ("workspace", name) | ("fresh", name, shape, dtype) |
    ("constant", name, tensor); ``outputs``: output name -> (base index, byte offset, nbytes, dtype,
    shape), offset None for a whole base; None for an argument the run writes in place."""

    def __init__(self, runner, launches: list, locations: list, threads: int, bases: list, outputs: dict):
        self.runner, self.launches, self.bases, self.outputs = runner, launches, bases, outputs
        self.arg_names = frozenset(b[1] for b in bases if b[0] == "arg")
        n = len(launches)
        self.calls = (_Call * max(1, n))()
        flat_base, flat_offset, widest = [], [], 1
        for k, (launch, places) in enumerate(zip(launches, locations)):
            c = self.calls[k]
            c.entry = ctypes.cast(launch.fn, ctypes.c_void_p).value
            c.first_gm, c.gm_count = len(flat_base), len(places)
            c.ints = ctypes.addressof(launch.ints)
            c.reals = ctypes.addressof(launch.reals)
            c.config = ctypes.addressof(launch.config(threads))
            for base, offset in places:
                flat_base.append(base)
                flat_offset.append(offset)
            widest = max(widest, len(places))
        self.gm_base = (ctypes.c_int64 * max(1, len(flat_base)))(*flat_base)
        self.gm_offset = (ctypes.c_int64 * max(1, len(flat_offset)))(*flat_offset)
        self.gm = (ctypes.c_void_p * widest)()
        self.base_ptrs = (ctypes.c_void_p * max(1, len(bases)))()
        self.seconds = (ctypes.c_double * max(1, n))()
        self.message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        self.status = ctypes.c_int(0)
        self.busy = threading.Lock()      # the arrays above serve one run at a time
        for i, b in enumerate(bases):
            if b[0] == "constant":
                self.base_ptrs[i] = b[2].data_ptr()

    @classmethod
    def prepare(cls, instances, buffers, args: dict, reusable: frozenset, threads: int) -> "WarmRun | None":
        """From a finished ordinary run (its instances with their launches, its GMBuffers); None when
        the plan has no warm path (a launch not prepared by a kernel library, no library with the
        runner, an output that is a view moving with a loop variable)."""
        graph = buffers.graph
        launches = [inst.launch for inst in instances]
        if not all(isinstance(la, PreparedLaunch) for la in launches):
            return None
        runner = next((r for r in (_runner(la.lib) for la in launches) if r is not None), None)
        if runner is None and launches:
            return None
        bases, index = [], {}
        for name, b in graph.buffers.items():
            if b.view_of is not None:
                continue
            index[name] = len(bases)
            shape, dtype = buffers.shapes[name], b.dtype.torch_dtype
            if name in args:
                bases.append(("arg", name, shape, dtype))
            elif b.role == "constant":
                bases.append(("constant", name, buffers.tensors[name]))
            elif name in reusable:
                bases.append(("workspace", name))
            else:
                bases.append(("fresh", name, shape, dtype))
        locations = []
        for inst, launch in zip(instances, launches):
            places = []
            for pname, _, _ in launch.gm:
                base, offset = buffers.location(inst.task.gm_args[pname], inst.loop_env)
                places.append((index[base], int(offset)))
            locations.append(places)
        outputs = {}
        for name in graph.outputs:
            if name in args:
                outputs[name] = None        # the caller's tensor, written in place
                continue
            b = graph.buffers[name]
            if b.view_of is None:
                outputs[name] = (index[name], None, None, None, None)
            elif buffers.is_dynamic(name):
                return None
            else:
                base, offset = buffers.location(name, buffers.env)
                shape = buffers.shapes[name]
                nbytes = int(torch.Size(shape).numel()) * buffers.itemsize[name]
                outputs[name] = (index[base], int(offset), nbytes, b.dtype.torch_dtype, shape)
        return cls(runner, launches, locations, threads, bases, outputs)

    def run(self, args: dict, workspaces: dict):
        """(outputs by name, the workspace tensors to keep, per-launch seconds), or None when ``args``
        does not fit the plan (the ordinary path then runs, and says what is wrong)."""
        if args.keys() != self.arg_names or not self.busy.acquire(blocking=False):
            return None
        try:
            return self._run(args, workspaces)
        finally:
            self.busy.release()

    def _run(self, args: dict, workspaces: dict):
        tensors = {}
        ptrs = self.base_ptrs
        for i, b in enumerate(self.bases):
            kind = b[0]
            if kind == "arg":
                t = args[b[1]]
                if not isinstance(t, torch.Tensor) or t.dtype != b[3] or t.shape != b[2] \
                        or not t.is_contiguous() or t.device.type != "cpu":
                    return None
            elif kind == "fresh":
                t = torch.empty(b[2], dtype=b[3])
            elif kind == "workspace":
                t = workspaces.get(b[1])
                if t is None:
                    return None
            else:
                continue
            tensors[b[1]] = t
            ptrs[i] = t.data_ptr()
        n = len(self.launches)
        begin = 0
        while begin < n:
            stop = self.runner(self.calls, begin, n, ptrs, self.gm_base, self.gm_offset, self.gm, self.seconds,
                               self.message, _MESSAGE_BYTES, ctypes.byref(self.status))
            if stop >= n:
                break
            launch = self.launches[stop]
            launch.lib.check(self.status.value, launch.kernel, self.message, launch.ir)   # raises, or warns
            begin = stop + 1
        outputs = {}
        for name, place in self.outputs.items():
            if place is None:
                outputs[name] = args[name]
                continue
            i, offset, nbytes, dtype, shape = place
            t = tensors.get(self.bases[i][1])
            if t is None:
                t = self.bases[i][2]
            if offset is not None:
                t = t.reshape(-1).view(torch.uint8)[offset:offset + nbytes].view(dtype).view(shape)
            outputs[name] = t
        kept = {b[1]: tensors[b[1]] for b in self.bases if b[0] == "workspace"}
        return outputs, kept, list(self.seconds[:n])

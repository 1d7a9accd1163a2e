"""Manual synchronisation for experts: ``pl.system.sync_src / sync_dst / pipe_barrier / cross_core_set /
cross_core_wait``. Using any of them turns automatic synchronisation off for the whole kernel: the
author then orders every producer/consumer pair (the simulator's race and deadlock checks tell you
when one is missing)."""
from __future__ import annotations

import types

from pypto.ir.block import CrossCoreSetFlag, CrossCoreWaitFlag, PipeBarrier, SetFlag, WaitFlag
from pypto.ir.isa import Pipe

from .dsl import DslFunction


def _pipe(call, v, at) -> Pipe:
    try:
        return v if isinstance(v, Pipe) else Pipe(str(v).upper().removeprefix("PIPE_"))
    except ValueError:
        raise call.error(f"{call.name}: unknown pipe {v!r}; pipes are " + ", ".join(p.value for p in Pipe),
                         at=at) from None


def _int(call, v, at, what):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise call.error(f"{call.name}: {what} is a compile-time int >= 0, found {v!r}", at=at)
    return v


def _emit(parser, call, stmt):
    sec = parser.require_section(call.frame, call.node, call.name)
    if not parser.manual_sync:
        parser.manual_sync = True
        parser.manual_sync_span = call.span
    sec.emit(stmt)


def _flag(cls):
    def handler(parser, call):
        b = call.bind(["src_pipe", "dst_pipe", "event_id"], f"{call.name}(src_pipe, dst_pipe, event_id)")
        src, dst = _pipe(call, b["src_pipe"], 0), _pipe(call, b["dst_pipe"], 1)
        ev = _int(call, b["event_id"], 2, "event_id")
        limit = parser.machine.memory["event_ids"]
        if ev >= limit:
            raise call.error(f"{call.name}: event id {ev} is beyond the machine's {limit} ids per pipe pair", at=2)
        _emit(parser, call, cls(src, dst, ev, loc=call.span.loc))
    return handler


def _barrier(parser, call):
    b = call.bind(["pipe"], f"{call.name}(pipe)")
    _emit(parser, call, PipeBarrier(_pipe(call, b["pipe"], 0), loc=call.span.loc))


def _cross(cls):
    def handler(parser, call):
        b = call.bind(["pipe", "flag"], f"{call.name}(pipe, flag)")
        _emit(parser, call, cls(_pipe(call, b["pipe"], 0), _int(call, b["flag"], 1, "flag"), loc=call.span.loc))
    return handler


system = types.SimpleNamespace(
    sync_src=DslFunction("system.sync_src", _flag(SetFlag), "set_flag(src_pipe -> dst_pipe, event_id)"),
    sync_dst=DslFunction("system.sync_dst", _flag(WaitFlag), "wait_flag(src_pipe -> dst_pipe, event_id)"),
    pipe_barrier=DslFunction("system.pipe_barrier", _barrier, "pipe_barrier(pipe)"),
    cross_core_set=DslFunction("system.cross_core_set", _cross(CrossCoreSetFlag), "signal the partner core"),
    cross_core_wait=DslFunction("system.cross_core_wait", _cross(CrossCoreWaitFlag), "wait for the partner core"),
)

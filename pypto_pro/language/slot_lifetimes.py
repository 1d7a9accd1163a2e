"""Checks that software pipelining keeps every tile-group slot a later stage reads alive.

Pipelined with preload N, stage s of iteration i runs at time step i + s*N, the stages of a step in
order; so between stage a filling a slot and stage b > a reading it, (b - a)*N newer iterations have
run their stage 0 (and more). Their ``next()`` calls take the group's slots round-robin; with too few
slots one of them takes the slot again before the read, and the read sees a newer iteration's data
(the synchronisation orders the accesses, so nothing races: the answer is just wrong).

The check replays a group's cursor calls over enough iterations twice, in the sequential order (each
iteration's stages in turn: what the user wrote means) and in the pipelined order, slot indices
counted without wrapping; a read that finds, at its slot modulo the depth, another acquisition than
the sequential order does is the error, with the smallest depth that would keep it.
"""
from __future__ import annotations

from .errors import ParseError


def check_slot_lifetimes(stage_calls: list, offsets: dict, groups: dict, total: dict, preload: int,
                         trip: int | None, frame) -> None:
    """``stage_calls[s]``: (group, method, call node) of stage s in order; ``offsets``: id(call) ->
    (stage, offset from the iteration's first slot); ``total``: slots a group advances per iteration;
    ``trip``: the loop's trip count when known at compile time."""
    n_stages = len(stage_calls)
    for uid, g in groups.items():
        per_iter = total[uid]
        if per_iter == 0:                        # the loop never advances it: every read is one slot
            continue
        events = [[(offsets[id(n)][1], method == "next", n) for gg, method, n in calls if gg.uid == uid]
                  for calls in stage_calls]
        back = max([0] + [-off for st in events for off, _, _ in st])
        iters = 2 * (n_stages * preload + g.depth + back // per_iter + 2)
        if trip is not None:
            iters = min(iters, trip)
        bad = _first_wrong_read(events, per_iter, g.depth, preload, iters)
        if bad is None:
            continue
        node, writer, reader = bad
        need = next((d for d in range(g.depth + 1, g.depth + 2 * iters * per_iter + 2)
                     if _first_wrong_read(events, per_iter, d, preload, iters) is None), None)
        source = (f"the slot stage {writer} filled, {(reader - writer) * preload} pipeline steps earlier"
                  if writer is not None else "a slot filled before the loop")
        raise ParseError(
            f"tile group {g.name} (depth {g.depth}) is too shallow for this pipeline (preload={preload}): stage "
            f"{reader} reads here {source}, and newer iterations' {g.name}.next() take that slot again before "
            "this read, so it would read another iteration's data. The group's depth must exceed the slots live "
            "across the stages" + (f": depth >= {need} needed" if need else ""),
            frame.span(node),
            hint=f"pl.make_tile_group(..., depth={need})" if need else "use fewer stages or a smaller preload")


def _first_wrong_read(events: list, per_iter: int, depth: int, preload: int, iters: int):
    """(call node, stage that filled the slot or None, reading stage) of the first read whose slot holds
    another acquisition in the pipelined order than in the sequential one, else None."""
    sequential = [(i, s) for i in range(iters) for s in range(len(events))]
    pipelined = [(t - s * preload, s) for t in range(iters + (len(events) - 1) * preload)
                 for s in range(len(events)) if 0 <= t - s * preload < iters]
    expected = _replay(events, per_iter, depth, sequential)
    seen = _replay(events, per_iter, depth, pipelined)
    for key, (node, held, writer) in seen.items():
        if held != expected[key][1]:
            return node, expected[key][2], key[1]
    return None


def _replay(events: list, per_iter: int, depth: int, order: list) -> dict:
    """(iteration, stage, call index) of each read -> (call node, the acquisition its slot holds, the
    stage that made it or None for a slot filled before the loop)."""
    holder = {(-k) % depth: (-k, None) for k in range(depth)}     # slot -> (acquisition, stage)
    reads = {}
    for i, s in order:
        for c, (off, acquires, node) in enumerate(events[s]):
            at = i * per_iter + off
            if acquires:
                holder[at % depth] = (at, s)
            else:
                held = holder[at % depth]
                reads[(i, s, c)] = (node, held[0], held[1])
    return reads


__all__ = ["check_slot_lifetimes"]

"""Software pipelining (placeholder until the transform lands)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PipelineConfig:
    preload: int = 1


def pipelined_loop(parser, node, frame, bounds, var) -> bool:
    return False

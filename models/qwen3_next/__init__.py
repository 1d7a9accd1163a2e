"""Qwen3-Next's Gated DeltaNet layer: pypto kernels and their plain-torch oracles (`reference`)."""

"""Helpers for pypto's own tests and benchmarks (hand-built kernels): not part of the public API."""

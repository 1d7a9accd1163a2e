"""Backends that run an ExecutionGraph: ``sim`` (simulator, default), ``cpu`` (g++), ``npu`` (CANN)."""

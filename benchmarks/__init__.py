"""Benchmarks: ``python -m benchmarks`` measures scoped-a2a side by side with its peers.

See ``python -m benchmarks --help`` and the README section "Benchmarks".
"""

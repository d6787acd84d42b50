"""Peer servers, each run as its own process by the benchmark runner (``python -m benchmarks``)."""

"""Benchmarks: each starts what it needs and prints one JSON line of results, last."""

"""Benchmark utilities: offline data loaders and split protocols used to reproduce the papers."""

"""Benchmarks and studies of comlrl-c3; run each script as ``python bench/<name>.py`` from the repo root."""

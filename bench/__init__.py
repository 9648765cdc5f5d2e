"""Benchmarks for notes-search (run from the repo root: `.venv/bin/python -m bench.run_all`)."""

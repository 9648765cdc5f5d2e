"""Build tools: programs that make data the package ships (run from the repo root: `.venv/bin/python -m tools.NAME`)."""

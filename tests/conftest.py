"""Harness self-tests: never reach a model provider."""

import os
from pathlib import Path

import pydantic_ai.models

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

pytest_plugins = ["pytester"]

# pytester projects live in temporary folders: they share the repository's built worlds
# instead of generating them again under each project's rootdir.
os.environ.setdefault("BACKINTEL_DATA_DIR", str(Path(__file__).resolve().parent.parent / "data"))

# Benchmarks time things; they run on their own (`BACKINTEL_BENCHMARKS=1 uv run pytest
# tests/benchmarks -p no:xdist`), never inside the test run, where timings would mean nothing.
collect_ignore = [] if os.environ.get("BACKINTEL_BENCHMARKS") else ["benchmarks"]

"""Harness self-tests: never reach a model provider."""

import os

import pydantic_ai.models

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

pytest_plugins = ["pytester"]

# Benchmarks time things; they run on their own (`BACKINTEL_BENCHMARKS=1 uv run pytest
# tests/benchmarks -p no:xdist`), never inside the test run, where timings would mean nothing.
collect_ignore = [] if os.environ.get("BACKINTEL_BENCHMARKS") else ["benchmarks"]

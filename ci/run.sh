#!/usr/bin/env bash
# What CI runs. Reads as if the machine were new: installs uv, bubblewrap and Chromium, starts
# PostgreSQL, then lints and runs the README's two commands (tests and main job) with -n 2.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
# Backends that must run here: a missing one fails the conformance suite instead of skipping.
export BACKINTEL_REQUIRE=sqlite,duckdb,postgres,iceberg,lake-parquet,files,files-mixed,multi

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "system packages"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi

step "python environment (uv.lock)"
uv sync --frozen

step "lint, types, import contracts, schema, references"
uv run ruff check .
uv run ruff format --check .
uv run mypy
uv run lint-imports
uv run backintel schema --check
uv run backintel references build --check

step "README: tests"
uv run pytest tests -n 2

step "hostile-analyst suite on every backend (none may skip)"
uv run pytest tests/test_hostile_isolation.py tests/test_hostile_duckdb_functions.py \
  tests/test_hostile_cleanup.py tests/test_hostile_compare.py -p no:xdist -q -rs

step "README: main job on the embedded default (SQLite, reference analyst)"
uv run pytest -m development -n 2 --run-id ci-main
uv run backintel report results/ci-main

step "the development scenarios on every other backend"
# Levels 4 and 7 are bound to their own stores (multi, lake-parquet) and ran above.
for store in duckdb postgres iceberg lake-parquet files; do
  uv run pytest -m "development and not level4 and not level7" -n 2 -q --store "$store"
done

step "benchmarks (timings are printed, never asserted)"
BACKINTEL_BENCHMARKS=1 uv run pytest tests/benchmarks -p no:xdist -q \
  --benchmark-columns=min,median,max --benchmark-sort=name

step "done"

#!/usr/bin/env bash
# What CI runs. Reads as if the machine were new: installs uv and bubblewrap, starts PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "system packages"
if ! command -v bwrap >/dev/null 2>&1; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap
fi
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet uv
fi
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi

step "python environment (uv.lock)"
uv sync --frozen

step "lint, types, import contracts, schema"
uv run ruff check .
uv run ruff format --check .
uv run mypy
uv run lint-imports
uv run backintel schema --check

step "README: tests"
uv run pytest tests -n 2

step "README: main job on the embedded default (SQLite, reference analyst)"
uv run pytest -m development -n 2

step "done"

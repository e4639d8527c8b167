#!/usr/bin/env bash
# What CI runs. Reads as if the machine were new: installs uv, bubblewrap and Chromium, starts
# PostgreSQL, then lints and runs the README's two commands (tests and main job) with -n 2, and
# the main job again in a fresh clone whose PATH has no system bwrap.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
# Backends that must run here: a missing one fails the conformance suite instead of skipping.
export BACKINTEL_REQUIRE=sqlite,duckdb,postgres,iceberg,lake-parquet,files,files-mixed,multi,clickhouse,iceberg-s3,clickhouse-server,sqlalchemy
# The sqlalchemy store's server (tests/test_store_sqlalchemy.py, the own-data tutorial's MariaDB
# binding): the machine's MariaDB, as root over TCP.
export BACKINTEL_SQLALCHEMY_URL="mysql+pymysql://root@127.0.0.1:3306/test?charset=utf8mb4"

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "system packages"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# A real ClickHouse server for the clickhouse-server backend (Debian's 18.16; the tests start
# it in a temp folder): about 10 MB of packages, ~15 s to install, ~20 s of tests.
command -v clickhouse-server >/dev/null 2>&1 || missing+=(clickhouse-server)
[ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
# Node.js and npm for the example agent not written in Python (examples/agents/node).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi
if ! mysqladmin -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1; then
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  for _ in $(seq 60); do
    mysqladmin -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1 && break
    sleep 1
  done
  mysqladmin -h 127.0.0.1 -P 3306 -u root ping
fi
if ! mysql -h 127.0.0.1 -u root -e "SELECT 1" >/dev/null 2>&1; then  # a fresh install: root
  mysql -u root -e "CREATE USER IF NOT EXISTS root@'127.0.0.1';
    GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION"  # by socket, then over TCP too
fi
mysql -h 127.0.0.1 -u root -e "CREATE DATABASE IF NOT EXISTS test"

step "python environment (uv.lock)"
# Compiled once here: with PYTHONDONTWRITEBYTECODE=1 (set on these machines) every process would
# otherwise compile ~850 modules again before collecting anything. (`compile-bytecode` in
# pyproject would make every `uv run` recompile the whole environment.)
uv sync --frozen --compile-bytecode
# The same for what `uv sync` does not compile: this project's own modules (an editable
# install) and pytest's assertion-rewritten copies of every plugin module (hypothesis, xdist,
# syrupy, this plugin's), which pytest can only cache when bytecode may be written.
PYTHONDONTWRITEBYTECODE='' uv run python -m compileall -q -j 0 pytest_backintel analyst stores scenarios reports tests
# (its exit status is syrupy's "unused snapshots" under --collect-only; the tests step checks)
PYTHONDONTWRITEBYTECODE='' uv run pytest --collect-only -q -p no:xdist tests scenarios >/dev/null || true

step "the Node example agent's locked packages (package-lock.json)"
npm ci --prefix examples/agents/node --no-audit --no-fund

step "lint, types, import contracts, schema, references"
uv run ruff check .
uv run ruff format --check .
uv run mypy
uv run lint-imports
uv run backintel schema --check
uv run backintel references benchmark --check
uv run backintel validate scenarios/definitions

step "README: tests"
uv run pytest tests -n 2

# The hostile-analyst suite (tests/test_hostile_*.py) runs in there on every backend:
# BACKINTEL_REQUIRE turns a backend that cannot run into a failure, never a skip.

step "reserved cases never run unfrozen"
if uv run pytest -m reserved -q -p no:xdist >/tmp/reserved.log 2>&1; then
  echo "pytest -m reserved without --freeze exited 0" >&2; exit 1
fi
grep -q -- "--freeze" /tmp/reserved.log

step "README: main job on the embedded default (SQLite, reference analyst)"
uv run pytest -m development -n 2 --run-id ci-main
uv run backintel report results/ci-main
# backintel score equals a trial: every recorded answer scored again must get the same outcome
uv run backintel score --run results/ci-main

step "README on a fresh clone with no system bwrap on PATH (bubblewrap from PyPI)"
fresh="$(mktemp -d)"
git clone -q "$PWD" "$fresh/repo"
nobwrap_path=""
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  if [ -e "$dir/bwrap" ]; then  # the same folder, less bwrap
    shim="$fresh/shim$(printf '%s' "$dir" | tr '/' '_')"
    mkdir -p "$shim"
    for exe in "$dir"/*; do [ "${exe##*/}" = bwrap ] || ln -sf "$exe" "$shim/"; done
    dir="$shim"
  fi
  nobwrap_path="${nobwrap_path:+$nobwrap_path:}$dir"
done
(
  cd "$fresh/repo"
  export PATH="$nobwrap_path"
  if command -v bwrap >/dev/null; then echo "a system bwrap is still on PATH" >&2; exit 1; fi
  uv sync
  # level 1 cites Python evidence, so the sandbox runs on the bundled bwrap; the whole set ran above
  uv run pytest -m "development and level1" -n 2 -q --run-id fresh-clone
)
rm -rf "$fresh"

step "the development scenarios on every other backend"
# Levels 4, 7 and 8 are bound to their own stores (multi, lake-parquet, sqlite) and ran
# above. PostgreSQL and ClickHouse have SQL dialects of their own: every scenario's queries are
# translated to them, so they run the whole set.
for store in postgres clickhouse; do
  uv run pytest -m "development and not level4 and not level7 and not level8" -n 2 -q --store "$store"
done
# The DuckDB-engine backends share DuckDB's dialect, and every connection forks a memory-capped
# child (stores/engine/process.py): CI runs their first level (their conformance and hostile
# suites run in full in the tests above). iceberg-s3 adds a local S3 endpoint to iceberg.
for store in duckdb iceberg iceberg-s3 lake-parquet files; do
  uv run pytest -m "development and level1" -n 2 -q --store "$store"
done

# The benchmarks (tests/benchmarks) run on their own: docs/performance.md has their command and
# what they measured. They are timing runs of several minutes and assert nothing.

step "done"

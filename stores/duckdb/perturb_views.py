"""The data probe of a DuckDB file, Parquet folder or CSV folder as views (`stores.duckdb.probe`),
planned from its catalog by the generic planner (`stores.common.view_plan.plan_tables`).

The catalog is read on an in-memory DuckDB connection that makes the source readable under an
alias (`DuckDBSource.attach`): tables and column types from `information_schema`, declared
primary and foreign keys from `duckdb_constraints()` (a DuckDB file; a Parquet or CSV folder
declares none, so its keys come from name conventions), and uniqueness of a candidate key
checked by DuckDB in bounded memory. Every FLOAT, DOUBLE and DECIMAL column outside keys is
rescaled, whatever the binding form. Python evidence gets the same tables written as files
(`stores.duckdb.probe.materialise`, DuckDB `COPY`) on its first use, kept under the cache
folder while the source's data hash is the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from stores.base import DatasetFiles, Store, new_store_id
from stores.common.probe_copies import has_room, keep_current
from stores.common.schema_keys import DeclaredKeys, duckdb_declared_keys
from stores.common.view_plan import (
    PERTURB_VERSION,
    Plans,
    SqlCatalog,
    ViewProbeKind,
    build_once,
    plan_tables,
    write_done,
)
from stores.duckdb.probe import DuckDBProbeStore, materialise
from stores.duckdb.reading import DuckDBSource
from stores.duckdb.source import DuckDBSourceStore, quote_ident
from stores.probe import TablePlan

__all__ = [
    "DUCKDB_VIEWS",
    "DuckDBCatalog",
    "TypedTablePlan",
    "duckdb_plan",
    "duckdb_view_probe",
]

_ALIAS = "bi_source"
PLAN_MEMORY = "128MB"
"""DuckDB's memory while planning (a key's uniqueness over every row spills past this)."""


@dataclass
class TypedTablePlan(TablePlan):
    """A table's plan and its column types, which a DuckDB view needs to keep them."""


class DuckDBCatalog(SqlCatalog):
    """A DuckDB-served source's catalog, on a connection where it is readable as `_ALIAS`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, source: DuckDBSource) -> None:
        super().__init__(lambda sql: con.execute(sql).fetchall())
        self.con = con
        self.source = source
        if source.kind == "duckdb":
            self._where = ("bi_source", "main")
            con.execute(f"USE {quote_ident(_ALIAS)}")
        else:
            self._where = ("memory", _ALIAS)
            con.execute(f"USE memory.{quote_ident(_ALIAS)}")

    def tables(self) -> list[str]:
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? "
            "AND table_schema = ? ORDER BY 1",
            list(self._where),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def views(self) -> list[str]:
        """The views a DuckDB file defines itself (a folder's tables are all the harness's)."""
        if self.source.kind != "duckdb":
            return []
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? "
            "AND table_schema = ? AND table_type = 'VIEW' ORDER BY 1",
            list(self._where),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def column_types(self, table: str) -> dict[str, str]:
        rows = self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE "
            "table_catalog = ? AND table_schema = ? AND table_name = ? ORDER BY ordinal_position",
            [*self._where, table],
        ).fetchall()
        return {str(c): str(t).upper() for c, t in rows}

    def declared(self, tables: list[str]) -> DeclaredKeys:
        if self.source.kind != "duckdb":
            return DeclaredKeys()
        keys = duckdb_declared_keys(self.con)
        keys.primary = {t: k for t, k in keys.primary.items() if t in tables}
        return keys


def duckdb_plan(source: DuckDBSource) -> Plans:
    """Each table's plan (`TypedTablePlan`) and the notes on the tables the probe keeps whole."""
    spill = tempfile.TemporaryDirectory(prefix="backintel-plan-")  # never the user's cwd
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "threads": "1",
            "memory_limit": PLAN_MEMORY,
            "temp_directory": spill.name,
        }
    )
    try:
        source.attach(con, _ALIAS)
        catalog = DuckDBCatalog(con, source)
        plans, notes = plan_tables(catalog)
        notes += [
            f"view {view!r} reads the source's own tables, not the probe's: only its own key "
            "and numbers move, so evidence over it is checked less than over a table"
            for view in catalog.views()
        ]
        typed: dict[str, TablePlan] = {
            t: TypedTablePlan(p.columns, p.key, p.parents, p.scale, catalog.column_types(t))
            for t, p in plans.items()
        }
        return typed, notes
    finally:
        con.close()
        spill.cleanup()


def _types(plans: dict[str, TablePlan]) -> dict[str, dict[str, str]]:
    return {t: p.types if isinstance(p, TypedTablePlan) else {} for t, p in plans.items()}


def duckdb_view_probe(
    store: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> DuckDBProbeStore:
    """The probe of a DuckDB-served source for `salt`: sessions read views over the source;
    the same tables are written under `cache_dir` in the background (when the disk has
    `COPY_ROOM` times the source free), kept while the source's data hash is the same
    (xdist-safe), and read by Python evidence and by every session opened once they are there."""
    assert isinstance(store, DuckDBSourceStore)
    assert data_hash is not None
    source = store.source(files)
    types = _types(plan)
    engine = duckdb.__version__.replace(".", "_")  # `hash` may differ between versions
    family = f"{files.name}-{source.kind}-views-"
    final = cache_dir / f"{family}v{PERTURB_VERSION}-d{engine}-s{salt}-{data_hash[:16]}"
    inner = "data.duckdb" if source.kind == "duckdb" else "data"

    def build(tmp: Path) -> None:
        materialise(source, plan, types, salt, tmp)
        write_done(tmp, str(source.location), salt, notes)

    def materialised() -> Path:
        build_once(cache_dir, final, build)
        keep_current(cache_dir, final, family)
        return final / inner

    timeout = store.statement_timeout_s
    copy = has_room(cache_dir, sum(f.stat().st_size for f in source.files()))
    return DuckDBProbeStore(
        store.name, new_store_id(), timeout, source, plan, types, salt, materialised, copy
    )


def _plan_of(store: Store, files: DatasetFiles) -> Plans:
    """The plan of the source, read from its catalog once per state of its files and kept
    beside the store's hashes (`plans/`): planning checks keys for uniqueness over every row."""
    assert isinstance(store, DuckDBSourceStore)
    cache = store.workdir.parent / "plans" / f"v{PERTURB_VERSION}-{store.digest(files)}.json"
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        saved = json.loads(cache.read_text())
        return (
            {
                t: TypedTablePlan(
                    p["columns"],
                    p["key"],
                    [(list(c), str(t2), list(pc)) for c, t2, pc in p["parents"]],
                    p["scale"],
                    p["types"],
                )
                for t, p in saved["plans"].items()
            },
            list(saved["notes"]),
        )
    plans, notes = duckdb_plan(store.source(files))
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(
            json.dumps({"plans": {t: asdict(p) for t, p in plans.items()}, "notes": notes})
        )
        os.replace(tmp, cache)
    return plans, notes


DUCKDB_VIEWS = ViewProbeKind(_plan_of, duckdb_view_probe)

"""The data probe of a SQLite source as views (`stores.sqlite.probe`), planned from its schema
by the shared planner (`stores.common.view_plan.plan_tables`) over SQLite's catalog
(`sqlite_schema`, `PRAGMA table_info`, `foreign_key_list`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from stores.base import DatasetFiles, Store, new_store_id
from stores.common.probe_copies import has_room, keep_current
from stores.common.schema_keys import DeclaredKeys, sqlite_declared_keys
from stores.common.view_plan import (
    PERTURB_VERSION,
    Plans,
    SqlCatalog,
    ViewProbeKind,
    build_once,
    plan_tables,
    write_done,
)
from stores.probe import TablePlan
from stores.sqlite.build import quote_ident
from stores.sqlite.probe import SQLiteProbeStore, materialise
from stores.sqlite.source import SQLiteSourceStore

__all__ = ["SQLITE_VIEWS", "SQLiteCatalog", "sqlite_plan", "sqlite_view_probe"]


class SQLiteCatalog(SqlCatalog):
    """A SQLite file's catalog (`sqlite_schema`, `PRAGMA table_info`, `foreign_key_list`)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        super().__init__(lambda sql: con.execute(sql).fetchall())
        self.con = con

    def tables(self) -> list[str]:
        return [
            str(r[0])
            for r in self.con.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
            )
        ]

    def column_types(self, table: str) -> dict[str, str]:
        info = self.con.execute(f"PRAGMA table_info({quote_ident(table)})").fetchall()
        return {str(r[1]): str(r[2]).upper() for r in info}

    def declared(self, tables: list[str]) -> DeclaredKeys:
        return sqlite_declared_keys(self.con, tables)


def sqlite_plan(path: Path) -> tuple[dict[str, TablePlan], list[str]]:
    """Each table's plan of a SQLite file and the notes on the tables the probe keeps whole."""
    con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    try:
        return plan_tables(SQLiteCatalog(con))
    finally:
        con.close()


def sqlite_view_probe(
    store: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> SQLiteProbeStore:
    """The probe of a SQLite source for `salt`: sessions read TEMP views over the source;
    the same tables are written to a file under `cache_dir` in the background (when the disk
    has `COPY_ROOM` times the source free), kept while the source's data hash is the same
    (xdist-safe), and read by Python evidence and by every session opened once it is there."""
    assert isinstance(store, SQLiteSourceStore)
    assert data_hash is not None
    source = store.source_file(files)
    family = f"{files.name}-sqlite-views-"
    final = cache_dir / f"{family}v{PERTURB_VERSION}-s{salt}-{data_hash[:16]}"

    def build(tmp: Path) -> None:
        materialise(source, plan, salt, tmp / "data.sqlite")
        write_done(tmp, str(source), salt, notes)

    def materialised() -> Path:
        build_once(cache_dir, final, build)
        keep_current(cache_dir, final, family)
        return final / "data.sqlite"

    timeout = store.statement_timeout_s
    copy = has_room(cache_dir, source.stat().st_size)
    return SQLiteProbeStore(source, new_store_id(), timeout, plan, salt, materialised, copy)


def _sqlite_plan_of(store: Store, files: DatasetFiles) -> Plans:
    assert isinstance(store, SQLiteSourceStore)
    return sqlite_plan(store.source_file(files))


SQLITE_VIEWS = ViewProbeKind(_sqlite_plan_of, sqlite_view_probe)

"""`multi`: several provisioned stores attached read-only in one guarded DuckDB session.

Spec (the part after `multi:` in `--store`): `<backend>:<alias>+<backend>:<alias>...`, e.g.
`multi:postgres:olist_orders+sqlite:olist_catalog`. Each component is a normal store of its
backend (`sqlite`, `duckdb`, `postgres`, `lake-parquet`, `files`, `files-mixed`, `iceberg`),
provisioned per item and attached under its alias, so the analyst addresses tables as
`<alias>.<table>` (`olist_orders.orders`); the aliases are also on DuckDB's search path.

Data per component: a dataset that declares components carries `extra["parquet:<alias>"]` (a
folder of `<table>.parquet`) and optionally `extra["sqlite:<alias>"]` (a SQLite build of it);
every alias of the spec must be declared then. A dataset without declared components is
provisioned whole under every alias.

Guard: a per-item empty DuckDB file opened `read_only=True`, the scanner extensions loaded from
their wheels, each component attached `READ_ONLY` (postgres as the item's SELECT-only role),
then external access off except for the components' own folders (a SQLite component: its one
file) and the configuration locked; `check_statement` admits one SELECT and refuses every table
function that opens a file, a database or a connection (`stores.engine.policy`): the scanners
connect past the engine's file guard. Fingerprint: sha256 over every component's fingerprint.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import duckdb

from stores.base import (
    Column,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    QueryError,
    Store,
    StoreError,
    TableInfo,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.engine.common import DuckDBSession, quote_ident, quote_literal, remove_folder
from stores.engine.extensions import open_guarded_with
from stores.engine.process import IsolatedSession

__all__ = ["Component", "MultiStore", "ProvisionedMulti", "component_dataset", "parse_spec"]

SUPPORTED = ("sqlite", "duckdb", "postgres", "lake-parquet", "files", "files-mixed", "iceberg")
_ALIAS = re.compile(r"^[a-z_][a-z0-9_]*$")
_RESERVED = {"main", "temp", "system", "memory", "information_schema", "pg_catalog"}
_SYNTAX = "<backend>:<alias>+<backend>:<alias>, e.g. postgres:olist_orders+sqlite:olist_catalog"


@dataclass(frozen=True)
class Component:
    backend: str
    alias: str


def parse_spec(spec: str) -> list[Component]:
    """The components of a multi spec; `ValueError` saying which part is wrong and why."""
    if not spec.strip():
        raise ValueError(f"the multi store needs its components: multi:{_SYNTAX}")
    out: list[Component] = []
    for part in spec.split("+"):
        backend, sep, alias = part.strip().rpartition(":")
        if not sep or not backend:
            raise ValueError(f"multi component {part!r} is not <backend>:<alias>; write {_SYNTAX}")
        if backend not in SUPPORTED:
            raise ValueError(
                f"multi component {part!r}: backend {backend!r} cannot be attached; "
                f"allowed: {', '.join(SUPPORTED)}"
            )
        if not _ALIAS.match(alias) or alias in _RESERVED:
            raise ValueError(
                f"multi component {part!r}: alias {alias!r} must match {_ALIAS.pattern} and not "
                f"be one of {sorted(_RESERVED)}"
            )
        if alias in {c.alias for c in out}:
            raise ValueError(f"multi spec {spec!r}: alias {alias!r} is used twice")
        out.append(Component(backend, alias))
    return out


def component_dataset(dataset: DatasetFiles, alias: str) -> DatasetFiles:
    """The part of `dataset` provisioned under `alias` (see the module docstring)."""
    declared = sorted(k.split(":", 1)[1] for k in dataset.extra if k.startswith("parquet:"))
    if not declared:
        return dataset
    if alias not in declared:
        raise StoreError(
            f"multi store: dataset {dataset.name!r} has no component {alias!r}; it declares "
            f"{', '.join(declared)}"
        )
    return DatasetFiles(
        name=alias,
        parquet_dir=dataset.extra[f"parquet:{alias}"],
        sqlite_path=dataset.extra.get(f"sqlite:{alias}"),
    )


@dataclass(frozen=True)
class _Attach:
    """How one provisioned component is attached: the ATTACH target, type, schema, folders."""

    alias: str
    target: str
    kind: str
    schema: str
    allowed: tuple[Path, ...]
    extensions: tuple[str, ...]
    files: tuple[Path, ...] = ()
    """Single files readable after the guard is on (the SQLite component)."""


def _attachment(alias: str, item: ProvisionedStore) -> _Attach:
    """The component as its store declares it attached (`ProvisionedStore.attachment`)."""
    how = item.attachment()
    if how is None:
        raise StoreError(f"multi store: cannot attach a {item.backend} store ({item.display_id})")
    return _Attach(alias, how.target, how.kind, how.schema, how.allowed, how.extensions, how.files)


class MultiSession(DuckDBSession):
    """A guarded DuckDB session over attached components; tables are `<alias>.<table>`."""

    def __init__(
        self, conn: duckdb.DuckDBPyConnection, attaches: list[_Attach], **kw: object
    ) -> None:
        super().__init__(conn, **kw)  # type: ignore[arg-type]
        self._attaches = attaches

    def _tables(self) -> dict[str, tuple[str, str, str]]:
        found: dict[str, tuple[str, str, str]] = {}
        for a in self._attaches:
            rows = self._conn.execute(
                "SELECT table_name FROM information_schema.tables "
                f"WHERE table_catalog = {quote_literal(a.alias)} "
                f"AND table_schema = {quote_literal(a.schema)} ORDER BY 1"
            ).fetchall()
            for (name,) in rows:
                found[f"{a.alias}.{name}"] = (a.alias, a.schema, str(name))
        return dict(sorted(found.items()))

    def list_tables(self) -> list[str]:
        return list(self._tables())

    def describe_table(self, name: str) -> TableInfo:
        tables = self._tables()
        matches = [k for k in tables if k == name or k.split(".", 1)[1] == name]
        if len(matches) != 1:
            why = "is ambiguous" if matches else "is unknown"
            raise QueryError(
                f"table {name!r} {why} on {self._where}; name it as <alias>.<table>, one of: "
                f"{', '.join(tables)}"
            )
        catalog, schema, table = tables[matches[0]]
        cols = self._conn.execute(
            "SELECT column_name, data_type, is_nullable = 'YES' FROM information_schema.columns "
            f"WHERE table_catalog = {quote_literal(catalog)} "
            f"AND table_schema = {quote_literal(schema)} "
            f"AND table_name = {quote_literal(table)} ORDER BY ordinal_position"
        ).fetchall()
        qualified = ".".join(quote_ident(p) for p in (catalog, schema, table))
        count = self._conn.execute(f"SELECT count(*) FROM {qualified}").fetchone()
        return TableInfo(
            name=matches[0],
            columns=[Column(str(c), str(t), bool(n)) for c, t, n in cols],
            row_count=int(count[0]) if count else 0,
        )


def _open_main(root: Path, attaches: list[_Attach], where: str) -> duckdb.DuckDBPyConnection:
    """The item's main database with every component attached read-only, guarded."""
    if not (root / "main.duckdb").is_file():
        raise StoreError(f"{where} was torn down; provision a new store")

    def attach(conn: duckdb.DuckDBPyConnection) -> None:
        for a in attaches:
            conn.execute(
                f"ATTACH {quote_literal(a.target)} AS {quote_ident(a.alias)} "
                f"(TYPE {a.kind}, READ_ONLY)"
            )
        path = ",".join(f"{a.alias}.{a.schema}" for a in attaches)
        conn.execute(f"SET search_path = {quote_literal(path)}")

    extensions = sorted({e for a in attaches for e in a.extensions})
    return open_guarded_with(
        root / "main.duckdb",
        extensions=extensions,
        allowed_dirs=[p for a in attaches for p in a.allowed],
        allowed_files=[f for a in attaches for f in a.files],
        prepare=attach,
        secret_dir=root / "secrets",
    )


def _multi_session(
    root: Path, attaches: list[_Attach], timeout_s: float, where: str
) -> MultiSession:
    """The guarded session over `root` (module-level: an engine child gets only this and its
    arguments, never the components' own stores)."""
    conn = _open_main(root, attaches, where)
    return MultiSession(conn, attaches, timeout_s=timeout_s, where=where)


class ProvisionedMulti(ProvisionedStore):
    """One item: its component stores and a folder with the empty main database."""

    backend = "multi"

    def __init__(
        self, store_id: str, root: Path, components: dict[str, ProvisionedStore], timeout_s: float
    ) -> None:
        self.store_id = store_id
        self.root = root
        self.components = components
        self._timeout_s = timeout_s
        self._attaches = [_attachment(alias, item) for alias, item in components.items()]

    def engine_connection(self) -> duckdb.DuckDBPyConnection:
        """The guarded connection alone, without the statement check."""
        return _open_main(self.root, self._attaches, self.display_id)

    def local_session(self) -> MultiSession:
        """The guarded session in this process (`connect` runs it in a child process)."""
        return _multi_session(self.root, self._attaches, self._timeout_s, self.display_id)

    def connect(self) -> IsolatedSession:
        where = self.display_id
        opener = partial(_multi_session, self.root, self._attaches, self._timeout_s, where)
        return IsolatedSession(opener, where=where, timeout_s=self._timeout_s)

    def fingerprint(self) -> Fingerprint:
        logical, physical = hashlib.sha256(), hashlib.sha256()
        for alias, item in sorted(self.components.items()):
            fp = item.fingerprint()
            logical.update(f"{alias}\0{fp.logical}\n".encode())
            physical.update(f"{alias}\0{item.backend}\0{fp.physical}\n".encode())
        return Fingerprint(logical=logical.hexdigest(), physical=physical.hexdigest())

    def teardown(self) -> None:
        errors: list[str] = []
        for item in self.components.values():
            try:
                item.teardown()
            except Exception as exc:  # tear every component down, then report
                errors.append(f"{item.display_id}: {exc}")
        remove_folder(self.root)
        if errors:
            raise StoreError(f"multi store {self.display_id}: teardown failed: {'; '.join(errors)}")


class MultiStore(Store):
    """Component stores set up per session; each item attaches one copy of each."""

    name = "multi"
    capabilities = StoreCapabilities(sandbox_mount="none", read_only="policy", dialect="duckdb")
    spec: ClassVar[str] = ""

    @classmethod
    def with_options(cls, options: str) -> type[Store]:
        """A subclass bound to the spec `options` (validated here, so errors come early)."""
        try:
            parse_spec(options)
        except ValueError as exc:
            raise StoreError(str(exc)) from exc
        return type(
            f"MultiStore[{options}]", (cls,), {"spec": options, "__module__": cls.__module__}
        )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        try:
            self.components = parse_spec(self.spec)
        except ValueError as exc:
            raise StoreError(str(exc)) from exc
        self._stores: dict[str, Store] = {}

    def setup_session(self) -> None:
        from stores.registry import load_store_class

        super().setup_session()
        try:
            for i, c in enumerate(self.components):
                store = load_store_class(c.backend)(
                    self.workdir / f"c{i}-{c.backend}", statement_timeout_s=self.statement_timeout_s
                )
                store.setup_session()
                self._stores[c.alias] = store
        except Exception:
            self.teardown_session()
            raise

    def provision(self, dataset: DatasetFiles) -> ProvisionedMulti:
        if len(self._stores) != len(self.components):
            raise StoreError("multi store: call setup_session() before provision()")
        store_id = new_store_id()
        root = self.workdir / store_id
        items: dict[str, ProvisionedStore] = {}
        try:
            root.mkdir(parents=True)
            (root / "secrets").mkdir()
            duckdb.connect(str(root / "main.duckdb")).close()
            for c in self.components:
                items[c.alias] = self._stores[c.alias].provision(
                    component_dataset(dataset, c.alias)
                )
            return ProvisionedMulti(store_id, root, items, self.statement_timeout_s)
        except Exception as exc:
            for item in items.values():
                with contextlib.suppress(Exception):
                    item.teardown()
            shutil.rmtree(root, ignore_errors=True)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"multi store: provisioning {store_id} failed: {exc}") from exc

    def teardown_session(self) -> None:
        for store in self._stores.values():
            with contextlib.suppress(Exception):
                store.teardown_session()
        self._stores.clear()

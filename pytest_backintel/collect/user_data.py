"""Data a user has, as a `World`: a SQLite or DuckDB file, a Parquet or CSV folder, or an
existing PostgreSQL or ClickHouse database, bound in a scenario file
(`dataset: {sqlite: shop.sqlite}`).

Nothing is converted: each item gets the source as it is under an opaque name of its own (a
SQLite file in place, through a per-item link, `stores.sqlite.source`; a DuckDB file, Parquet or
CSV folder in place through per-item links, `stores.duckdb.source`; a PostgreSQL database in
place, through a SELECT-only role, `stores.postgres.source`; a ClickHouse database in place,
through a per-item database of views read with `readonly=1`, `stores.clickhouse.source`),
read-only for the analyst and
fingerprinted before and after like every store. A DSN's password never reaches an error, a
record or a folder name. A binding runs on its native backend; `--store` may pick another
backend only where that one serves the source losslessly (`LOSSLESS`), otherwise the run stops
with one usage error. References come from the lock file beside the scenario
(`pytest_backintel.collect.lockfile`), written by
`backintel references build`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.collect.loading import ScenarioFileError, locate
from pytest_backintel.collect.suites import hide_password
from pytest_backintel.collect.worlds import UnknownWorldError, World, get_world, get_world_entry
from pytest_backintel.scenario import DSN_KINDS, DatasetBinding, Scenario
from stores.base import DatasetFiles, Store, StoreError
from stores.common.dsn import redact

__all__ = [
    "DEFAULT_STORE",
    "LOSSLESS",
    "NATIVE",
    "UserSource",
    "binding_problem",
    "bound_folder",
    "check_name",
    "check_source",
    "check_world",
    "resolve_dsn",
    "source_store_spec",
    "user_source",
    "world_for",
]

DEFAULT_STORE = "sqlite"
"""`--store`'s default: with it, a source of your own runs on its native backend."""
NATIVE = {
    "sqlite": "sqlite",
    "duckdb": "duckdb",
    "parquet": "lake-parquet",
    "csv": "files",
    "postgres": "postgres",
    "clickhouse": "clickhouse-server",
    "sqlalchemy": "sqlalchemy",
}
LOSSLESS: dict[str, tuple[str, ...]] = {
    "sqlite": ("sqlite",),
    "duckdb": ("duckdb",),
    "parquet": ("lake-parquet", "duckdb"),
    "csv": ("files",),
    "postgres": ("postgres",),
    "clickhouse": ("clickhouse-server",),
    "sqlalchemy": ("sqlalchemy",),
}
"""The backends that serve each kind of source without changing a type, NULL or constraint
(Parquet loads into a DuckDB file with its own types)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_DSN_FORMS = {
    "postgres": (("postgresql://", "postgres://"), "postgresql://user@host:port/dbname"),
    "clickhouse": (("clickhouse://",), "clickhouse://user:password@host:port/db"),
    "sqlalchemy": (("mysql", "mariadb"), "mysql+pymysql://user@host:3306/db"),
}


def bound_folder(data_dir: Path, spec: str, source_key: str) -> Path:
    """The folder of the backend `spec` serving one source of your own: each process works
    in `<folder>/<pid>`, and what every process may share is kept beside."""
    return data_dir / "stores" / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{spec}@{source_key}")[-80:]


def resolve_dsn(raw: str, kind: str = "postgres") -> str:
    """A `postgresql://` (or, for `kind` clickhouse, `clickhouse://`) DSN as written, or the
    value of the environment variable named."""
    if _ENV_NAME.match(raw):
        value = os.environ.get(raw, "").strip()
        if not value:
            raise StoreError(f"{kind}: environment variable {raw} (the source's DSN) is not set")
        raw = value
    prefixes, form = _DSN_FORMS[kind]
    if not raw.startswith(prefixes) or (kind == "sqlalchemy" and "://" not in raw):
        shown = hide_password(raw)
        raise StoreError(f"{kind}: {shown!r} is not a {form} DSN")
    if kind == "clickhouse":
        from stores.registry import load_source_class

        load_source_class(kind).check_location(raw)  # its database and parameters, said now
    return raw


def source_store_spec(binding: DatasetBinding, default: str) -> str:
    """The backend a source of your own runs on: the binding's `store`, else `--store` when
    it serves the source losslessly, else the native backend (when `--store` is the default).
    An unfit backend is returned as asked; `binding_problem` names it."""
    kind = binding.source_kind
    assert kind is not None
    if binding.store is not None:
        return binding.store
    if default in LOSSLESS[kind] or default != DEFAULT_STORE:
        return default
    return NATIVE[kind]


def binding_problem(binding: DatasetBinding, spec: str) -> str | None:
    """Why `spec` cannot serve the binding's source losslessly (None: it can)."""
    kind = binding.source_kind
    if kind is None or spec in LOSSLESS[kind]:
        return None
    return (
        f"the {kind} source {redact(binding.source or '')!r} cannot run on --store {spec} "
        f"without changing its types; it runs on {' or '.join(LOSSLESS[kind])} (run without "
        "--store, or select other scenarios)"
    )


def check_source(path: Path, scenario: Scenario) -> None:
    """The bound file, folder or DSN exists; otherwise `ScenarioFileError` at its line."""
    binding = scenario.dataset
    kind = binding.source_kind
    assert kind is not None
    problem: str | None = None
    if kind in DSN_KINDS:
        try:
            resolve_dsn(binding.source or "", kind)
        except StoreError as exc:
            problem = str(exc)
        role = binding.role
        if role is not None and role.lower().startswith("bi_"):
            file, line = locate(path, ("dataset", "role"))
            why = (
                f"role {role!r}: names starting with bi_ are the harness's own (it creates and "
                "`backintel clean` drops them); name a read-only role of yours"
            )
            raise ScenarioFileError(path, [(line, "dataset.role", why, file)])
    else:
        target = binding.source_path()
        wanted = {"sqlite": "file", "duckdb": "file"}.get(kind, "folder")
        if not (target.is_file() if wanted == "file" else target.is_dir()):
            problem = f"no {kind} {wanted} at {target} (paths are relative to this file)"
        elif kind in ("parquet", "csv") and not any(target.glob(f"*.{kind}")):
            problem = f"the folder {target} holds no *.{kind} files"
    if binding.store is not None and problem is None:
        problem = binding_problem(binding, binding.store)
    if problem is None and scenario.prediction is not None and kind != "sqlite":
        problem = (
            f"a prediction scenario over your own data needs a sqlite source, not {kind}: its "
            "program is re-run on copies with shuffled labels and shuffled features (the "
            "leakage checks), which are made from a SQLite file; export the tables to one"
        )
    if problem is not None:
        file, line = locate(path, ("dataset", kind))
        raise ScenarioFileError(path, [(line, f"dataset.{kind}", problem, file)])


class UserSource:
    """One bound source: a `World` (files, data hash, references from the lock file) that
    also makes the store serving it."""

    def __init__(self, binding: DatasetBinding) -> None:
        self.binding = binding
        self.kind: str = binding.source_kind or ""
        self.name = binding.world
        self.key = f"{self.kind}:{self._shown()}"
        self._hash: tuple[object, str] | None = None
        self._data_dir: Path | None = None
        """The data folder `ensure_built` was given: where stores keep what processes share."""

    def _location(self) -> str:
        if self.kind in DSN_KINDS:
            return resolve_dsn(self.binding.source or "", self.kind)
        return str(self.binding.source_path())

    def _shown(self) -> str:
        """The location as keys, folder names and messages carry it (no password), with the
        role a PostgreSQL binding names."""
        where = self._location()
        if self.kind in ("clickhouse", "sqlalchemy"):
            return hide_password(where)
        if self.kind != "postgres":
            return where
        role = f"?role={self.binding.role}" if self.binding.role else ""
        return redact(where, where) + role

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The source as `DatasetFiles` (nothing is built: the source is used as it is)."""
        self._data_dir = data_dir
        if self.kind in DSN_KINDS:
            return DatasetFiles(self.name, parquet_dir=data_dir / "no-parquet")
        path = Path(self._location())
        if not path.exists():
            raise StoreError(f"{self.kind} source {path} does not exist")
        if self.kind == "sqlite":
            return DatasetFiles(self.name, parquet_dir=path, sqlite_path=path)
        if self.kind in ("duckdb", "csv"):
            return DatasetFiles(self.name, parquet_dir=path, extra={self.kind: path})
        return DatasetFiles(self.name, parquet_dir=path)

    def _cache_dir(self, spec: str) -> Path | None:
        """Where `spec`'s stores of this source keep content hashes and fingerprints for every
        process (a session's, `references build`'s): the folder of `bound_folder`."""
        return None if self._data_dir is None else bound_folder(self._data_dir, spec, self.key)

    def make_store(self, spec: str, workdir: Path) -> Store:
        """The backend `spec` set up to serve this source (see `LOSSLESS`)."""
        if problem := binding_problem(self.binding, spec):
            raise StoreError(problem)
        in_place = (
            self.kind in ("postgres", "clickhouse", "duckdb", "csv")
            or (self.kind, spec) == ("parquet", "lake-parquet")
            or (self.kind, spec) == ("sqlite", "sqlite")  # used in place: no copy per item
        )
        if in_place:
            from stores.registry import load_source_class

            raw = self.binding.source or ""
            return load_source_class(self.kind).for_source(
                workdir,
                self._location(),
                role=self.binding.role,
                cache_dir=self._cache_dir(spec),
                dsn_env=raw if _ENV_NAME.match(raw) else None,
            )
        if self.kind == "sqlalchemy":  # used in place, reached through the registry only
            from stores.registry import load_store_class

            return load_store_class(f"sqlalchemy:in-place:{self._location()}")(workdir)
        from stores.registry import load_store_class

        return load_store_class(spec)(workdir)

    def _state(self) -> object:
        """What says the source may have changed (file stats; a database is always read)."""
        if self.kind in DSN_KINDS:
            return None
        path = Path(self._location())
        files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
        return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]

    def data_hash(self, files: DatasetFiles) -> str:
        """The logical fingerprint of a pristine copy on the native backend (cached while the
        source files are unchanged)."""
        state = self._state()
        if self._hash is not None and self._hash[0] == state and state is not None:
            return self._hash[1]
        import tempfile

        from stores.registry import available_sources, load_source_class

        if self.kind in DSN_KINDS and self.kind in available_sources():  # read as the DSN's
            # user, in place: no role, no copy (a SQLAlchemy URL is hashed on an item below)

            with tempfile.TemporaryDirectory(prefix="backintel-hash-") as tmp:
                source = load_source_class(self.kind).for_source(
                    Path(tmp),
                    self._location(),
                    role=self.binding.role,
                    cache_dir=self._cache_dir(self.kind),
                )
                try:
                    return source.source_fingerprint().logical
                finally:
                    source.teardown_session()
        with tempfile.TemporaryDirectory(prefix="backintel-hash-") as tmp:
            store = self.make_store(NATIVE[self.kind], Path(tmp) / "store")
            store.setup_session()
            try:
                item = store.provision(files)
                try:
                    digest = item.fingerprint().logical
                finally:
                    item.teardown()
            finally:
                store.teardown_session()
        self._hash = (state, digest)
        return digest

    def verify(self, data_dir: Path, snapshot: str = "base") -> list[str]:
        return []

    @property
    def fingerprint_method(self) -> str:
        """The name and version of the method behind `data_hash`."""
        from stores.common.fingerprint_methods import current_method

        return current_method(self.kind)

    def older_data_hash(self, method: str) -> str | None:
        """The data hash by an older fingerprint method this harness still has (to verify a
        lock an older release wrote); None when it has not."""
        from stores.common.fingerprint_methods import OLDER

        if method not in OLDER.get(self.kind, ()) or self.kind != "sqlite":
            return None
        import tempfile

        from stores.registry import load_source_class

        path = Path(self._location())
        files = DatasetFiles(self.name, parquet_dir=path, sqlite_path=path)
        with tempfile.TemporaryDirectory(prefix="backintel-hash-") as tmp:
            store = load_source_class(self.kind).for_source(
                Path(tmp) / "w", str(path), cache_dir=self._cache_dir("sqlite")
            )
            return store.older_fingerprint(files, method)

    def reference(
        self, scenario: Scenario, files: DatasetFiles, data_hash: str
    ) -> Mapping[str, Any]:
        """The scenario's values from the lock file beside it, refused if computed on other
        data or from another reference (a hash by an older fingerprint method is verified by
        that method where the harness still has it)."""
        from pytest_backintel.collect.lockfile import reference_for

        return reference_for(
            scenario, data_hash, method=self.fingerprint_method, rehash=self.older_data_hash
        )


_SOURCES: dict[str, UserSource] = {}
_BY_BINDING: dict[DatasetBinding, UserSource] = {}
"""Equal bindings (fields and the folder they are relative to) name the same source."""


def user_source(binding: DatasetBinding) -> UserSource | None:
    """The source a binding names (one object per source in this process), or None for a
    registered world."""
    if binding.source_kind is None:
        return None
    if (known := _BY_BINDING.get(binding)) is not None:  # asked for several times per trial
        return known
    source = UserSource(binding)
    _BY_BINDING[binding] = _SOURCES.setdefault(source.key, source)
    return _BY_BINDING[binding]


def check_name(names: dict[str, str], source: UserSource) -> None:
    """Two sources under one report name (`dataset.world`) in one run are an error."""
    other = names.setdefault(source.name, source.key)
    if other != source.key:
        raise StoreError(
            f"two sources are both named {source.name!r} ({other} and {source.key}); give one "
            "of them its own name with `dataset.world`"
        )


def world_for(binding: DatasetBinding) -> World:
    """The world behind a binding: a source of your own, or the registered world."""
    source = user_source(binding)
    return source if source is not None else get_world(binding.world)


def closest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def check_world(path: Path, scenario: Scenario) -> None:
    """A scenario names a registered world; otherwise `ScenarioFileError` at its line."""
    if scenario.dataset.source_kind is not None:
        check_source(path, scenario)
        return
    try:
        get_world_entry(scenario.dataset.world)
    except UnknownWorldError as exc:
        file, line = locate(path, ("dataset", "world"))
        raise ScenarioFileError(path, [(line, "dataset.world", str(exc), file)]) from exc

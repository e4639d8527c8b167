"""The embedded default backend: one read-only SQLite file copy per item.

`SQLiteStore.provision` copies the dataset's database (built once per process from Parquet when
the dataset has none, see `stores.sqlite.build`) to `<workdir>/<opaque id>.sqlite` and makes it
read-only. Analyst connections (`stores.sqlite.session`) are read-only four ways: `mode=ro`,
`PRAGMA query_only`, no extension loading and an authorizer that refuses every write, DDL,
ATTACH, transaction and non-introspection PRAGMA (`stores.sqlite.policy`); a progress handler
enforces the per-statement time limit.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

from stores.base import (
    Attachment,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    RowCounts,
    Store,
    StoreError,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.common.logical_cache import LogicalCache
from stores.common.once import OnceMap
from stores.common.pristine import same_state, set_pristine
from stores.common.sqlite_file import columns_read
from stores.fingerprint import file_sha256
from stores.sqlite.build import TemplateCache
from stores.sqlite.fingerprint import sqlite_logical_fingerprint
from stores.sqlite.policy import connect_read_only
from stores.sqlite.session import SQLiteSession

__all__ = ["SQLiteProvisionedStore", "SQLiteSession", "SQLiteStore", "sqlite_logical_fingerprint"]

LogicalOf = Callable[[sqlite3.Connection, Path], str]
"""How an item's logical fingerprint is read: from a read-only connection and the file's path."""

SharedCounts = OnceMap[tuple[str, tuple[str, ...], str], int]
"""Row counts by (content hash, denied tables, table)."""


class SQLiteProvisionedStore(ProvisionedStore):
    """One item's read-only database file and the sessions opened on it."""

    backend = "sqlite"

    def __init__(
        self,
        path: Path,
        store_id: str,
        timeout_s: float,
        on_teardown: Callable[[str], object] | None = None,
        logical_cache: LogicalCache | None = None,
        denied: tuple[str, ...] = (),
        logical_of: LogicalOf | None = None,
        row_counts: SharedCounts | None = None,
    ) -> None:
        self.store_id = store_id
        self._shared_counts = row_counts
        self._logical_of = logical_of or (lambda conn, _path: sqlite_logical_fingerprint(conn))
        self._denied = denied
        self._path = path
        self._timeout_s = timeout_s
        self._on_teardown = on_teardown
        self._logical_cache = LogicalCache() if logical_cache is None else logical_cache
        self._sessions: list[SQLiteSession] = []
        self._torn_down = False
        self._pristine: tuple[os.stat_result, str] | None = None
        """The copy's stat right after provisioning and its template's hash. While the file's
        inode, size, mode, mtime (set to `PRISTINE_MTIME_NS`, which any write moves to the
        present) and ctime (which every write, chmod or utime moves) are those, nothing has
        written it, and its hash is the template's without reading it again."""

    @property
    def mount_path(self) -> Path:
        return self._path

    def mark_pristine(self, state: os.stat_result, physical: str) -> None:
        """The file is unwritten while its stat is `state` (inode, size, mode, mtime, ctime),
        and its bytes then hash to `physical`: fingerprints skip reading it until it moves."""
        self._pristine = (state, physical)

    def _check_live(self) -> None:
        if self._torn_down or not self._path.exists():
            raise StoreError(f"store {self.display_id} is torn down or its file is missing")

    def columns_read(self, sql: str) -> dict[str, set[str]] | None:
        """What SQLite's authorizer sees read preparing `sql` on the file (`columns_read`)."""
        path = self.mount_path
        return None if path is None else columns_read(path, sql)

    def connect(self) -> SQLiteSession:
        self._check_live()
        session = SQLiteSession(self._path, self._timeout_s, self._denied, self._counts())
        self._sessions.append(session)
        return session

    def _counts(self) -> RowCounts | None:
        """Row counts by table, shared by every item of the same content and grants while this
        item's file is unwritten (a count reads the whole table: a second per GB)."""
        pristine, shared = self._pristine, self._shared_counts
        if pristine is None or shared is None:
            return None
        if not same_state(pristine[0], self._path.stat()):
            return None
        key = (pristine[1], self._denied)
        return lambda table, count: shared.get((*key, table), count)

    def attachment(self) -> Attachment | None:
        path = self.mount_path  # the file alone: its folder holds other items' copies
        files = tuple(path.with_name(path.name + s) for s in ("", "-journal", "-wal", "-shm"))
        return Attachment(str(path), "sqlite", "main", (), ("sqlite_scanner",), files)

    def fingerprint(self) -> Fingerprint:
        """Logical and physical hashes; the logical one read through a private connection."""
        self._check_live()
        pristine = self._pristine
        if pristine is not None and same_state(pristine[0], self._path.stat()):
            physical = pristine[1]
        else:
            self._pristine = None  # written once: hashed from now on
            physical = file_sha256(self._path)
        logical = self._logical_cache.get(physical, lambda: self._logical(physical))
        return Fingerprint(logical=logical, physical=physical)

    def _logical(self, physical: str) -> str:
        """The logical fingerprint, read through a private read-only connection; the file's
        stat (which every write moves) must be the same after as before."""
        before = self._path.stat()
        conn = connect_read_only(self._path)
        try:
            logical = self._logical_of(conn, self._path.resolve())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot fingerprint store {self.display_id}: {exc}") from exc
        finally:
            conn.close()
        if not same_state(before, self._path.stat()):
            raise StoreError(f"store {self.display_id} changed while it was fingerprinted")
        return logical

    def teardown(self) -> None:
        """Close every session, delete the file and its side files; idempotent."""
        self._torn_down = True
        if self._on_teardown is not None:
            self._on_teardown(self.store_id)
        for session in self._sessions:
            session.close()
        self._sessions.clear()
        for suffix in ("", "-journal", "-wal", "-shm"):
            side = self._path.with_name(self._path.name + suffix)
            try:
                side.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot remove {side} of store {self.display_id}: {exc}") from exc


class SQLiteStore(Store):
    """The `sqlite` backend: a plain file copy per item, read-only at the OS and SQLite level."""

    name: ClassVar[str] = "sqlite"
    capabilities = StoreCapabilities(sandbox_mount="file", denies_grants=True)

    @classmethod
    def fingerprint_file(cls, path: Path) -> Fingerprint:
        """Logical (tables, schemas, rows) and physical (file bytes) sha256 of a SQLite file."""
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            logical = sqlite_logical_fingerprint(conn)
        finally:
            conn.close()
        return Fingerprint(logical=logical, physical=file_sha256(path))

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._templates = TemplateCache(self.workdir)
        self._live: dict[str, SQLiteProvisionedStore] = {}
        self._logical_cache = LogicalCache(self.workdir.parent / "logical", backend=self.name)
        """Shared by every process of this backend on the machine
        (`stores.common.logical_cache`)."""
        self._template_hashes = OnceMap[tuple[str, int, int, int], str]()
        self._row_counts = SharedCounts()

    def provision(self, dataset: DatasetFiles) -> SQLiteProvisionedStore:
        source = self._templates.template(dataset)
        self.workdir.mkdir(parents=True, exist_ok=True)
        while True:  # the id is random; O_EXCL makes a (vanishingly rare) clash retry
            store_id = new_store_id()
            dest = self.workdir / f"{store_id}.sqlite"
            try:
                os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                break
            except FileExistsError:
                continue
        store = SQLiteProvisionedStore(
            dest,
            store_id,
            self.statement_timeout_s,
            on_teardown=lambda sid: self._live.pop(sid, None),
            logical_cache=self._logical_cache,
            denied=dataset.denied,
            row_counts=self._row_counts,
        )
        try:
            shutil.copyfile(source, dest)
            dest.chmod(0o444)
            store.mark_pristine(set_pristine(dest), self._template_hash(source))
        except OSError as exc:
            store.teardown()
            raise StoreError(f"cannot copy dataset {dataset.name!r} to {dest}: {exc}") from exc
        self._live[store_id] = store
        return store

    def _template_hash(self, template: Path) -> str:
        """The template's SHA-256, hashed once per state of the file."""
        state = template.stat()
        key = (str(template), state.st_size, state.st_mtime_ns, state.st_ino)
        return self._template_hashes.get(key, lambda: file_sha256(template))

    def teardown_session(self) -> None:
        """Tear down stores still alive and delete this process's built templates."""
        for store in list(self._live.values()):
            store.teardown()
        self._live.clear()
        self._templates.clear()

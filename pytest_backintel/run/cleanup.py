"""Remove what a killed run left behind: store copies, sandbox folders, cgroups, databases.

Every artefact names its owner: store and sandbox folders carry `stores.owner.OWNER_FILE`
(and sit under a folder named by the owner's pid: `<data>/stores/<spec>/<pid>/`,
`<data>/sandbox/<pid>/`), pids cgroups are named `<pid>-<token>`, PostgreSQL databases and
roles carry the owner as a comment, and the `bi_` databases made on a ClickHouse source's
server are listed in the store folder that made them (each backend sweeps its own server:
`stores.registry.load_sweepers`). Only
artefacts whose owner is gone are removed (another host's are never judged), so live
sessions of other users on the same machine keep theirs. Runs at every session start
(controller) and on demand as `backintel clean`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stores.owner import read_folder_owner

__all__ = ["CleanReport", "clean_stale", "register", "remove_folder", "stale_folders"]


@dataclass
class CleanReport:
    """What was removed (or, with `dry_run`, would be), and what could not be checked."""

    folders: list[Path] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    """What a gone run made that could not be removed (its record is kept): `clean` fails."""

    def lines(self) -> list[str]:
        out = [f"removed folder {p}" for p in self.folders]
        out += [f"removed cgroup {p}" for p in self.cgroups]
        named = ("clickhouse ", "sqlalchemy ")  # the others are PostgreSQL's
        out += [f"dropped {n}" if n.startswith(named) else f"dropped postgres {n}"
                for n in self.databases]  # fmt: skip
        out += [f"skipped: {s}" for s in self.skipped]
        out += [f"left behind: {s}" for s in self.left]
        return out or ["nothing left behind by a process that is gone"]


def _gone(folder: Path) -> bool:
    """The folder's owner is gone: its marker (or its subfolders' markers) says so, or, with
    no marker, the pid it is named by does not run."""
    owner = read_folder_owner(folder)
    if owner is not None:
        return owner.is_gone()
    inner = [o for c in folder.iterdir() if c.is_dir() and (o := read_folder_owner(c))]
    if inner:  # `sandbox/<pid>/backintel-sbx-*` carry the markers one level down
        return all(o.is_gone() for o in inner)
    pid = folder.name.removeprefix("score-")  # `backintel score`'s sandbox folders
    if pid.isdigit():
        return not Path(f"/proc/{pid}").exists()
    return False


def remove_folder(folder: Path) -> None:
    """Delete `folder` without ever following a symlink: a sandbox workspace may hold links
    the payload planted (to the interpreter, to /etc), and only real directories under
    `folder` get write permission back so their entries can be unlinked. A folder another
    process removes first (two sessions starting side by side, e.g. shards) is simply gone."""
    if folder.is_symlink() or not folder.is_dir():
        return
    try:
        folder.chmod(0o700)
        for dirpath, dirnames, _ in os.walk(folder, followlinks=False):
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o700)
    except FileNotFoundError:
        return
    shutil.rmtree(folder, ignore_errors=True)


def stale_folders(data_dir: Path) -> list[Path]:
    """Per-process store and sandbox folders under `data_dir` (and the system temporary
    folder's `backintel-sbx-*`) whose owner is gone."""
    candidates = [*data_dir.glob("stores/*/*"), *data_dir.glob("sandbox/*")]
    candidates += Path(tempfile.gettempdir()).glob("backintel-sbx-*")
    return sorted(p for p in candidates if p.is_dir() and not p.is_symlink() and _gone(p))


def _postgres(report: CleanReport, dry_run: bool) -> None:
    """Each backend's sweep of its default server (PostgreSQL's: databases and roles)."""
    from stores.base import SweepIncomplete
    from stores.registry import load_sweepers

    for sweeper in load_sweepers().values():
        try:
            report.databases += sweeper.sweep_server(dry_run)
        except SweepIncomplete as exc:  # what it could not drop is named: `clean` fails
            report.databases += exc.dropped
            report.left += exc.left
        except Exception as exc:  # no server, no driver: nothing of ours can be there to drop
            from stores.common.dsn import redact

            report.skipped.append(redact(str(exc).strip()[:200]))


def _source_servers(report: CleanReport, folder: Path, dry_run: bool) -> bool:
    """Sweep the server of a source of your own a gone process served from `folder` (the
    roles or databases it made there, authenticating as the run did); False, with what is
    left named in `report.left`, when its record must stay until they are gone."""
    from stores.base import SweepIncomplete
    from stores.registry import load_sweepers

    complete = True
    for name, sweeper in load_sweepers().items():
        try:
            dropped = sweeper.sweep_folder(folder, dry_run)
        except SweepIncomplete as exc:  # unreachable, no password, or a role still there
            report.databases += exc.dropped
            report.left += exc.left
            complete = False
            continue
        except Exception as exc:  # an unreadable record: said, never fatal
            from stores.common.dsn import redact

            report.skipped.append(f"{name} source in {folder}: {redact(str(exc).strip()[:160])}")
            continue
        if dropped is not None:
            report.databases += dropped
    return complete


STORE_FILE = ".backintel-store.json"
"""A store folder whose store made things on a server names its registry spec here
(`{"spec": ...}`, mode 0600): `backintel clean` starts that store, whose `setup_session`
sweeps the items of gone owners, and stops it (`stores.sqlalchemy` writes one)."""


def _registered_sweep(report: CleanReport, marker: Path, dry_run: bool) -> None:
    """Sweep the server of a store folder a gone process used, through the store itself."""
    import json

    from pytest_backintel.collect.suites import hide_password
    from stores.registry import load_store_class

    try:
        spec = str(json.loads(marker.read_text())["spec"])
        if not dry_run:
            with tempfile.TemporaryDirectory(prefix="backintel-clean-") as tmp:
                store = load_store_class(spec)(Path(tmp))
                store.setup_session()
                store.teardown_session()
            where = hide_password(spec.split(":", 1)[1])
            report.databases.append(f"sqlalchemy items of gone runs on {where}")
    except Exception as exc:  # unreachable server, no driver: said, never fatal
        report.skipped.append(f"store in {marker.parent}: {hide_password(str(exc))[:160]}")


def clean_stale(data_dir: Path, *, dry_run: bool = False, postgres: bool = True) -> CleanReport:
    """Remove every artefact of a gone owner (see the module docstring)."""
    from pytest_backintel.sandbox.cgroup import RunCgroup
    from stores.registry import load_sweepers

    report = CleanReport()
    folders = stale_folders(data_dir)
    # the backends' sweepers (an entry-point scan, their modules) only when a folder is stale
    sweepers = list(load_sweepers().values()) if folders else []
    for folder in folders:
        if not postgres and any((folder / s.SOURCE_FILE).is_file() for s in sweepers):
            continue  # a source's server: kept for `backintel clean`, which sweeps it first
        if postgres and not _source_servers(report, folder, dry_run):
            continue  # its record stays until what it names is gone
        if (folder / STORE_FILE).is_file():  # a store that sweeps its own server
            if not postgres:
                continue
            _registered_sweep(report, folder / STORE_FILE, dry_run)
        if not dry_run:
            remove_folder(folder)
        report.folders.append(folder)
    if not dry_run:
        report.cgroups += RunCgroup.sweep_stale()
    if postgres:
        _postgres(report, dry_run)
    return report


def clean_stale_in_background(
    data_dir: Path, after: Callable[[], object] | None = None
) -> threading.Thread:
    """`clean_stale` at a session's start: the folders and cgroups now, the PostgreSQL sweep
    (a server round trip, needed only by runs that can have left databases) in a thread the
    session joins at its end, so the first item does not wait for it. The thread first calls
    `after` (the session's wait for its first model request to come back): importing psycopg
    is CPU that, under one GIL, would otherwise delay that request."""
    clean_stale(data_dir, postgres=False)

    def sweep() -> None:
        if after is not None:
            after()
        _postgres(CleanReport(), False)

    thread = threading.Thread(target=sweep, name="backintel-pg-sweep", daemon=True)
    thread.start()
    return thread


def _clean_command(args: argparse.Namespace) -> int:
    from pytest_backintel.collect.worlds import data_dir

    folder = Path(args.data_dir) if args.data_dir else data_dir(Path.cwd())
    report = clean_stale(folder, dry_run=args.dry_run, postgres=not args.no_postgres)
    for line in report.lines():
        print(f"would have {line}" if args.dry_run and line.startswith("removed") else line)
    return 1 if report.left else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `backintel clean` to the CLI's subcommands."""
    p = sub.add_parser(
        "clean",
        help="remove store copies, sandbox folders, cgroups, PostgreSQL databases/roles and "
        "ClickHouse bi_ databases left by runs whose process is gone",
    )
    p.add_argument("--data-dir", help="the data folder (default: $BACKINTEL_DATA_DIR or data/)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed")
    p.add_argument(
        "--no-postgres",
        action="store_true",
        help="leave database servers alone (PostgreSQL, a ClickHouse source's server)",
    )
    p.set_defaults(func=_clean_command)

"""What a store can do, declared once on its class (`Store.capabilities`), never guessed.

The harness decides from the declaration: whether an item's data is the user's own source
read where it is or a copy per item, how the evidence stage's data probes are served, what a
sandbox mounts, whether a trial's signature is checked, how read-only is enforced, the SQL
dialect the analyst writes and which server the store needs. A combination a store does not
offer is one `UnsupportedCapability` error naming the store and the capability.
`backintel stores` prints the declarations as a table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

__all__ = ["CAPABILITY_DOCS", "StoreCapabilities", "UnsupportedCapability", "require"]

Perturbation = Literal["copy", "views", "none"]
Mount = Literal["file", "folder", "none"]


class UnsupportedCapability(ValueError):
    """A store was asked for something its declaration says it cannot do (a usage error)."""


@dataclass(frozen=True)
class StoreCapabilities:
    """One store's declaration. Every field has a documented meaning (`CAPABILITY_DOCS`)."""

    in_place: bool = False
    """True: the user's own data is read where it is; False: each item gets its own copy."""
    perturbation: Perturbation = "copy"
    """How data probes are served: `copy` (a perturbed copy provisioned like any dataset),
    `views` (views over the source, `Store.view_probe_kind`), `none` (no probe)."""
    sandbox_mount: Mount = "folder"
    """What a Python sandbox mounts read-only: the item's `file`, its `folder`, or `none`
    (the data lives on a server; Python evidence reads it through the query channel)."""
    trial_signature: bool = True
    """Whether a cheap signature is taken before and after each trial (a write is caught)."""
    read_only: str = "engine"
    """How writes are refused: `engine` (the engine opens the data read-only), `role`
    (a SELECT-only role or user on a server), `policy` (statements checked before running)."""
    dialect: str = "sqlite"
    """The SQL dialect the analyst writes (`sqlite`, `duckdb`, `postgres`, `clickhouse`)."""
    server: str | None = None
    """The server the store needs running (None: embedded, nothing to start)."""
    denies_grants: bool = False
    """Whether a per-table read grant can be withheld (`DatasetFiles.denied`)."""
    reads_sqlite_file: bool = True
    """Whether `provision` reads a dataset's SQLite file (`DatasetFiles.sqlite_path`) when it
    has one: a data probe's perturbed copy then comes with one, written once per machine; a
    store that reads only the Parquet files (False) is spared writing it."""

    def rows(self) -> list[tuple[str, str]]:
        """(capability, value) pairs in declaration order, as `backintel stores` prints them."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            text = "yes" if value is True else "no" if value is False else str(value or "-")
            out.append((f.name, text))
        return out


CAPABILITY_DOCS = {
    "in_place": "the user's data read where it is (yes) or copied per item (no)",
    "perturbation": "how data probes are served: copy, views, none",
    "sandbox_mount": "what a Python sandbox mounts: file, folder, none",
    "trial_signature": "a signature checked before and after each trial",
    "read_only": "how writes are refused: engine, role, policy",
    "dialect": "the SQL dialect the analyst writes",
    "server": "the server it needs (- : embedded)",
    "denies_grants": "a per-table read grant can be withheld",
    "reads_sqlite_file": "reads a dataset's SQLite file (a probe's copy is written with one)",
}


def require(store: str, caps: StoreCapabilities, capability: str, wanted: object) -> None:
    """Raise `UnsupportedCapability` unless `caps.<capability>` is `wanted` (or, for a
    `bool` wanted True, true): one message naming the store, the capability and both values."""
    have = getattr(caps, capability)
    if have == wanted:
        return
    raise UnsupportedCapability(
        f"store {store!r} does not support {capability}={wanted!r} (it declares "
        f"{capability}={have!r}); see `backintel stores` for what each store offers"
    )

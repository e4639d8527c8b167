"""What every data probe served as views shares: it is never fingerprinted (nothing of it is
stored), and what must see files (Python evidence in a sandbox) gets the perturbed tables
written out on first use, by a builder the probe was given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stores.base import Fingerprint, ProvisionedStore, StoreError

__all__ = ["DROP_ONE_IN", "TablePlan", "ViewProbeStore", "shift_factor"]


DROP_ONE_IN = 4


class ViewProbeStore(ProvisionedStore):
    """A probe read through views; `mount_path` is the materialised copy, built on first use
    by `materialise_to` (None: no builder, nothing to mount)."""

    def __init__(self, materialise_to: Callable[[], Path] | None = None) -> None:
        self._materialise_to = materialise_to
        self._mount: Path | None = None

    def fingerprint(self) -> Fingerprint:
        raise StoreError("a data probe is read through views and is not fingerprinted")

    @property
    def mount_path(self) -> Path | None:
        """The perturbed tables as files, built on first use (None: no builder)."""
        if self._mount is None and self._materialise_to is not None:
            self._mount = self._materialise_to()
        return self._mount


@dataclass
class TablePlan:
    """How one table is perturbed: its columns, the entity key whose hash drops rows, the
    parents it must keep pointing at, and the numeric columns to scale."""

    columns: list[str]
    key: list[str] = field(default_factory=list)
    parents: list[tuple[list[str], str, list[str]]] = field(default_factory=list)
    """(columns here, parent table, parent columns)."""
    scale: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    """Column -> declared type (upper case), as the catalog gives it."""
    one_in: int = DROP_ONE_IN
    """One row in this many is dropped by its key's hash (a power of two)."""
    shift: list[str] = field(default_factory=list)
    """Integer columns moved by `shift_factor` (a probe that must move an answer, only)."""
    exclude: list[tuple[str, str]] = field(default_factory=list)
    """(text column, value): rows holding the value there are dropped (the answer's own
    category, so a probe can change which one wins)."""


def shift_factor(salt: int) -> int:
    """The sixteenths an integer column grows by on a probe of `salt` (`TablePlan.shift`):
    between 8 and 15, so 0 and 1 (flags) stay and every other value moves, the same function
    of the value in every column (a join on integers still matches)."""
    return 8 + salt % 8

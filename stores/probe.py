"""What every data probe served as views shares: it is never fingerprinted (nothing of it is
stored), and what must see files (Python evidence in a sandbox) gets the perturbed tables
written out on first use, by a builder the probe was given; or at once, in the background,
when its sessions are to read that copy rather than the views (`copy_in_background`)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stores.base import Fingerprint, ProvisionedStore, StoreError

__all__ = ["DROP_ONE_IN", "TablePlan", "ViewProbeStore", "shift_factor"]


DROP_ONE_IN = 4


COPY_NICENESS = 10
"""The copy's thread runs this much nicer than the harness (Linux: per thread), so writing it
slows the analyst's own queries on the source less."""
_ONE_COPY_AT_A_TIME = threading.Lock()
"""A process writes one probe copy at a time (each salt has its own): two written at once
would double the memory the engine streams them in."""


class ViewProbeStore(ProvisionedStore):
    """A probe read through views; `mount_path` is the materialised copy, built on first use
    by `materialise_to` (None: no builder, nothing to mount).

    With `copy_in_background`, that copy is built at once on a thread of its own (cached by
    the source's data hash, so every worker and run reuses it; the probe is made while the
    analyst works) and sessions read it once it is there (`copy`): a query there costs what
    it costs on the source, where a view computes the drops and the rescaling on every row."""

    def __init__(
        self, materialise_to: Callable[[], Path] | None = None, copy_in_background: bool = False
    ) -> None:
        self._materialise_to = materialise_to
        self._mount: Path | None = None
        self._copy: Path | None = None
        self._copying: threading.Thread | None = None
        if copy_in_background and materialise_to is not None:
            self._copying = threading.Thread(
                target=self._make_copy, name="backintel-probe-copy", daemon=True
            )
            self._copying.start()

    def _make_copy(self) -> None:
        with contextlib.suppress(OSError):  # this thread only, below the analyst's queries
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + COPY_NICENESS)
        try:
            with _ONE_COPY_AT_A_TIME:
                copy = self.mount_path
        except Exception:  # the views serve every session instead
            return
        self._copy = copy

    def copy(self) -> Path | None:
        """The copy sessions read, waiting for the build under way (so every trial reads the
        same data the same way); None: they read the views."""
        if self._copying is not None:
            self._copying.join()
        return self._copy

    @property
    def copied(self) -> bool:
        """Whether sessions now read the materialised copy rather than the views."""
        return self._copy is not None

    def finish_copy(self) -> None:
        """Wait for a copy under way (the next run reuses it; a process that ended mid-copy
        would leave half of it behind)."""
        if self._copying is not None:
            self._copying.join()

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

"""What a test module declares to run the suite: the stores (`StoreCase`), what each needs to
be checked (hooks), and its deviations (`deviation`), each with a reason and the exception it
expects.

A deviation becomes a strict `xfail(raises=...)` on that store's parameter of that check: the
check must fail with exactly that exception. Passing, or failing with another exception, fails
the suite, and so does any failure that no deviation declares.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stores.base import DatasetFiles, ProvisionedStore, Store, StoreError
from stores.registry import UnknownStoreError, load_store_class

__all__ = [
    "REQUIRE_ENV",
    "Deviation",
    "NoHook",
    "StoreCase",
    "deviation",
    "is_required",
    "only",
    "start_store",
    "store_class",
]

REQUIRE_ENV = "BACKINTEL_REQUIRE"
"""Comma list of stores (specs or their registered names) that must run: one that cannot
fails the suite instead of skipping."""

Tamper = Callable[[ProvisionedStore], None]
Probe = Callable[[Store, ProvisionedStore, DatasetFiles, Path], AbstractContextManager[Any]]
Leftover = Callable[[Store, str, "Path | None", Path], bool]
"""(the suite's store, the killed item's id, its mount path, the killed process's workdir)."""


class NoHook(NotImplementedError):
    """The case gives no hook for what this check needs: declare a deviation raising it."""


@dataclass(frozen=True)
class Deviation:
    """One check a store does not pass as the suite states it, why, and how it fails."""

    test: str
    """The check's function name (`test_probe_moves_every_table`)."""
    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...]
    kind: str = "notyet"
    """`notimpl` (the store could, it is not written) or `notyet` (the engine cannot)."""

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError(f"deviation from {self.test!r}: a reason is mandatory")
        kinds = self.raises if isinstance(self.raises, tuple) else (self.raises,)
        if not kinds or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise ValueError(
                f"deviation from {self.test!r}: raises= must name the exception(s) it expects, "
                f"got {self.raises!r}"
            )
        if self.kind not in ("notimpl", "notyet"):
            raise ValueError(f"deviation from {self.test!r}: kind is notimpl or notyet")

    def mark(self, store: str) -> pytest.MarkDecorator:
        return pytest.mark.xfail(
            raises=self.raises, strict=True, reason=f"{self.kind} on {store}: {self.reason}"
        )


def deviation(
    test: str,
    *,
    reason: str,
    raises: type[BaseException] | tuple[type[BaseException], ...],
    kind: str = "notyet",
) -> Deviation:
    """Declare that `test` fails on a store, with `reason` and the exception `raises`."""
    return Deviation(test, reason, raises, kind)


def _nothing_left(store: Store, store_id: str, mount: Path | None, workdir: Path) -> bool:
    """The default leftover check: the killed item's mount path (when it had one) is gone."""
    if mount is None:
        raise NoHook("the store has no mount path: give the case a `leftover` hook")
    return mount.exists()


@dataclass(frozen=True)
class StoreCase:
    """One store the suite runs over: its registry spec, hooks, and declared deviations."""

    spec: str
    """What `stores.registry.load_store_class` loads (`sqlite`, `sqlalchemy:<url>`)."""
    store_class: str | None = None
    """`module:Class` of a store not (yet) registered, imported instead of the registry's
    (a package's own tests run before it is installed); `spec` is then only its name."""
    id: str = ""
    """The test id (default: the spec, cut before any `://`, so no URL's password shows)."""
    deviations: Sequence[Deviation] = ()
    tamper: Tamper | None = None
    """Change order 1's row behind the store's back (as a superuser or file owner)."""
    probe: Probe | None = None
    """A context manager giving a perturbed copy of an item (the evidence probe); default:
    `item.probe(salt)` when the item has one."""
    leftover: Leftover = _nothing_left
    """Whether anything of a killed process's item (`store_id`, its mount, its process's
    workdir) is still there; default: its mount path, when it has one."""
    sweep: Callable[[Path], object] | None = None
    """What a user runs after a crash, given the killed store's workdir (default: a fresh
    store's `setup_session` on it)."""
    fixtures: Sequence[str] = ()
    """Fixtures to request before the store starts (a server the store needs)."""
    shown: Callable[[ProvisionedStore, list[str]], list[str]] | None = None
    """The names a session lists for a dataset's tables (default: the tables)."""
    whole_seconds: bool = False
    """The store keeps timestamps to the second: its dataset has no fractions."""
    slow_sql: str | None = None
    """A statement that runs past 1.5 s on this store (default: a five-way cross join)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Anything else a store-specific check of the importing module reads."""

    def __post_init__(self) -> None:
        if not self.id:  # a URL's credentials and host stay out of test ids
            object.__setattr__(self, "id", self.spec.split("://", 1)[0])

    @property
    def family(self) -> str:
        """The registered name (`multi:...` -> `multi`)."""
        return self.spec.split(":", 1)[0]

    def marks(self, test: str) -> list[pytest.MarkDecorator]:
        return [d.mark(self.id) for d in self.deviations if d.test == test]

    def names(self, item: ProvisionedStore, tables: list[str]) -> list[str]:
        return tables if self.shown is None else self.shown(item, tables)


def only(applies: Callable[[StoreCase], bool]) -> Callable[[Any], Any]:
    """Run the decorated check on the cases `applies` accepts, and only on those."""

    def mark(test: Any) -> Any:
        test.conformance_applies = applies
        return test

    return mark


def required() -> set[str]:
    return {b.strip() for b in os.environ.get(REQUIRE_ENV, "").split(",") if b.strip()}


def is_required(spec: str) -> bool:
    wanted = required()
    return spec in wanted or spec.split(":", 1)[0] in wanted


def store_class(spec: str, path: str | None = None) -> type[Store]:
    """The class `path` (`module:Class`) names, else the registry's `spec`."""
    if path is None:
        return load_store_class(spec)
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Store)):
        raise UnknownStoreError(f"{path} is not a Store subclass")
    return cls


def start_store(spec: str, workdir: Path, timeout_s: float = 1.5, path: str | None = None) -> Store:
    """The store set up for a session, or a skip (a failure when it is required)."""
    try:
        store = store_class(spec, path)(workdir, statement_timeout_s=timeout_s)
        store.setup_session()
    except (StoreError, UnknownStoreError, ImportError) as exc:
        message = f"store backend {spec.split(':', 1)[0]!r} cannot run here: {exc}"
        if is_required(spec):
            pytest.fail(f"{message} (required by {REQUIRE_ENV})")
        pytest.skip(message)
    return store

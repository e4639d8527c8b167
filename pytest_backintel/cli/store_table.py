"""`backintel stores`: every registered store and what it declares it can do, as a table.

The store classes are loaded only when the command runs (their engines are imported with
them), so the rest of the CLI stays light."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stores.base import Store

__all__ = ["register", "store_rows"]


def store_rows() -> list[dict[str, str]]:
    """One row per registered store (sorted by name), then one per kind of source of your
    own used in place (`<kind> source`): its name, class and capabilities; a store that
    cannot be loaded says why instead."""
    from stores.registry import (
        UnknownStoreError,
        available_sources,
        available_stores,
        load_source_class,
        load_store_class,
    )

    named: list[tuple[str, Callable[[], type[Store]]]] = [
        (name, partial(load_store_class, name)) for name in available_stores()
    ]
    named += [(f"{kind} source", partial(load_source_class, kind)) for kind in available_sources()]
    rows = []
    for name, load in named:
        row = {"store": name}
        try:
            cls = load()
        except UnknownStoreError as exc:
            rows.append({**row, "error": str(exc)})
            continue
        row["class"] = f"{cls.__module__}:{cls.__qualname__}"
        row.update(cls.capabilities.rows())
        rows.append(row)
    return rows


def _table(rows: list[dict[str, str]], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(r.get(c, "")) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines.append("  ".join("-" * widths[c] for c in columns))
    lines += ["  ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def _stores(args: argparse.Namespace) -> int:
    from stores.capabilities import CAPABILITY_DOCS

    rows = store_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    columns = ["store", *CAPABILITY_DOCS]
    print(_table(rows, columns))
    for row in rows:
        if "error" in row:
            print(f"{row['store']}: {row['error']}")
    print()
    for name, doc in CAPABILITY_DOCS.items():
        print(f"{name}: {doc}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `backintel stores` to the CLI's subcommands."""
    p = sub.add_parser("stores", help="list the registered stores and their capabilities")
    p.add_argument("--json", action="store_true", help="one JSON object per store")
    p.set_defaults(func=_stores)

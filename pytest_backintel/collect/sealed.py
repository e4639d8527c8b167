"""Sealed reserved suites: a committed commitment stands in for the manifest until a frozen run.

A sealed manifest holds no question, reference or check query:

    {"suite": "acceptance-v1", "split": "reserved",
     "sealed": {"world": "acceptance-v1", "secret_id": "...", "manifest_sha256": "...", ...},
     "cases": [{"id": "acc-res-signed-revenue", "level": 2, "family": "signed_revenue",
                "answerable": true, "commitment": "<sha256 of the case and its store>"}]}

Collection turns each case into a `SealedCase` that carries the case's name and markers and
never runs. Outside `--freeze` an explicit selection of reserved items is a usage error and a
plain run deselects them; a frozen run asks the world named by `sealed.world` to regenerate the
suite from the evaluator's secret (`SealedWorld.unseal`), which refuses a missing or different
secret and a changed generator, and the placeholders are replaced by the real items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pytest

from pytest_backintel.collect.items import ScenarioItem, store_marker
from pytest_backintel.scenario import Split

__all__ = [
    "SealedCase",
    "SealedSuiteError",
    "SealedWorld",
    "guard_reserved",
    "is_reserved",
    "refuse",
    "sealed_items",
]


REFUSAL = (
    "reserved cases run only in a frozen run of the whole suite: add --freeze "
    "(pytest -m reserved --freeze, with the evaluator's secret set), or leave them out "
    "(-m 'not reserved')"
)


class SealedSuiteError(Exception):
    """A sealed suite cannot be opened: the secret is missing or different, or the generator
    no longer reproduces the commitment. The message names which and what to do."""


@runtime_checkable
class SealedWorld(Protocol):
    """A world that can regenerate a sealed suite from the evaluator's secret."""

    def unseal(self, commitment: Path, data_dir: Path) -> tuple[Path, dict[str, Any]]:
        """Regenerate the suite of `commitment` under `data_dir`, check every case against its
        commitment, and return the generated manifest's path and what was verified; raise
        `SealedSuiteError` otherwise."""
        ...


class SealedCase(pytest.Item):
    """One trial of a reserved case that is still sealed (name and markers only); run, it
    fails saying why (an xdist worker cannot stop the run with a usage error)."""

    case_id: str
    message: str = REFUSAL

    def runtest(self) -> None:
        raise SealedSuiteError(f"{self.case_id}: {self.message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, SealedSuiteError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, 0, f"sealed reserved case {self.case_id}"


def sealed_items(
    parent: pytest.File, cases: list[dict[str, Any]], trials: int, backend: str
) -> Iterator[SealedCase]:
    """The placeholders of a sealed manifest's cases, named as their real items will be."""
    for case in cases:
        for trial in range(1, int(case.get("trials") or trials) + 1):
            item = SealedCase.from_parent(parent, name=f"{case['id']}[t{trial}]")
            item.case_id = str(case["id"])
            answerable = "answerable" if case.get("answerable") else "unanswerable"
            for marker in ("reserved", answerable, f"level{case.get('level')}"):
                item.add_marker(marker)
            item.add_marker(store_marker(backend))
            if case.get("family"):
                item.extra_keyword_matches.add(str(case["family"]))
            yield item


def is_reserved(item: pytest.Item) -> bool:
    return isinstance(item, SealedCase) or (
        isinstance(item, ScenarioItem) and item.scenario.split is Split.RESERVED
    )


def _explicit(config: pytest.Config, items: list[pytest.Item]) -> bool:
    """Did the user select these items (by -m, -k, a node id or the file itself)?"""
    if config.option.markexpr or config.option.keyword:
        return True
    paths = {item.path for item in items}
    for arg in config.args:
        target = arg.split("::", 1)[0]
        if "::" in arg or (config.invocation_params.dir / target).resolve() in paths:
            return True
    return False


def guard_reserved(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """Outside a frozen run: refuse an explicit selection of reserved items, deselect them
    from a plain run. Returns the header line to print (empty when there were none)."""
    reserved = [item for item in items if is_reserved(item)]
    if not reserved:
        return []
    if _explicit(config, reserved):
        names = ", ".join(item.name for item in reserved[:3])
        more = f" and {len(reserved) - 3} more" if len(reserved) > 3 else ""
        message = f"the selection includes {len(reserved)} reserved item(s) ({names}{more}); "
        refuse(config, items, message + REFUSAL, REFUSAL, is_reserved)
        return []
    config.hook.pytest_deselected(items=reserved)
    items[:] = [item for item in items if not is_reserved(item)]
    return [
        f"backintel: {len(reserved)} reserved item(s) deselected: they run only with --freeze, "
        "as a whole suite (pytest -m reserved --freeze)"
    ]


def refuse(
    config: pytest.Config,
    items: list[pytest.Item],
    message: str,
    per_item: str | None = None,
    which: Callable[[pytest.Item], bool] = lambda _item: True,
) -> None:
    """A usage error; on an xdist worker (which cannot stop the run with one) the affected
    items are replaced by placeholders that fail with the message, so none of them runs."""
    if not hasattr(config, "workerinput"):
        raise pytest.UsageError(message)
    for index, item in enumerate(items):
        if which(item) and item.parent is not None:
            refusal = SealedCase.from_parent(item.parent, name=item.name)
            refusal.case_id, refusal.message = item.name, per_item or message
            items[index] = refusal

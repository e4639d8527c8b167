"""The one place that reads another plugin's internals: which items this process runs next,
and pytest's JUnit XML writer (to add the run's rates as testsuite properties).

Serially that is `session.items` from the current item on. Under pytest-xdist a worker runs
the indices its controller has queued for it (`WorkerInteractor.torun`, xdist 3.x); without
that queue only the current item is known, and trials simply run one at a time.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_backintel.collect.items import ScenarioItem

__all__ = ["junit_xml", "upcoming_items"]


def junit_xml(config: pytest.Config) -> Any:
    """pytest's `LogXML` when `--junitxml` is given (it has `add_global_property`), else None."""
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


_POSITIONS = pytest.StashKey[tuple[int, dict[int, int]]]()


def _position(session: pytest.Session, item: pytest.Item) -> int:
    cached = session.stash.get(_POSITIONS, None)
    if cached is None or cached[0] != id(session.items):
        cached = (id(session.items), {id(it): n for n, it in enumerate(session.items)})
        session.stash[_POSITIONS] = cached
    return cached[1].get(id(item), -1)


def _worker_interactor(config: pytest.Config) -> Any:
    """xdist's worker-side plugin (registered without a name), or None."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "torun"):
            return plugin
    return None


def _worker_queue(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item] | None:
    """The items queued for this xdist worker after the current one; None outside xdist; []
    in a worker whose queue cannot be read (then only the current item is known)."""
    if not hasattr(config, "workerinput"):
        return None
    interactor = _worker_interactor(config)
    queue = getattr(interactor, "torun", None)
    if queue is None or not hasattr(queue, "lock"):
        return []
    with queue.lock() as queued:
        indices = [i for i in queued if isinstance(i, int)]
    following = getattr(interactor, "nextitem_index", None)
    if isinstance(following, int):
        indices.insert(0, following)
    return [items[i] for i in indices if 0 <= i < len(items)]


def upcoming_items(config: pytest.Config, item: pytest.Item, limit: int) -> list[ScenarioItem]:
    """`item` and the scenario items this process will run after it (at most `limit`), in
    order; items already marked to be skipped are left out (they never run a trial)."""
    items = item.session.items
    queued = _worker_queue(config, items)
    if queued is None:
        start = _position(item.session, item)
        following = items[start + 1 : start + 1 + limit] if start >= 0 else []
    else:
        following = queued[:limit]
    return [
        it
        for it in [item, *following]
        if isinstance(it, ScenarioItem) and it.get_closest_marker("skip") is None
    ]

"""Plugins a benchmark session has no use for, unregistered once its items are collected.

Hypothesis's pytest plugin imports Hypothesis in its terminal summary whether or not a test
used it: 1 to 2 s of CPU at the end of every run, between the last answer and the exit. A
`@given` test imports Hypothesis when its module is collected, so in a session of BackIntel's
items where no module has imported it, no test can have used it, the plugin has nothing to
report, and it is unregistered. A session that imported Hypothesis keeps it as it was.
"""

from __future__ import annotations

import sys

import pytest

__all__ = ["HYPOTHESIS_PLUGIN", "drop_unused_hypothesis"]

HYPOTHESIS_PLUGIN = "hypothesispytest"
"""The entry-point name Hypothesis registers its pytest plugin under."""


def drop_unused_hypothesis(pluginmanager: pytest.PytestPluginManager, benchmark: bool) -> bool:
    """Unregister Hypothesis's plugin in a `benchmark` session that never imported Hypothesis;
    True when it was unregistered."""
    if not benchmark or "hypothesis" in sys.modules:
        return False
    plugin = pluginmanager.get_plugin(HYPOTHESIS_PLUGIN)
    if plugin is None:
        return False
    pluginmanager.unregister(plugin)
    return True

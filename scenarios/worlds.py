"""The shipped worlds, as the `backintel.worlds` entry points name them: one factory each,
importing its world only when it is asked for. The base every world builds on (`World`,
`Oracle`, `data_dir`, `content_hash`, `get_world`) is `scenarios.world_base`, re-exported here.
"""

from __future__ import annotations

import os
from pathlib import Path

from scenarios.world_base import (
    COMPLETE_MARKER,
    DATA_DIR_ENV,
    REPO_ROOT,
    Oracle,
    UnknownWorldError,
    World,
    available_worlds,
    built_content_hash,
    content_hash,
    data_dir,
    get_world,
)

__all__ = [
    "COMPLETE_MARKER",
    "DATA_DIR_ENV",
    "OLIST_SOURCE_ENV",
    "REPO_ROOT",
    "Oracle",
    "UnknownWorldError",
    "World",
    "available_worlds",
    "built_content_hash",
    "content_hash",
    "data_dir",
    "get_world",
]


OLIST_SOURCE_ENV = "BACKINTEL_OLIST_SOURCE"
OLIST_CHECKSUMS_ENV = "BACKINTEL_OLIST_CHECKSUMS"
"""A checksum file other than the committed pins (another release, or a test sample)."""
"""`synthetic` (default): world `olist` is the generated world; `real`: the loaded Olist release."""


def olist_world() -> World:
    source = os.environ.get(OLIST_SOURCE_ENV, "").strip().lower() or "synthetic"
    if source == "real":
        return olist_real_world()
    if source != "synthetic":
        raise ValueError(
            f"{OLIST_SOURCE_ENV}={source!r}: allowed values are 'synthetic' (the generated "
            "world, the default) and 'real' (the Olist release loaded by `backintel data olist`)"
        )
    from scenarios.olist.world import OlistWorld

    return OlistWorld.from_env()


def olist_real_world() -> World:
    from scenarios.olist.real import CHECKSUM_FILE, OlistRealWorld

    pins = os.environ.get(OLIST_CHECKSUMS_ENV)
    return OlistRealWorld(checksums=Path(pins) if pins else CHECKSUM_FILE)


def acceptance_world() -> World:
    from scenarios.acceptance.world import AcceptanceWorld

    return AcceptanceWorld()


def olist_replay_world() -> World:
    from scenarios.replay.world import OlistReplayWorld

    return OlistReplayWorld()


def olist_split_world() -> World:
    from scenarios.split.world import OlistSplitWorld

    return OlistSplitWorld()


def olist_orders_world() -> World:
    from scenarios.split.world import OlistOrdersWorld

    return OlistOrdersWorld()


def olist_catalog_world() -> World:
    from scenarios.split.world import OlistCatalogWorld

    return OlistCatalogWorld()


def tpch_world() -> World:
    from scenarios.tpch.world import TpchWorld

    return TpchWorld()


def olist_boundaries_world() -> World:
    from scenarios.boundaries.world import OlistBoundariesWorld

    return OlistBoundariesWorld()


def olist_predict_world() -> World:
    """The prediction cohorts of world `olist`: generated, or of the loaded Olist release
    with `BACKINTEL_OLIST_SOURCE=real`."""
    from scenarios.predict.world import OlistPredictRealWorld, OlistPredictWorld

    base = olist_world()
    if base.name == "olist-real":
        return OlistPredictRealWorld(base)
    return OlistPredictWorld()

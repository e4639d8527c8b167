"""Analyst-produced values as bounded text for the viewer: never markup, sizes stated."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["CODE_LIMIT", "RESULT_LIMIT", "TEXT_LIMIT", "as_text", "clip"]

TEXT_LIMIT = 20_000
"""Characters of one prose field, value or piece of code shown before it is truncated."""
CODE_LIMIT = 20_000
RESULT_LIMIT = 4_000
"""Characters of one tool result shown in a transcript."""


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text` cut to `limit` characters, ending with a line that states its full size."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n… truncated: {len(text):,} characters in all, the first {limit:,} shown"
    )


def as_text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """A string as itself; anything else as compact JSON (numbers keep full precision);
    then clipped."""
    if isinstance(value, str):
        return clip(value, limit)
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return clip(text, limit)

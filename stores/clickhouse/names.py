"""ClickHouse identifiers and string literals as SQL text (no engine, no pyarrow: the sweep of
a killed run's databases quotes names too)."""

from __future__ import annotations

__all__ = ["literal", "quote"]


def quote(name: str) -> str:
    """`name` as a backquoted identifier."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def literal(text: str) -> str:
    """`text` as a single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

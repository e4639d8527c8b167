"""The report templates (`reports/templates`) and the filters they format numbers with."""

from __future__ import annotations

from typing import Any

import jinja2

__all__ = ["TEMPLATES", "interval", "num", "pct"]

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("reports", "templates"),
    autoescape=jinja2.select_autoescape(["html.j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def interval(value: dict[str, Any] | None, fmt: str = "{:.1%}") -> str:
    """A run.json interval as `[51.0%, 72.0%]`, empty when there is none."""
    if not value or value.get("low") is None or value.get("high") is None:
        return ""
    return f"[{fmt.format(value['low'])}, {fmt.format(value['high'])}]"


TEMPLATES.filters["pct"] = pct
TEMPLATES.filters["num"] = num
TEMPLATES.filters["interval"] = interval

"""The analyst's tools: list_tables, describe_table, run_sql (read-only, 200 rows), load_skill.

The store session is opened lazily and used from one dedicated worker thread (SQLite and
several drivers bind a connection to the thread that opened it), so the event loop stays
free for the wall-clock limit. Query errors come back to the model as readable text; only a
failure of the store itself (`StoreError`) or of the harness's code (`InfraError`, with its
traceback) ends the run, as the harness's `infra_error`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic_ai import RunContext, Tool
from pydantic_ai.tools import ToolDefinition

from pytest_backintel.analyst_api import InfraError
from stores.base import MAX_ROWS, QueryError, QueryResult, StoreError, StoreSession

__all__ = [
    "SKILLS_DIR",
    "TOOL_RESULT_BYTES",
    "AnalystDeps",
    "Skill",
    "analyst_tools",
    "describe_table",
    "list_tables",
    "load_skill",
    "read_skill",
    "run_python",
    "run_sql",
    "skill_catalog",
]

SKILLS_DIR = Path(__file__).parent / "skills"
TOOL_RESULT_BYTES = 64_000
"""The most bytes of cells one `run_sql` result hands the model (rows past it are dropped,
and the result says so)."""

_T = TypeVar("_T")


class AnalystDeps:
    """Per-run state: the task's store session (opened on first use) and raw query results."""

    def __init__(
        self,
        connect: Callable[[], StoreSession],
        run_python: Callable[[str], str] | None = None,
    ) -> None:
        self._connect = connect
        self.run_python = run_python
        """Runs code in the item's sandbox, or None when the item has none."""
        self.python_outputs: dict[str, str] = {}
        """Raw `run_python` outputs by tool call id."""
        self._session: StoreSession | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backintel-store")
        self._closed = False
        self.query_results: dict[str, QueryResult] = {}
        """Raw `run_sql` results by tool call id, exactly as the store returned them."""

    async def call(self, fn: Callable[[StoreSession], _T]) -> _T:
        """Run `fn(session)` on the store's worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, self._with_session, fn)

    def _with_session(self, fn: Callable[[StoreSession], _T]) -> _T:
        """`fn(session)`; an exception out of the store that is neither a query error (the
        analyst reads it) nor a store failure is the harness's own bug: `InfraError`."""
        try:
            if self._session is None:
                self._session = self._connect()
            return fn(self._session)
        except (QueryError, StoreError):
            raise
        except Exception as exc:
            raise InfraError.from_bug(exc, "a store tool") from exc

    def _close_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.close()

    def close(self, *, wait: bool = True) -> None:
        """Close the session on its own thread; `wait=False` after a timeout leaves the
        running statement to the store's statement timeout and closes when it returns."""
        if self._closed:
            return
        self._closed = True
        self._worker.submit(self._close_session)
        self._worker.shutdown(wait=wait)


async def list_tables(ctx: RunContext[AnalystDeps]) -> list[str]:
    """List the tables in the data store."""
    return await ctx.deps.call(lambda s: s.list_tables())


async def describe_table(ctx: RunContext[AnalystDeps], name: str) -> str:
    """Describe one table: its columns with types and nullability, and its row count.

    Args:
        name: The table name, exactly as `list_tables` gives it.
    """
    try:
        info = await ctx.deps.call(lambda s: s.describe_table(name))
    except QueryError as exc:
        return f"ERROR describing table {name!r}: {exc}"
    lines = [f"table {info.name}: {info.row_count} rows", "column\ttype\tnullable"]
    lines += [f"{c.name}\t{c.type}\t{'yes' if c.nullable else 'no'}" for c in info.columns]
    return "\n".join(lines)


async def run_sql(ctx: RunContext[AnalystDeps], sql: str) -> str:
    """Run one read-only SQL statement and return its result as tab-separated text.

    At most 200 rows and 64,000 bytes are returned, each text or binary value cut to at most
    4,096 bytes (fewer in wide results); the result says what was cut. Aggregate in SQL rather
    than reading many rows. Writes, DDL, settings and reading any file or database other than
    the store's own tables are refused. An error is returned as a message: fix the query.

    Args:
        sql: A single read-only SQL statement (SELECT or WITH ... SELECT).
    """
    try:
        result = await ctx.deps.call(lambda s: s.run_sql(sql, MAX_ROWS, TOOL_RESULT_BYTES))
    except QueryError as exc:
        return f"ERROR ({type(exc).__name__}): {exc}"
    ctx.deps.query_results[ctx.tool_call_id or f"call-{len(ctx.deps.query_results)}"] = result
    return result.to_text()


async def run_python(ctx: RunContext[AnalystDeps], code: str) -> str:
    """Run Python in your private sandbox and return its output (stdout, then any stderr).

    `import backintel_store as bs` gives `bs.query(sql)` (one read-only statement in the
    store's SQL dialect, as `run_sql` takes it; its whole result as a list of dicts, every
    store), `bs.tables()` and `bs.table(name)` (a polars DataFrame). A store on disk is also
    mounted read-only at $BACKINTEL_STORE, for `bs.connect()` (sqlite3) and `bs.duckdb()`.
    polars, duckdb, pyarrow and numpy are installed. Files you write in the
    working directory persist between your calls. No network. Time, CPU, memory, processes and
    output are limited; a limit that is hit is reported in the output.

    Args:
        code: A complete Python program.
    """
    run = ctx.deps.run_python
    if run is None:
        return "ERROR: this task has no sandbox, so run_python is unavailable; use run_sql."
    loop = asyncio.get_running_loop()
    output = await loop.run_in_executor(None, run, code)
    ctx.deps.python_outputs[ctx.tool_call_id or f"call-{len(ctx.deps.python_outputs)}"] = output
    return output


async def _only_with_sandbox(
    ctx: RunContext[AnalystDeps], tool_def: ToolDefinition
) -> ToolDefinition | None:
    return tool_def if ctx.deps.run_python is not None else None


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str


_FRONT_MATTER = re.compile(r"\A---\n(?P<head>.*?)\n---\n(?P<body>.*)\Z", re.DOTALL)


def _parse_skill(path: Path) -> Skill:
    text = path.read_text(encoding="utf-8")
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise ValueError(f"{path}: a skill starts with '---', 'description: ...', '---'")
    fields = dict(line.split(":", 1) for line in match["head"].splitlines() if ":" in line.strip())
    description = fields.get("description", "").strip()
    if not description:
        raise ValueError(f"{path}: the front matter has no 'description:' line")
    return Skill(path.stem, description, match["body"].strip() + "\n")


def skill_catalog(skills_dir: Path = SKILLS_DIR) -> list[Skill]:
    """Every skill in `skills_dir`, sorted by name."""
    return [_parse_skill(p) for p in sorted(skills_dir.glob("*.md"))]


def read_skill(name: str, skills_dir: Path = SKILLS_DIR) -> str:
    """The Markdown of one skill, or a message listing the skills that exist."""
    skills = {s.name: s for s in skill_catalog(skills_dir)}
    skill = skills.get(name.strip().removesuffix(".md"))
    if skill is None:
        return f"ERROR: no skill named {name!r}. Available skills: {', '.join(sorted(skills))}."
    return skill.body


async def load_skill(name: str) -> str:
    """Load one skill (a short Markdown guide) by name, as listed in your instructions.

    Args:
        name: The skill name, e.g. `evidence-contract`.
    """
    return read_skill(name)


def analyst_tools() -> list[Tool[AnalystDeps]]:
    """The tools every analyst agent gets, in the order the model sees them."""
    return [
        Tool(list_tables, takes_ctx=True),
        Tool(describe_table, takes_ctx=True),
        Tool(run_sql, takes_ctx=True),
        Tool(run_python, takes_ctx=True, prepare=_only_with_sandbox),
        Tool(load_skill, takes_ctx=False),
    ]

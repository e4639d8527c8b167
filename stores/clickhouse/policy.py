"""What the analyst may send to the `clickhouse` store, decided on ClickHouse's own parse tree.

The engine guard is the analyst connection's profile (`readonly=1`: no writes, no DDL, no
setting changes, no table functions that read outside; `allow_python_table_function=0`,
`allow_introspection_functions=0`). `readonly=1` still lets a SELECT read a file through the
scalar `file()` function, write its result with `INTO OUTFILE`, or read another item's database
by qualified name. So `run_sql` has ClickHouse format the statement (`formatQuerySingleLine` of
it as a string literal: parsed, never run), refuses `INTO OUTFILE`, `FORMAT` and `SETTINGS`
clauses in that canonical text (`output_clauses`: they would apply to the EXPLAIN), and
`check_statement` walks its parse tree (`EXPLAIN AST` of the canonical text) admitting exactly
one SELECT and refusing: table functions other than generators (`numbers`, `zeros`,
`generate_series`, `values`); functions that reach files, dictionaries or other tables
(`file`, `dict*`, `joinGet*`, `hasColumnInTable`, model evaluation); and any table or
identifier qualified by a database other than the item's own (`system`, `information_schema`,
other items).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlglot import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import TokenType

from stores.base import QueryError, QueryRefused, QueryTimeout

__all__ = [
    "GENERATORS",
    "check_statement",
    "classify",
    "error_code",
    "single_statement",
    "writes_in",
]

GENERATORS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries", "values"}
)
"""Table functions that only generate rows; every other table function is refused."""

_REFUSED_FUNCTIONS = frozenset(
    {"file", "hascolumnintable", "catboostevaluate", "modelevaluate", "evalmlmethod", "getmacro"}
)
_REFUSED_PREFIXES = ("dict", "joinget")
_LEADING = re.compile(r"^(?:\s+|--[^\n]*\n?|/\*.*?\*/|\()*([A-Za-z]+)", re.DOTALL)
_READ_KEYWORDS = {"select", "with"}
_NODE = re.compile(r"^( *)(\w+)(?: (.*?))?(?: \(children (\d+)\))?$")
_TOP = {"SelectWithUnionQuery"}
_READ_ONLY = "the store is read-only for the analyst: send one SELECT (or WITH ... SELECT)"


def single_statement(sql: str) -> None:
    """One statement starting with SELECT or WITH, told apart by ClickHouse's tokens."""
    match = _LEADING.match(sql)
    keyword = match.group(1).lower() if match else ""
    if keyword not in _READ_KEYWORDS:
        raise QueryRefused(
            f"{keyword.upper() or 'this'} statements are refused: {_READ_ONLY}; writes, DDL, "
            "SET, SYSTEM, SHOW, EXPLAIN, ATTACH and INSERT are not allowed"
        )
    try:
        tokens = Dialect.get_or_raise("clickhouse").tokenize(sql)
    except TokenError as exc:
        raise QueryError(f"could not parse the SQL: {exc}") from exc
    semicolons = [i for i, t in enumerate(tokens) if t.token_type == TokenType.SEMICOLON]
    if any(i != len(tokens) - 1 for i in semicolons):
        raise QueryRefused(
            f"send exactly one statement per run_sql call (got {len(semicolons) + 1}); {_READ_ONLY}"
        )


_WRITE_WORDS = frozenset(
    {"insert", "update", "delete", "drop", "create", "alter", "attach", "detach", "truncate",
     "rename", "grant", "revoke", "system", "optimize", "kill", "set", "copy", "install", "load",
     "exchange", "undrop", "backup", "restore", "move"}
)  # fmt: skip


def writes_in(sql: str) -> list[str]:
    """Write or DDL keywords outside strings, quoted names and comments (sqlglot's tokens): a
    statement ClickHouse cannot parse that has one is refused rather than called misspelt."""
    try:
        tokens = Dialect.get_or_raise("clickhouse").tokenize(sql)
    except TokenError:
        return []
    quoted = {TokenType.STRING, TokenType.IDENTIFIER}
    words = [t.text.lower() for t in tokens if t.token_type not in quoted]
    return sorted({w for w in words if w in _WRITE_WORDS})


def output_clauses(canonical: str) -> None:
    """Refuse INTO OUTFILE, FORMAT and SETTINGS clauses in ClickHouse's own formatting of the
    statement (`formatQuerySingleLine`): they would apply to the EXPLAIN that checks it."""
    try:
        tokens = Dialect.get_or_raise("clickhouse").tokenize(canonical)
    except TokenError as exc:
        raise QueryError(f"could not parse the SQL: {exc}") from exc
    quoted = {TokenType.STRING, TokenType.IDENTIFIER}
    for i, token in enumerate(tokens):
        word = token.text.lower()
        if token.token_type in quoted or word not in {"into", "outfile", "format", "settings"}:
            continue
        if word == "format" and i + 1 < len(tokens) and tokens[i + 1].text == "(":
            continue  # the format() function
        raise QueryRefused(
            f"{word.upper()} is refused: results come back to run_sql as rows, nothing is "
            "written, and the session's settings are fixed (quote a column of that name "
            "with backticks)"
        )


def check_statement(ast: str, database: str, databases: Iterable[str]) -> None:
    """Refuse what `readonly=1` lets through, reading `EXPLAIN AST` output line by line.

    `database` is the item's own; `databases` every database the engine holds."""
    others = {d for d in databases if d != database}
    lines = [line for line in ast.splitlines() if line.strip()]
    parsed = [_NODE.match(line.replace("\\'", "'")) for line in lines]
    if not parsed or parsed[0] is None or parsed[0].group(2) not in _TOP:
        raise QueryRefused(f"only a SELECT is allowed here: {_READ_ONLY}")
    if parsed[0].group(4) not in (None, "1"):
        raise QueryRefused(
            "INTO OUTFILE, FORMAT and SETTINGS clauses are refused: results come back to "
            "run_sql as rows, and the session's settings are fixed"
        )
    parents: list[str] = []
    for match in parsed:
        if match is None:
            continue
        depth, node, text = len(match.group(1)), match.group(2), match.group(3) or ""
        del parents[depth:]
        parent = parents[-1] if parents else ""
        parents.extend([""] * (depth - len(parents)))
        parents.append(node)
        _check_node(node, text, parent, others)


def _check_node(node: str, text: str, parent: str, others: set[str]) -> None:
    name = text.split(" (alias ", 1)[0].strip()
    if node == "Function":
        lowered = name.lower()
        if parent == "TableExpression" and lowered not in GENERATORS:
            raise QueryRefused(
                f"table function {name}() is refused: the analyst reads only the tables of this "
                f"store (generators allowed: {', '.join(sorted(GENERATORS))})"
            )
        if lowered in _REFUSED_FUNCTIONS or lowered.startswith(_REFUSED_PREFIXES):
            raise QueryRefused(
                f"function {name}() is refused: it reaches files, dictionaries or tables "
                "outside this store"
            )
    elif node in ("TableIdentifier", "Identifier"):
        qualifier = name.split(".", 1)[0] if "." in name else ""
        if qualifier in others:
            raise QueryRefused(
                f"{name!r} is outside this store: the analyst reads only its own tables, "
                "unqualified (system tables and other databases are refused)"
            )


def error_code(message: str) -> int | None:
    """The ClickHouse error code in an exception text (`Code: 164. DB::Exception: ...`)."""
    match = re.search(r"Code: (\d+)", message)
    return int(match.group(1)) if match else None


REFUSED_CODES = frozenset({164, 446, 497, 516})
"""READONLY, FUNCTION_NOT_ALLOWED, ACCESS_DENIED, AUTHENTICATION_FAILED."""
_SYNTAX_ERROR = 62
TIMEOUT_CODES = frozenset({159, 394})
"""TIMEOUT_EXCEEDED, QUERY_WAS_CANCELLED."""


def classify(message: str, where: str, timeout_s: float, sql: str | None = None) -> QueryError:
    """The analyst-facing error for one ClickHouse failure, by its error code."""
    code = error_code(message)
    text = f"{message.strip()} (on {where})"
    if code == _SYNTAX_ERROR and sql is not None and writes_in(sql):
        return QueryRefused(
            f"{', '.join(w.upper() for w in writes_in(sql))} refused: {_READ_ONLY} ({text})"
        )
    if code in TIMEOUT_CODES:
        return QueryTimeout(
            f"statement ran past the {timeout_s:g}s limit on {where} and was cancelled; "
            "aggregate more or filter earlier"
        )
    if code in REFUSED_CODES:
        return QueryRefused(f"refused, {_READ_ONLY}: {text}")
    return QueryError(text)

"""The SQLite probe's keep test in SQLite's own arithmetic (`keep_sql`): it never overflows
into a REAL or fails, at any integer key (negative, the extremes), it keeps about three rows in
four of any run of keys (neighbouring keys are not dropped in a pattern) and a text key the
same, and the two salts drop different rows."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from stores.probe import DROP_ONE_IN
from stores.sqlite.probe import keep_sql, text_hash


def _kept(values: list[object], salt: int) -> list[int]:
    con = sqlite3.connect(":memory:")
    con.create_function("bi_hash", 1, text_hash, deterministic=True)
    con.execute("CREATE TABLE t (k)")
    con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    test = keep_sql(["k"], salt)
    rows = con.execute(f"SELECT {test}, typeof({test}) FROM t ORDER BY rowid").fetchall()
    con.close()
    assert all(kind == "integer" for _, kind in rows), rows
    return [int(kept) for kept, _ in rows]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
def test_any_integer_key_gives_a_yes_or_no(keys: list[int]) -> None:
    assert set(_kept(list(keys), 1)) <= {0, 1}


@settings(max_examples=20, deadline=None)
@given(st.integers(-(10**12), 10**12))
def test_a_run_of_keys_keeps_about_three_in_four(start: int) -> None:
    kept = _kept(list(range(start, start + 4000)), 1)
    share = sum(kept) / len(kept)
    assert abs(share - (1 - 1 / DROP_ONE_IN)) < 0.04, share
    # no period: the drops of neighbouring keys are not every fourth key
    assert {tuple(kept[i : i + 4]) for i in range(0, 400, 4)} != {tuple(kept[:4])}


def test_text_keys_are_dropped_as_often_and_salts_differ() -> None:
    codes = [f"INV-{i:06d}" for i in range(4000)]
    one, two = _kept(list(codes), 1), _kept(list(codes), 2)
    assert abs(sum(one) / len(one) - 0.75) < 0.04
    assert one != two
    ints = list(range(4000))
    assert _kept(list(ints), 1) != _kept(list(ints), 2)

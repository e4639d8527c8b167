"""`perturb_plan.unique_key`: a key checked for repeats in parts (split by a hash of its first
column, so no hash table holds the whole key) gives the answer a whole-frame check gives."""

from __future__ import annotations

from unittest import mock

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_backintel.evidence import perturb_plan
from pytest_backintel.evidence.perturb_plan import unique_key, unique_parts


def _whole(df: pl.DataFrame, cols: list[str]) -> bool:
    """The check in one piece: no NULL in `cols`, no two rows alike there."""
    keys = df.select(cols)
    return not any(keys[c].null_count() for c in cols) and keys.n_unique() == keys.height


ints = st.one_of(st.none(), st.integers(-5, 40))
texts = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "é", "", "0"]))


@st.composite
def frames(draw: st.DrawFn) -> tuple[pl.DataFrame, list[str]]:
    """A small frame of an int and a text column (repeats and NULLs likely), and a key."""
    rows = draw(st.integers(0, 60))
    df = pl.DataFrame(
        {
            "id": draw(st.lists(ints, min_size=rows, max_size=rows)),
            "name": draw(st.lists(texts, min_size=rows, max_size=rows)),
        },
        schema={"id": pl.Int64, "name": pl.String},
    )
    cols = draw(st.sampled_from([["id"], ["name"], ["id", "name"], ["name", "id"]]))
    return df, cols


@settings(max_examples=300, deadline=None)
@given(case=frames(), part_rows=st.integers(1, 70))
def test_the_checks_in_parts_agree_with_the_whole_frame(
    case: tuple[pl.DataFrame, list[str]], part_rows: int
) -> None:
    df, cols = case
    with mock.patch.object(perturb_plan, "UNIQUE_PART_ROWS", part_rows):
        assert unique_key(df, cols) == _whole(df, cols)


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 400), repeat=st.integers(0, 399), part_rows=st.integers(1, 50))
def test_one_repeat_is_found_whichever_part_it_falls_in(
    rows: int, repeat: int, part_rows: int
) -> None:
    ids = list(range(rows))
    df = pl.DataFrame({"id": [*ids, ids[repeat % rows]]})
    with mock.patch.object(perturb_plan, "UNIQUE_PART_ROWS", part_rows):
        assert unique_parts(df.height) == -(-df.height // part_rows)
        assert not unique_key(df, ["id"])
        assert unique_key(df.head(rows), ["id"])


def test_a_key_is_checked_in_parts_of_at_most_100_000_rows() -> None:
    """TPC-H SF1's `lineitem` (6M rows) in 61 parts: hash tables of 100k rows, not 1M."""
    assert perturb_plan.UNIQUE_PART_ROWS == 100_000
    assert unique_parts(6_001_215) == 61
    assert unique_parts(100_000) == 1
    assert unique_parts(0) == 1

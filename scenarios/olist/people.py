"""People behind the orders: one `customer_unique_id` each, some with several orders.

As in Olist, every order gets its own `customer_id`; a person who orders again reappears
under a new `customer_id` with the same `customer_unique_id` and address.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scenarios.olist.reference_data import STATES

__all__ = ["Person", "make_people"]

REPEAT_SIZES = (1, 2, 3, 4)
REPEAT_PROBS = (0.965, 0.028, 0.005, 0.002)


@dataclass
class Person:
    unique_id: str
    state: str
    city: str
    zip_prefix: str
    orders: list[int] = field(default_factory=list)
    """Indices of this person's orders, ascending."""


def _order_counts(rng: np.random.Generator, n_orders: int) -> list[int]:
    counts: list[int] = []
    total = 0
    while total < n_orders:
        k = int(rng.choice(REPEAT_SIZES, p=REPEAT_PROBS))
        k = min(k, n_orders - total)
        counts.append(k)
        total += k
    want = max(2, n_orders // 400)
    repeaters = sum(1 for c in counts if c >= 2)
    while repeaters < want:  # merge two one-order people into one repeat person
        singles = [i for i, c in enumerate(counts) if c == 1]
        counts[singles[-2]] = 2
        del counts[singles[-1]]
        repeaters += 1
    return counts


def make_people(
    rng: np.random.Generator, n_orders: int, taken: set[str]
) -> tuple[list[Person], list[int]]:
    """People and, for each order index, the index of the person who placed it."""
    counts = _order_counts(rng, n_orders)
    states = list(STATES)
    weights = np.asarray([STATES[s][0] for s in states], dtype=float)
    picks = rng.choice(len(states), size=len(counts), p=weights / weights.sum())
    people: list[Person] = []
    for idx in picks:
        state = states[int(idx)]
        _, cities, (lo, hi) = STATES[state]
        uid = rng.bytes(16).hex()
        while uid in taken:
            uid = rng.bytes(16).hex()
        taken.add(uid)
        people.append(
            Person(
                unique_id=uid,
                state=state,
                city=cities[int(rng.integers(len(cities)))],
                zip_prefix=f"{int(rng.integers(lo, hi + 1)):05d}",
            )
        )
    owner = np.repeat(np.arange(len(counts)), counts)
    owner = owner[rng.permutation(n_orders)]
    person_of_order = [int(p) for p in owner]
    for order, person in enumerate(person_of_order):
        people[person].orders.append(order)
    return people, person_of_order

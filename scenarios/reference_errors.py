"""What can go wrong with the shipped benchmark's references."""

from __future__ import annotations

__all__ = [
    "ReferenceError",
    "ReferenceMismatchError",
    "ReferencesOutOfDateError",
    "StaleReferencesError",
]


class ReferenceError(Exception):
    """References could not be built or used."""


class ReferenceMismatchError(ReferenceError):
    """An oracle and its scenario's check_sql disagree, or an oracle is missing or malformed."""


class StaleReferencesError(ReferenceError):
    """References were built from other data or an older scenario version."""


class ReferencesOutOfDateError(ReferenceError):
    """`build_all(write=False)`: the committed references differ from a fresh build."""

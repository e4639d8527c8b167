"""Freeze: the frozen-run lock (candidate, plan, commitment, fingerprints) and the worker
allowlist. Uses `collect` (sealed cases) and `records`."""

"""The seed the harness imposes on every sandboxed Python run.

Every execution in every backend (the analyst's `run_python`, the evidence re-run, a
prediction program's re-runs on permuted labels and on perturbed features, a reference
program) runs with `PYTHONHASHSEED` and `BACKINTEL_SEED` set to `SANDBOX_SEED`, and with the
shipped `sitecustomize` (`_seeding.py`), which seeds `random` and NumPy's global generator
(`numpy.random.seed`, what scikit-learn uses when `random_state` is None) with it the moment
they are imported. A program that draws from those reproduces its output in every run; one
that makes its own generators without a seed (`numpy.random.default_rng()`) does not, unless it
seeds them (for example from `int(os.environ["BACKINTEL_SEED"])`).
"""

from __future__ import annotations

__all__ = ["SANDBOX_SEED", "SEED_ENV", "seed_env"]

SANDBOX_SEED = 0
"""The seed of every sandboxed run (recorded in `run.json` under `sandbox.seed`)."""
SEED_ENV = "BACKINTEL_SEED"


def seed_env(seed: int = SANDBOX_SEED) -> dict[str, str]:
    """The payload's environment entries that fix its seeds."""
    return {"PYTHONHASHSEED": str(seed), SEED_ENV: str(seed)}

"""How many trials a paired comparison needs: the power plan behind `backintel plan` and
`--trials auto:EFFECT:BASELINE`.

The textbook paired-design sample size (normal approximation, two-sided test at alpha):

    n = ((z(1 - alpha/2) + z(power)) * sigma_d / delta) ** 2

where n is the number of paired units (cases), delta the difference to detect and sigma_d the
standard deviation of one case's difference. With k trials per case in each run, and the
candidate shifting every case alike (the plan assumes it: effects that differ by case need
more), a case's difference has variance sigma_d**2 = 2 * sigma_w**2 / k, where sigma_w**2 is
the between-trial (within-case) variance of the baseline, estimated without bias per case as
p(1 - p) * m / (m - 1) over its m trials and averaged over cases. A baseline with one trial per
case cannot separate it from the between-case variance, so its whole Bernoulli variance
p(1 - p) is used (an upper bound, said in the plan).

Reads only the baseline's `records.jsonl` (blocked and not-run trials left out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Plan",
    "PlanError",
    "auto_trials",
    "baseline_outcomes",
    "effect_floor",
    "make_plan",
    "parse_auto_trials",
    "resolve_trials",
]

NOT_MEASURED = {"infra_error", "provider_error", "not_run"}


class PlanError(Exception):
    """A plan's input is unusable; the message names it and what is allowed."""


@dataclass(frozen=True)
class Plan:
    """A power plan from a baseline run."""

    cases: int
    baseline_trials: int
    """The most trials any baseline case had."""
    within_variance: float
    """sigma_w**2: between-trial variance within a case (or the Bernoulli bound)."""
    bounded: bool
    """True when the baseline had one trial per case and `within_variance` is p(1 - p)."""
    effect: float
    power: float = 0.8
    alpha: float = 0.05
    floored: bool = False
    """True when the baseline varied less than the effect itself would make it vary (an
    all-pass baseline has no variance): `within_variance` is then `effect_floor(effect)`."""

    @property
    def z(self) -> float:
        """z(1 - alpha/2) + z(power)."""
        from scipy.stats import norm

        return float(norm.ppf(1 - self.alpha / 2) + norm.ppf(self.power))

    def cases_needed(self, trials: int) -> int:
        """Cases for the effect with `trials` per case in each run: the textbook n."""
        sigma_d2 = 2 * self.within_variance / trials
        return max(2, math.ceil((self.z**2) * sigma_d2 / self.effect**2))

    def trials_needed(self) -> int:
        """Trials per case (in each run) for the effect over the baseline's cases."""
        return max(
            1, math.ceil(2 * self.within_variance * self.z**2 / (self.cases * self.effect**2))
        )

    def detectable(self, trials: int) -> float:
        """The smallest difference `trials` per case over the baseline's cases detects."""
        return self.z * math.sqrt(2 * self.within_variance / (trials * self.cases))

    def lines(self, budget: int | None = None) -> list[str]:
        """What `backintel plan` prints."""
        k = self.trials_needed()
        source = (
            "the Bernoulli variance p(1 - p) (one trial per case: an upper bound)"
            if self.bounded
            else f"between-trial variance within cases ({self.baseline_trials} trials per case)"
        )
        if self.floored:
            source = (
                f"the least a shift of {self.effect:g} brings, effect (1 - effect) / 2: the "
                "baseline varied less (an all-pass or all-fail baseline does not vary at all)"
            )
        out = [
            f"baseline: {self.cases} cases; sigma_w^2 = {self.within_variance:.4f} from {source}",
            f"design: paired by case, two-sided alpha {self.alpha:g}, power {self.power:g}; "
            f"z(1 - alpha/2) + z(power) = {self.z:.4f}",
            f"to detect a difference of {self.effect:g} over these {self.cases} cases: "
            f"{k} trial{'s' * (k != 1)} per case in each run ({k * self.cases} trials per run)",
            f"or, at {self.baseline_trials} trial{'s' * (self.baseline_trials != 1)} per case: "
            f"{self.cases_needed(self.baseline_trials)} cases",
        ]
        if budget is not None:
            per_case = budget // self.cases
            if per_case < 1:
                out.append(f"budget {budget} trials per run: fewer than one per case")
            else:
                out.append(
                    f"budget {budget} trials per run = {per_case} per case: detects a difference "
                    f"of {self.detectable(per_case):.3f}"
                )
        out.append(
            "assumes the candidate shifts every case alike; effects that differ by case need more"
        )
        return out


def _check(name: str, value: float, low: float, high: float) -> None:
    if isinstance(value, bool) or not low < value < high:
        raise PlanError(f"{name}: a number between {low:g} and {high:g} (exclusive), got {value!r}")


def make_plan(
    outcomes: Mapping[str, Sequence[bool]], effect: float, power: float = 0.8, alpha: float = 0.05
) -> Plan:
    """The plan from per-case trial outcomes of a baseline."""
    _check("effect", effect, 0, 1)
    _check("power", power, 0, 1)
    _check("alpha", alpha, 0, 1)
    cases = {k: list(v) for k, v in outcomes.items() if len(v)}
    if len(cases) < 2:
        raise PlanError(f"the baseline has {len(cases)} measured case(s); a plan needs 2 or more")
    top = max(len(v) for v in cases.values())
    several = [v for v in cases.values() if len(v) > 1]
    if several:
        parts = [(sum(v) / len(v)) * (1 - sum(v) / len(v)) * len(v) / (len(v) - 1) for v in several]
        variance, bounded = sum(parts) / len(parts), False
    else:
        p = sum(v[0] for v in cases.values()) / len(cases)
        variance, bounded = p * (1 - p), True
    floored = variance < effect_floor(effect)
    variance = max(variance, effect_floor(effect))
    return Plan(len(cases), top, variance, bounded, effect, power, alpha, floored)


def effect_floor(effect: float) -> float:
    """The least within-case variance a plan assumes: a case that moves by `effect` between
    the runs differs by a Bernoulli(effect) per trial pair, variance effect (1 - effect), half
    of it in each run's sigma_w^2. Without it a baseline that never varies (all pass) would
    make any difference look detectable with two cases."""
    return effect * (1 - effect) / 2


def baseline_outcomes(run: Path) -> dict[str, list[bool]]:
    """Per case (`split/scenario_id`), whether each measured trial of `run` passed."""
    path = run / "records.jsonl"
    if not path.is_file():
        raise PlanError(f"baseline {run}: no records.jsonl (a finished run folder is needed)")
    out: dict[str, list[bool]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PlanError(f"{path}:{number}: not a JSON record ({exc.msg})") from exc
        if record.get("outcome") in NOT_MEASURED:
            continue
        key = f"{record.get('split', 'unknown')}/{record.get('scenario_id')}"
        out.setdefault(key, []).append(record.get("outcome") == "pass")
    return out


def parse_auto_trials(value: str) -> tuple[float, Path] | None:
    """`auto:EFFECT:BASELINE_RUN` -> (effect, baseline folder); None for anything not `auto:`.
    Raises `PlanError` naming the value when it starts `auto:` but is malformed."""
    if not value.startswith("auto:"):
        return None
    parts = value.split(":", 2)
    if len(parts) != 3 or not parts[2]:
        raise PlanError(
            f"--trials {value!r}: auto needs the effect and the baseline run, "
            "e.g. --trials auto:0.05:results/baseline"
        )
    try:
        effect = float(parts[1])
    except ValueError:
        raise PlanError(f"--trials {value!r}: the effect {parts[1]!r} is not a number") from None
    _check(f"--trials {value!r}: effect", effect, 0, 1)
    return effect, Path(parts[2])


def auto_trials(value: str) -> int:
    """The trials per case `--trials auto:EFFECT:BASELINE_RUN` asks for (80% power, alpha
    0.05); `PlanError` naming what is wrong."""
    parsed = parse_auto_trials(value)
    if parsed is None:
        raise PlanError(f"--trials {value!r}: a whole number of at least 1, or auto:EFFECT:RUN")
    effect, run = parsed
    return make_plan(baseline_outcomes(run), effect).trials_needed()


def resolve_trials(value: int | str) -> int:
    """`--trials` as given: a number, or `auto:...` planned now; a `pytest.UsageError` naming
    the value when the plan cannot be made."""
    import pytest

    try:
        return value if isinstance(value, int) else auto_trials(value)
    except PlanError as exc:
        raise pytest.UsageError(str(exc)) from None

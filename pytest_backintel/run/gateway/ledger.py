"""What the gateway keeps per trial: its key, its limits, what it used, what it was refused.

A `TrialKey` is what the harness hands the agent (the token, as its API key). `GatewayUsage`
is what `close_trial` returns: requests forwarded, tokens and cost as the provider reported
them, every failed provider attempt, every exchange (request and response, for offline
replay) and every refused request, and why the trial was stopped, if it was (a budget, the
provider, a replay that diverged). `limit_reason` and `run_reason` say which budget a trial
or the run has spent, in words naming the option.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from pytest_backintel.analyst_api import AnalystLimits, Usage
from pytest_backintel.options import RunLimits
from pytest_backintel.run.gateway.metering import Tokens

__all__ = ["GatewayUsage", "TrialKey", "TrialState", "limit_reason", "run_reason"]


@dataclass(frozen=True)
class TrialKey:
    """One live trial's key to the gateway: give `token` to the agent as its API key."""

    trial_id: str
    token: str = field(repr=False)


@dataclass
class GatewayUsage:
    """What one trial did through the gateway, measured there (not reported by the agent)."""

    trial_id: str
    model: str | None
    """The configured model the requests went to (None in replay: no model was called)."""
    requests: int = 0
    """Model requests forwarded (or replayed); refused requests are not counted."""
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_reported: bool = True
    """False once a response carried no token counts: tokens and cost are then unknown."""
    cost_usd: float | None = 0.0
    """Priced from `prices.json`; None when the model has no price or tokens are unknown."""
    provider_retries: list[dict[str, Any]] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    """Each request and the response it got, in order: what `replay` serves back."""
    refused: list[dict[str, Any]] = field(default_factory=list)
    """Requests of this trial the gateway refused: `{at, path, status, reason}`."""
    budget_exceeded: str | None = None
    provider_error: str | None = None
    replay_error: str | None = None

    @property
    def stopped(self) -> str | None:
        """Why the gateway refuses this trial's further requests (None: it does not)."""
        return self.budget_exceeded or self.provider_error or self.replay_error

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_usage(self, tool_calls: int = 0) -> Usage:
        """The record's `Usage`, with the tool calls the harness counted elsewhere."""
        return Usage(
            requests=self.requests,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            tool_calls=tool_calls,
            tokens_reported=self.tokens_reported,
        )

    def to_json(self) -> dict[str, Any]:
        """The record form (exchanges left out: they go to the trial's cassette)."""
        known = self.tokens_reported
        return {
            "measured_by": "gateway",
            "model": self.model,
            "requests": self.requests,
            "input_tokens": self.input_tokens if known else None,
            "output_tokens": self.output_tokens if known else None,
            "tokens_reported": known,
            "cost_usd": self.cost_usd,
            "provider_retries": self.provider_retries,
            "refused": self.refused,
            "budget_exceeded": self.budget_exceeded,
            "provider_error": self.provider_error,
            "replay_error": self.replay_error,
        }


@dataclass
class TrialState:
    """The gateway's live state of one trial (guarded by the gateway's lock)."""

    key: TrialKey
    limits: AnalystLimits
    usage: GatewayUsage
    replay: list[dict[str, Any]] | None = None
    played: int = 0
    open: bool = True
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def charge(self, tokens: Tokens | None, cost: float | None) -> None:
        """Count one answered request; stop the trial once a per-trial budget is exceeded."""
        usage = self.usage
        usage.requests += 1
        if tokens is None:
            usage.tokens_reported = False
            usage.cost_usd = None
        else:
            usage.input_tokens += tokens.input
            usage.output_tokens += tokens.output
            usage.cost_usd = (
                None if cost is None or usage.cost_usd is None else usage.cost_usd + cost
            )
        if usage.budget_exceeded is None:
            usage.budget_exceeded = _spent_reason(usage, self.limits)

    def snapshot(self) -> GatewayUsage:
        return copy.deepcopy(self.usage)


def _spent_reason(usage: GatewayUsage, limits: AnalystLimits) -> str | None:
    """After a response: the per-trial token or cost budget it went past, if any."""
    tail = "; the gateway refuses the trial's further model requests"
    if limits.max_tokens is not None and usage.tokens_reported and usage.tokens > limits.max_tokens:
        return (
            f"budget exceeded: --max-tokens {limits.max_tokens}: the trial has used "
            f"{usage.tokens} tokens ({usage.input_tokens} in, {usage.output_tokens} out){tail}"
        )
    cost = usage.cost_usd
    if limits.max_cost_usd is not None and cost is not None and cost > limits.max_cost_usd:
        return (
            f"budget exceeded: --max-cost {limits.max_cost_usd:g} USD: the trial has cost "
            f"{cost:.6f} USD{tail}"
        )
    return None


def limit_reason(usage: GatewayUsage, limits: AnalystLimits) -> str | None:
    """Before a request: why the trial may not make it (None: it may)."""
    if usage.stopped is not None:
        return usage.stopped
    if usage.requests >= limits.max_requests:
        return (
            f"budget exceeded: --max-requests {limits.max_requests}: the trial has made "
            f"{usage.requests} model requests; the gateway refuses any further one"
        )
    return _spent_reason(usage, limits)


def run_reason(limits: RunLimits, spent: dict[str, Any], live: list[GatewayUsage]) -> str | None:
    """Before a request: the run budget it would go past, counting the finished trials
    (`spent`, the run's ledger) and the live ones of this gateway."""
    requests = spent["requests"] + sum(u.requests for u in live)
    tokens = spent["tokens"] + sum(u.tokens for u in live)
    cost = spent["cost_usd"] + sum(u.cost_usd or 0.0 for u in live)
    checks = (
        ("--run-max-requests", limits.max_requests, requests, "requests"),
        ("--run-max-tokens", limits.max_tokens, tokens, "tokens"),
        ("--run-max-cost", limits.max_cost_usd, cost, "USD"),
    )
    for option, limit, used, unit in checks:
        if limit is not None and used >= limit:
            return (
                f"run budget spent: {option} {limit:g} {unit}, the run has used {used:g} "
                f"{unit}; the gateway refuses further model requests"
            )
    return None

"""The model gateway: an external agent's model requests, forwarded, metered, limited and
recorded per trial, with the real provider key kept from the agent (see `server`)."""

from pytest_backintel.run.gateway.forward import RetryPolicy
from pytest_backintel.run.gateway.ledger import GatewayUsage, TrialKey
from pytest_backintel.run.gateway.server import ModelGateway
from pytest_backintel.run.gateway.upstream import API_KEY_ENV, GatewayConfigError, Upstream

__all__ = [
    "API_KEY_ENV",
    "GatewayConfigError",
    "GatewayUsage",
    "ModelGateway",
    "RetryPolicy",
    "TrialKey",
    "Upstream",
]

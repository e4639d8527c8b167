"""Where the gateway forwards: the configured model's provider, its URLs per API and its key.

`Upstream.resolve(model, base_url)` follows the built-in analyst's rules (`analyst.models`):
with `--model-base-url` the model is an OpenAI-compatible server's model name (an `openai:`
prefix dropped), keyed by `BACKINTEL_MODEL_API_KEY` or a placeholder; without one the
provider prefix chooses the service and the provider's own key variable. Each API the agent
may speak (`chat`: Chat Completions, `responses`, `messages`: Anthropic Messages) goes to the
same API upstream; an API the provider does not offer is refused with a message naming the
ones it does. The key stays here: the agent is given only its trial's token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["API_KEY_ENV", "Api", "GatewayConfigError", "Upstream", "api_of"]

Api = Literal["chat", "responses", "messages"]
API_KEY_ENV = "BACKINTEL_MODEL_API_KEY"
"""The key for an OpenAI-compatible server given by `--model-base-url`, if it needs one."""

_PATHS: dict[Api, str] = {
    "chat": "/chat/completions",
    "responses": "/responses",
    "messages": "/messages",
}
_OPENAI_PREFIXES = ("openai", "openai-chat", "openai-responses")


@dataclass(frozen=True)
class _Provider:
    base_url: str
    base_env: str | None
    key_env: str
    apis: tuple[Api, ...]
    anthropic_auth: bool = False


_PROVIDERS: dict[str, _Provider] = {
    "openai": _Provider(
        "https://api.openai.com/v1", "OPENAI_BASE_URL", "OPENAI_API_KEY", ("chat", "responses")
    ),
    "anthropic": _Provider(
        "https://api.anthropic.com/v1",
        None,
        "ANTHROPIC_API_KEY",
        ("messages", "chat"),
        anthropic_auth=True,
    ),
    "groq": _Provider(
        "https://api.groq.com/openai/v1", None, "GROQ_API_KEY", ("chat", "responses")
    ),
    "mistral": _Provider("https://api.mistral.ai/v1", None, "MISTRAL_API_KEY", ("chat",)),
}


class GatewayConfigError(ValueError):
    """The model cannot be reached through the gateway as configured; the message says why
    and what to give instead."""


def api_of(path: str) -> Api | None:
    """The API a gateway path asks for (`/v1/chat/completions`, `/v1/responses`,
    `/v1/messages`), or None."""
    path = path.split("?", 1)[0].rstrip("/")
    for api, tail in _PATHS.items():
        if path == f"/v1{tail}":
            return api
    return None


@dataclass(frozen=True)
class Upstream:
    """The configured model's service: URL per API, the name it is asked for, its key."""

    model: str
    """The configured model string (`--model`), for prices and records."""
    name: str
    """The model name sent upstream, whatever name the agent asked for."""
    urls: Mapping[Api, str]
    headers: Mapping[str, str] = field(repr=False)
    """Authentication for the provider: never shown to the agent, never recorded."""

    @classmethod
    def resolve(
        cls, model: str, base_url: str | None = None, environ: Mapping[str, str] | None = None
    ) -> Upstream:
        """The upstream for `--model` and `--model-base-url`; keys from `environ`."""
        env = os.environ if environ is None else environ
        model = model.strip()
        if not model:
            raise GatewayConfigError("the model name is empty: give --model, e.g. openai:gpt-5.1")
        prefix, _, rest = model.partition(":")
        if base_url is not None:
            if not base_url.startswith(("http://", "https://")):
                raise GatewayConfigError(
                    f"--model-base-url {base_url!r} must start with http:// or https://"
                )
            name = rest if prefix in _OPENAI_PREFIXES and rest else model
            key = env.get(API_KEY_ENV) or "not-needed"
            root = base_url.rstrip("/")
            urls = {api: root + tail for api, tail in _PATHS.items()}
            headers = {"authorization": f"Bearer {key}", "x-api-key": key}
            return cls(model, name, urls, headers)
        family = "openai" if prefix in _OPENAI_PREFIXES else prefix
        provider = _PROVIDERS.get(family) if rest else None
        if provider is None:
            known = ", ".join(f"{p}:" for p in (*_OPENAI_PREFIXES, *list(_PROVIDERS)[1:]))
            raise GatewayConfigError(
                f"model {model!r}: the gateway forwards to {known} models, or to any "
                "OpenAI-compatible server given by --model-base-url"
            )
        secret = env.get(provider.key_env)
        if not secret:
            raise GatewayConfigError(
                f"model {model!r}: set {provider.key_env} (the harness's environment only; "
                "the agent never sees it)"
            )
        root = ((provider.base_env and env.get(provider.base_env)) or provider.base_url).rstrip("/")
        urls = {api: root + _PATHS[api] for api in provider.apis}
        headers = {"authorization": f"Bearer {secret}"}
        if provider.anthropic_auth:
            headers["x-api-key"] = secret
        return cls(model, rest, urls, headers)

    def url(self, api: Api) -> str | None:
        """Where requests of `api` go (None: the provider does not offer that API)."""
        return self.urls.get(api)

"""Which model drives the analyst: a Pydantic AI model string or an OpenAI-compatible server.

`--model openai:gpt-5.1` (any string Pydantic AI knows) is passed through and resolved by
Pydantic AI when the first run starts, so no credentials are needed to build the analyst.
With a base URL (Ollama, vLLM, llama.cpp), `model` is the server's model name (an `openai:`
prefix is dropped, so the server gets the bare name) and the model is an `OpenAIChatModel`
pointing at that server; its key comes from `BACKINTEL_MODEL_API_KEY` or is a placeholder,
since local servers do not check it. `openai:` goes through Chat Completions on both routes;
`openai-responses:` chooses the Responses API (`model_api` says which, for `run.json`).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from pydantic_ai.models import Model, parse_model_id
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers import infer_provider_class
from pydantic_ai.providers.openai import OpenAIProvider

from analyst.agent import ModelAnalyst
from pytest_backintel.analyst_api import AnalystConfig

__all__ = [
    "API_KEY_ENV",
    "OPENAI_APIS",
    "ModelConfigError",
    "check_reachable",
    "model_analyst",
    "model_api",
    "resolve_model",
    "server_model_name",
]

API_KEY_ENV = "BACKINTEL_MODEL_API_KEY"
"""The environment variable holding the key for an OpenAI-compatible server, if it needs one."""


class ModelConfigError(ValueError):
    """The model configuration is incomplete or malformed."""


def _check_provider(name: str) -> None:
    """Reject a string Pydantic AI cannot resolve, without creating a client or reading keys."""
    if name == "test":
        return
    provider, _ = parse_model_id(name)
    if provider is None:
        raise ModelConfigError(
            f"model {name!r} has no provider prefix: write '<provider>:<model>' "
            "(e.g. 'openai:gpt-5.1'), or give a base URL for an OpenAI-compatible server"
        )
    try:
        infer_provider_class(provider)
    except ValueError as exc:
        raise ModelConfigError(
            f"model {name!r}: Pydantic AI has no provider {provider!r} ({exc})"
        ) from exc


OPENAI_APIS = {"openai": "chat_completions", "openai-chat": "chat_completions"}
OPENAI_APIS["openai-responses"] = "responses"
"""OpenAI prefixes and the API each one uses: Chat Completions unless the user asks for the
Responses API with `openai-responses:`, with or without a base URL."""


def model_api(model: str, base_url: str | None = None) -> str:
    """The API the model is reached through: `chat_completions`, `responses`, or the
    provider's own (e.g. `anthropic`)."""
    provider, _ = parse_model_id(model.strip())
    if provider in OPENAI_APIS:
        return OPENAI_APIS[provider]
    return "chat_completions" if base_url is not None or provider is None else provider


def server_model_name(model: str) -> str:
    """The name sent to an OpenAI-compatible server: `openai:qwen3` → `qwen3`; a name of the
    server's own, such as Ollama's `qwen3:32b`, as it is."""
    prefix, _, rest = model.strip().partition(":")
    return rest if prefix in OPENAI_APIS and rest else model.strip()


def resolve_model(model: str, base_url: str | None = None) -> Model | str:
    """The model to run: a Pydantic AI model string, or an OpenAI model at `base_url`."""
    name = model.strip()
    if not name:
        raise ModelConfigError("the model name is empty: give e.g. 'openai:gpt-5.1'")
    api = model_api(name, base_url)
    if base_url is None:
        _check_provider(name)
        prefix, bare = parse_model_id(name)
        return f"openai-chat:{bare}" if prefix == "openai" else name
    if not base_url.startswith(("http://", "https://")):
        raise ModelConfigError(
            f"model base URL {base_url!r} must start with http:// or https:// "
            "(e.g. 'http://127.0.0.1:11434/v1' for Ollama)"
        )
    api_key = os.environ.get(API_KEY_ENV) or "not-needed"
    provider = OpenAIProvider(base_url=base_url, api_key=api_key)
    if api == "responses":
        return OpenAIResponsesModel(server_model_name(name), provider=provider)
    return OpenAIChatModel(server_model_name(name), provider=provider)


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Raise `ModelConfigError` naming the fix when nothing accepts connections at `base_url`."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=timeout_s).close()
    except OSError as exc:
        raise ModelConfigError(
            f"--model-base-url {base_url}: nothing answers there ({exc}); start the server "
            "or correct the URL (Ollama: http://127.0.0.1:11434/v1)"
        ) from exc


def model_analyst(config: AnalystConfig) -> ModelAnalyst:
    """The factory for a model-driven analyst; `config.model` is required."""
    if config.model is None:
        raise ModelConfigError(
            "no model configured for the model analyst: pass --model '<provider>:<model>' "
            "(or set BACKINTEL_MODEL), or --model-base-url with the server's model name"
        )
    model = resolve_model(config.model, config.model_base_url)
    base_url = config.model_base_url
    check = (lambda: check_reachable(base_url)) if base_url else (lambda: None)
    return ModelAnalyst(
        model,
        name=config.model,
        check=check,
        max_connections=config.max_connections,
        connection_group=config.connection_group,
    )

"""Which model drives the analyst: a Pydantic AI model string or an OpenAI-compatible server.

`--model openai:gpt-5.1` (any string Pydantic AI knows) is passed through and resolved by
Pydantic AI when the first run starts, so no credentials are needed to build the analyst.
With a base URL (Ollama, vLLM, llama.cpp), `model` is the server's model name and the model
is an `OpenAIChatModel` pointing at that server; its key comes from `BACKINTEL_MODEL_API_KEY`
or is a placeholder, since local servers do not check it.
"""

from __future__ import annotations

import os

from pydantic_ai.models import Model, parse_model_id
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers import infer_provider_class
from pydantic_ai.providers.openai import OpenAIProvider

from analyst.agent import ModelAnalyst
from pytest_backintel.analyst_api import AnalystConfig

__all__ = ["API_KEY_ENV", "ModelConfigError", "model_analyst", "resolve_model"]

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


def resolve_model(model: str, base_url: str | None = None) -> Model | str:
    """The model to run: the string itself, or an `OpenAIChatModel` at `base_url`."""
    name = model.strip()
    if not name:
        raise ModelConfigError("the model name is empty: give e.g. 'openai:gpt-5.1'")
    if base_url is None:
        _check_provider(name)
        return name
    if not base_url.startswith(("http://", "https://")):
        raise ModelConfigError(
            f"model base URL {base_url!r} must start with http:// or https:// "
            "(e.g. 'http://127.0.0.1:11434/v1' for Ollama)"
        )
    api_key = os.environ.get(API_KEY_ENV) or "not-needed"
    provider = OpenAIProvider(base_url=base_url, api_key=api_key)
    return OpenAIChatModel(name, provider=provider)


def model_analyst(config: AnalystConfig) -> ModelAnalyst:
    """The factory for a model-driven analyst; `config.model` is required."""
    if config.model is None:
        raise ModelConfigError(
            "no model configured for the model analyst: pass --model '<provider>:<model>' "
            "(or set BACKINTEL_MODEL), or --model-base-url with the server's model name"
        )
    model = resolve_model(config.model, config.model_base_url)
    return ModelAnalyst(model, name=config.model)

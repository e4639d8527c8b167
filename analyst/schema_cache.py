"""Provider tool schemas derived once, not on every request.

Before each request Pydantic AI turns every tool's JSON schema into the provider's dialect
(`Model.customize_request_parameters`: a deep copy and a walk of each schema), and does so
several times per request. The analyst's tools never change between requests or trials, so
that work is the largest part of the harness-side cost of a model request. `cache_tool_schemas`
keeps the derived tool definitions by their input (compared by value, so a changed tool is
derived afresh) and builds each request's parameters from them.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from pydantic_ai.models import Model, ModelRequestParameters

__all__ = ["cache_tool_schemas"]

MAX_ENTRIES = 32
"""Distinct tool sets kept (one per output mode or tool-visibility state a run reaches)."""


def cache_tool_schemas(model: Model) -> Model:
    """`model`, whose `customize_request_parameters` reuses earlier derivations (in place)."""
    derive = model.customize_request_parameters
    seen: list[tuple[tuple[Any, ...], ModelRequestParameters]] = []
    lock = threading.Lock()

    def customize(params: ModelRequestParameters) -> ModelRequestParameters:
        key = (params.function_tools, params.output_tools, params.output_object)
        with lock:
            done = next((d for k, d in seen if k == key), None)
        if done is None:
            done = derive(params)
            with lock:
                if len(seen) < MAX_ENTRIES:
                    seen.append((key, done))
        return replace(
            params,
            function_tools=list(done.function_tools),
            output_tools=list(done.output_tools),
            output_object=done.output_object,
        )

    setattr(model, "customize_request_parameters", customize)  # noqa: B010 - on this instance
    return model

"""Provider tool schemas are derived once per tool set, and exactly as Pydantic AI derives them."""

from __future__ import annotations

from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition

from analyst.schema_cache import cache_tool_schemas


def _model() -> OpenAIChatModel:
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="unused")
    return OpenAIChatModel("m", provider=provider)


def _params(*names: str) -> ModelRequestParameters:
    schema = {
        "type": "object",
        "properties": {"sql": {"type": "string", "title": "Sql", "default": "x"}},
        "required": [],
        "additionalProperties": False,
    }
    tools = [ToolDefinition(name=n, parameters_json_schema=schema) for n in names]
    return ModelRequestParameters(function_tools=tools, allow_text_output=False)


def test_the_same_tools_are_derived_once_and_as_pydantic_ai_derives_them() -> None:
    plain, cached = _model(), _model()
    calls: list[int] = []
    derive = cached.customize_request_parameters

    def counting(params: ModelRequestParameters) -> ModelRequestParameters:
        calls.append(1)
        return derive(params)

    setattr(cached, "customize_request_parameters", counting)  # noqa: B010
    cache_tool_schemas(cached)
    first = cached.customize_request_parameters(_params("run_sql", "list_tables"))
    second = cached.customize_request_parameters(_params("run_sql", "list_tables"))
    expected = plain.customize_request_parameters(_params("run_sql", "list_tables"))
    assert len(calls) == 1
    assert first == second == expected
    assert first.function_tools is not second.function_tools  # each request gets its own list


def test_a_changed_tool_set_is_derived_afresh() -> None:
    model = cache_tool_schemas(_model())
    one = model.customize_request_parameters(_params("run_sql"))
    two = model.customize_request_parameters(_params("run_sql", "describe_table"))
    assert [t.name for t in one.function_tools] == ["run_sql"]
    assert [t.name for t in two.function_tools] == ["run_sql", "describe_table"]
    assert two == _model().customize_request_parameters(_params("run_sql", "describe_table"))

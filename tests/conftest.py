"""Harness self-tests: never reach a model provider."""

import pydantic_ai.models

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

pytest_plugins = ["pytester"]

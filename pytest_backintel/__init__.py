"""BackIntel Bench: a pytest plugin that measures data-analyst agents honestly."""

from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal, parse_answer

__all__ = ["AnalystAnswer", "Evidence", "MetricValue", "Refusal", "__version__", "parse_answer"]

__version__ = "0.1.0"

"""Scenario definitions, the worlds they are asked over, oracles and evaluator-owned references."""

"""Scoring: an answer and its evidence results against the evaluator's reference (tolerances,
refusal concepts, answer rules) into a `TrialScore`; the optional, uncalibrated judge.
Uses the core modules and `evidence`'s result types."""

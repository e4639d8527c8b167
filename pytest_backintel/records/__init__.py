"""Records: the run folder (`run.json`, `records.jsonl`, `traces.jsonl`), run and method
hashes, cassettes, the live status of trials in flight and the pytest-html columns. Uses the
core modules and the stages below it (collect, scoring, evidence)."""

"""Collect: scenario files and suites, worlds and the user's own data, reference locks,
acceptance manifests and sealed reserved cases, turned into one `ScenarioItem` per case and
trial; xdist scheduling. Uses the core modules, `evidence` (dialects for checks), `stores` and
`sandbox`; never `run`, `records` or `freeze`."""

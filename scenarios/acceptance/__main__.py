"""Regenerate the committed development manifests: `uv run python -m scenarios.acceptance`.

Builds the development split under the data dir ($BACKINTEL_DATA_DIR or `<repo>/data`) and
writes `scenarios/acceptance/acceptance-v1/development.json`, then the original-regression
manifest over the Olist world (`original-regression.json`). Review the diff: a changed
reference is a change to the benchmark. The reserved split is sealed: the evaluator re-issues
its commitment with `backintel reserve commit` (see docs/acceptance.md).
"""

from __future__ import annotations

from scenarios.acceptance.builder import AcceptanceSettings, build_acceptance
from scenarios.acceptance.manifest import manifest_path
from scenarios.acceptance.regression import REGRESSION_PATH, build_regression, to_json
from scenarios.world_base import data_dir


def main() -> None:
    settings = AcceptanceSettings(data_dir())
    manifest = build_acceptance(settings, "development")
    path = manifest_path("development")
    manifest.write(path)
    answerable = sum(bool(c.scenario["answerable"]) for c in manifest.cases)
    print(f"{path}: {len(manifest.cases)} cases ({answerable} answerable)")
    print(
        "reserved: sealed; the evaluator re-issues its commitment with `backintel reserve commit`"
    )
    regression = build_regression(settings.data_dir)
    REGRESSION_PATH.write_text(to_json(regression), encoding="utf-8")
    print(f"{REGRESSION_PATH}: {len(regression['cases'])} cases")


if __name__ == "__main__":
    main()

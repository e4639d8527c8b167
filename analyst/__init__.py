"""The default analyst under test: a Pydantic AI agent with store tools and on-demand skills.

Factories the harness names with `--analyst pkg.module:factory` (each takes `AnalystConfig`):
`analyst.models:model_analyst` and the calibration analysts `analyst.calibration:reference`,
`refuse_all`, `perturbed` and `unsupported`, and `analyst.careless:careless`. Importing this
package builds nothing.
"""

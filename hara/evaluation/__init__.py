"""Evaluation: lighteval custom tasks for the ten benchmarks, generation backends and the `hara evaluate` runner.

Submodules are imported on use (lighteval takes seconds to import): :mod:`settings` (per-benchmark sampling),
:mod:`scoring` (pass@1 over n samples scored with the RL reward), :mod:`tasks` (the ten tasks), :mod:`offline`
(lighteval without network), :mod:`models` (transformers / vLLM backends, cache keys), :mod:`runner`,
:mod:`tracking` (MLflow) and :mod:`fetch` (`hara fetch-data`).
"""

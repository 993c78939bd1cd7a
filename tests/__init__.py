"""The test suite. Its workers import the same stack as a ``hara`` job (torch, transformers, TRL, vLLM, lighteval), so
they run under the same collector thresholds (hara.cli.GC_THRESHOLDS), set here: before conftest imports any of it."""

import gc

from hara.cli import GC_THRESHOLDS

gc.set_threshold(*GC_THRESHOLDS)

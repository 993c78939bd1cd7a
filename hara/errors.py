"""Error types of the whole harness, below every other module (this module imports nothing of hara), so that no
module has to import another layer for one. Every one derives from :class:`HaraError`: a problem with the user's
input (a config key, a data line, a tracking store, two incomparable evaluations), which the ``hara`` command prints
as one line (exit status 2) instead of a traceback. Those that were ValueErrors stay ValueErrors."""

from __future__ import annotations

__all__ = [
    "ComparisonError",
    "ConfigError",
    "DataError",
    "HaraError",
    "TrackingError",
    "UnknownNameError",
    "UserError",
]


class HaraError(Exception):
    """A problem with the user's input, reported as one line."""


class UserError(HaraError):
    """Bad input that no more specific type below names (a command-line argument, a missing run)."""


class ConfigError(HaraError, ValueError):
    """A config problem, already formatted as one line that names the file and the key path."""


class DataError(HaraError, ValueError):
    """Bad data on disk; the message names the file (and line or column) at fault."""


class UnknownNameError(HaraError, ValueError):
    """A dataset, benchmark or skill name that is not registered; the message lists the valid names."""


class TrackingError(HaraError, ValueError):
    """A tracking store that cannot be used as configured, in one line naming the key and the fix."""


class ComparisonError(HaraError, ValueError):
    """Two evaluations that the report was asked to compare are not comparable (one line, for the CLI)."""

"""Error types of the whole harness, below every other module (this module imports nothing of hara), so that no
module has to import another layer for one. Every one derives from :class:`HaraError`: a problem with the user's
input (a config key, a data line, a tracking store, two incomparable evaluations), which the ``hara`` command prints
as one line (exit status 2) instead of a traceback. Those that were ValueErrors stay ValueErrors (an unknown name is
a KeyError too)."""

from __future__ import annotations

from collections.abc import Iterable

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


class UnknownNameError(HaraError, KeyError, ValueError):
    """A name that no registry holds (a method, analysis, benchmark, weighting, preset, dataset or skill); the message
    lists the valid names. A KeyError and a ValueError both, for callers that catch either."""

    @classmethod
    def of(cls, kind: str, name: object, valid: Iterable[str]) -> UnknownNameError:
        """The one message: ``unknown <kind> 'x' (valid: a, b, c)``."""
        return cls(f"unknown {kind} {name!r} (valid: {', '.join(valid)})")

    def __str__(self) -> str:  # the message as given (a KeyError's would be quoted)
        return str(self.args[0]) if self.args else ""


class TrackingError(HaraError, ValueError):
    """A tracking store that cannot be used as configured, in one line naming the key and the fix."""


class ComparisonError(HaraError, ValueError):
    """Two evaluations that the report was asked to compare are not comparable (one line, for the CLI)."""

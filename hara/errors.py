"""Error types that several layers raise, below all of them (this module imports nothing of hara), so that no
module has to import the command line for one: :class:`UserError` is a problem with the user's input, which the
``hara`` command prints as one line (exit status 2) instead of a traceback."""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """A problem with the user's input, reported as one line."""

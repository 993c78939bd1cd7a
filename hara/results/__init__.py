"""Reading a results folder and the statistics of its comparisons, below the report, the analyses and the plan.

:mod:`collect` (the runs, their metrics.jsonl and scores.json), :mod:`stats` (aggregation over seeds, curve measures),
:mod:`paired` (paired bootstrap intervals and their correction over a family), :mod:`curves` (the speed endpoint),
:mod:`variance` (a declared run variance), :mod:`sequential` (group-sequential boundaries for staged seeds).
Submodules are imported on use; this package re-exports nothing.
"""

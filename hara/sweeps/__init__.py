"""Optuna ablation sweeps over HarA's knobs (barycenter size, FGW alpha, Sinkhorn epsilon, ...).

    hara sweep run --study sweeps/alpha.yaml --workers 4     # 4 processes share one study until its budget is spent
    hara sweep report --study sweeps/alpha.yaml              # figures + best params into results/sweeps/alpha/

Modules: :mod:`~hara.sweeps.study` (study files, validation, sampler/pruner registries), :mod:`~hara.sweeps.worker`
(claiming, stale-trial recovery, the worker loop), :mod:`~hara.sweeps.objective` (validation split, segmented
training, metrics), :mod:`~hara.sweeps.mlflow_runs` (parent and child runs), :mod:`~hara.sweeps.summary`
(figures, best params), :mod:`~hara.report.sweeps_section` (the main report's "Sweeps" section),
:mod:`~hara.sweeps.workflow` (targets of workflows/sweeps.smk).
"""

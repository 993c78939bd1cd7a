"""The paper's analyses (FGW variants, exact vs linearized, rollout count, efficiency, interpretability) as
workflow steps: `hara analysis NAME --config ... --results ... --out ...` writes one analysis' CSV, JSON
and figures (rules in workflows/analyses.smk; the report renders them). Submodules import lazily: the maths
(:mod:`~hara.analysis.mapping`, :mod:`~hara.analysis.transport`, :mod:`~hara.analysis.stages`) is pure tensor code."""

# The paper's analyses (config `analyses`, off by default; hara/analysis/): extra training runs = grid cells with
# config overrides (FGW variants, exact vs linearized, group size G), their evaluations, and one job per analysis
# writing <results>/analysis/<name>/<name>.csv, <name>.json and figures, which the report renders as sections.
# Which analyses exist is declared once, in hara.analysis.registry (built-ins and plug-ins); which runs and files
# each needs is decided by hara.analysis.workflow from those declarations, shared with `hara analysis` and the report.


wildcard_constraints:
    study=alternatives(ANALYSIS_NAMES),
    label=r"[A-Za-z0-9_.]+",
    analysis=alternatives(ANALYSIS_NAMES),


# The analyses' runs are the grid's train and evaluate rules at other folders: the train rule's `overrides` param
# carries the run's config changes (--set ...), empty for a grid cell.
use rule train as analysis_train with:
    output:
        final=directory(f"{ANALYSIS_TRAIN}/{layout.FINAL_DIR}"),
    log:
        f"{LOGS}/analysis_train/{{study}}/{{label}}/{CELL}.log",
    params:
        overrides=analysis_overrides,


use rule evaluate as analysis_evaluate with:
    input:
        final=rules.analysis_train.output.final,
        manifest=rules.prepare_data.output.manifest,
    output:
        scores=f"{ANALYSIS_EVAL}/{layout.SCORES_FILE}",
    log:
        f"{LOGS}/analysis_evaluate/{{study}}/{{label}}/{CELL}.log",


# The interpretability study's labelling model (labeller: llm), downloaded like the policy models (download_model):
# a local rule, in a job of its own, so the analysis job reads local files only.
if LABELLING["labeller"] == "llm" and LABELLING["llm_hub_id"]:

    use rule download_model as download_labeller with:
        output:
            snapshot=directory(LABELLING["llm_model"]),
        log:
            f"{LOGS}/download_labeller/labeller.log",
        params:
            hub_id=LABELLING["llm_hub_id"],


rule analysis:
    input:
        lambda wildcards: ANALYSIS_INPUTS[wildcards.analysis],
    output:
        csv=f"{ANALYSIS_DIR}/{{analysis}}.csv",
        json=f"{ANALYSIS_DIR}/{{analysis}}.json",
    log:
        f"{LOGS}/analysis/{{analysis}}.log",
    params:
        config=CONFIG_FILE,
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(os.path.dirname(output.json))),
        out=lambda wildcards: layout.analysis_dir(RESULTS, wildcards.analysis),
        settings=settings_digest("analyses", "hara"),
    threads: THREADS
    resources:
        **job_resources("evaluate", gpu=analysis_gpus),
    conda:
        "../environment.yml"
    shell:
        "hara analysis {wildcards.analysis:q} --config {params.config:q} --results {params.results:q}"
        " --out {params.out:q} > {log:q} 2>&1"

# The paper's analyses (config `analyses`, off by default; hara/analysis/): extra training runs = grid cells with
# config overrides (FGW variants, exact vs linearized, group size G), their evaluations, and one job per analysis
# writing <results>/analysis/<name>/<name>.csv, <name>.json and figures, which the report renders as sections.
# Which runs and files exist is decided by hara.analysis.plan, shared with the analysis commands and the report.

from hara.analysis.plan import (
    ANALYSIS_NAMES,
    analysis_inputs,
    analysis_outputs,
    analysis_runs,
    enabled_analyses,
    override_args,
    run_dir,
)

ANALYSIS_RUNS = {run_dir(config, run): run for run in analysis_runs(config)}
ANALYSIS_TRAIN = f"{RESULTS}/analysis/train/{{study}}/{{label}}/{CELL}"
ANALYSIS_EVAL = f"{RESULTS}/analysis/eval/{{study}}/{{label}}/{CELL}"
# What each analysis job reads: its runs' checkpoints and scores, the grid's runs, or the probed checkpoint.
ANALYSIS_INPUTS = {name: analysis_inputs(config, name) for name in ANALYSIS_NAMES}
#: The JSON of every enabled analysis: inputs of the report.
ANALYSIS_JSONS = [analysis_outputs(config, name)["json"] for name in enabled_analyses(config)]


wildcard_constraints:
    study="variants|exact|group_size",
    label=r"[A-Za-z0-9_.]+",
    analysis=alternatives(ANALYSIS_NAMES),


rule analysis_train:
    input:
        store=rules.tracking_store.output.store,
        base_model=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
        # the grid's RL prompts (workflows/train.smk), so an extra run differs from its grid cell only by its study
        prompts=lambda wildcards: PROMPTS_DIR.format(size=wildcards.size) if SELECT_PROMPTS else [],
    output:
        final=directory(f"{ANALYSIS_TRAIN}/final"),
    log:
        f"{LOGS}/analysis_train/{{study}}/{{label}}/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        run_dir=lambda wildcards, output: os.path.dirname(output.final),
        overrides=lambda wildcards, output: " ".join(
            f"--set {shlex.quote(arg)}" for arg in override_args(config, ANALYSIS_RUNS[os.path.dirname(output.final)])
        ),
        settings=settings_digest("training", "rlvr", "hara", "prompt"),
        prompts=lambda wildcards, input: f"--prompts {shlex.quote(input.prompts)}" if SELECT_PROMPTS else "",
    threads: THREADS
    resources:
        mem_mb=resource("train", "mem_mb"),
        runtime=resource("train", "runtime"),
        gpu=resource("train", "gpu"),
    conda:
        "../environment.yml"
    shell:
        "hara train --config {params.config:q} {params.overrides} --size {wildcards.size:q}"
        " --rlvr {wildcards.rlvr:q} --method {wildcards.method:q} --seed {wildcards.seed:q}"
        " --base-model {input.base_model:q} --data {params.data:q} {params.prompts} --out {params.run_dir:q}"
        " > {log:q} 2>&1"


rule analysis_evaluate:
    input:
        final=rules.analysis_train.output.final,
        manifest=rules.prepare_data.output.manifest,
    output:
        scores=f"{ANALYSIS_EVAL}/scores.json",
    log:
        f"{LOGS}/analysis_evaluate/{{study}}/{{label}}/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        benchmarks=benchmark_args(),
        settings=settings_digest("evaluation", "prompt"),
    threads: THREADS
    resources:
        mem_mb=resource("evaluate", "mem_mb"),
        runtime=resource("evaluate", "runtime"),
        gpu=resource("evaluate", "gpu"),
    conda:
        "../environment.yml"
    shell:
        "hara evaluate --config {params.config:q} --checkpoint {input.final:q} {params.benchmarks}"
        " --data {params.data:q} --out {output.scores:q} > {log:q} 2>&1"


LABELLING = config["analyses"]["interpretability"]


# The interpretability study's labelling model (labeller: llm), downloaded like the policy models (download_model):
# a local rule, in a job of its own, so the analysis job reads local files only.
if LABELLING["labeller"] == "llm" and LABELLING["llm_hub_id"]:

    rule download_labeller:
        output:
            snapshot=directory(LABELLING["llm_model"]),
        log:
            f"{LOGS}/download_labeller/labeller.log",
        params:
            hub_id=LABELLING["llm_hub_id"],
        localrule: True
        threads: 1
        resources:
            mem_mb=4000,
            runtime=120,
        conda:
            "../environment.yml"
        script:
            "scripts/download_model.py"


rule analysis:
    input:
        lambda wildcards: ANALYSIS_INPUTS[wildcards.analysis],
    output:
        csv=f"{RESULTS}/analysis/{{analysis}}/{{analysis}}.csv",
        json=f"{RESULTS}/analysis/{{analysis}}/{{analysis}}.json",
    log:
        f"{LOGS}/analysis/{{analysis}}.log",
    params:
        config=CONFIG_FILE,
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(os.path.dirname(output.json))),
        out=lambda wildcards, output: os.path.dirname(output.json),
        settings=settings_digest("analyses", "hara"),
    threads: THREADS
    resources:
        mem_mb=resource("evaluate", "mem_mb"),
        runtime=resource("evaluate", "runtime"),
        gpu=lambda wildcards: resource("evaluate", "gpu") if wildcards.analysis == "interpretability" else 0,
    conda:
        "../environment.yml"
    shell:
        "python -m hara.analysis {wildcards.analysis:q} --config {params.config:q} --results {params.results:q}"
        " --out {params.out:q} > {log:q} 2>&1"

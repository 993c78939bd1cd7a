# One job per trained checkpoint, all of the config's benchmarks in one `hara evaluate` call: importing lighteval
# costs about 10 s per process and the checkpoint is hashed once, against seconds of work per benchmark on the
# embedded default. Scores go to a JSON file and into the training run's MLflow run. The Base model of every size is
# evaluated the same way (evaluate_base; no training run, so no MLflow run), so the report shows what RL adds.


rule evaluate:
    input:
        final=rules.train.output.final,
        manifest=rules.prepare_data.output.manifest,
    output:
        scores=f"{EVAL_DIR}/scores.json",
    log:
        f"{LOGS}/evaluate/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        benchmarks=benchmark_args(),
        settings=settings_digest("evaluation", "prompt"),
    threads: THREADS
    resources:
        **gpu_job_resources("evaluate", evaluate_gpus),
    conda:
        "../environment.yml"
    shell:
        "hara evaluate --config {params.config:q} --checkpoint {input.final:q} {params.benchmarks}"
        " --data {params.data:q} --out {output.scores:q} > {log:q} 2>&1"


use rule evaluate as evaluate_base with:
    input:
        final=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
    output:
        scores=f"{BASE_EVAL_DIR}/scores.json",
    log:
        f"{LOGS}/evaluate_base/{{size}}.log",


# Checkpoint selection (config selection, hara/evaluation/selection.py): the run's candidate checkpoints scored on
# the validation split held out of the training problems, the best one's test scores beside the final's. One job
# per cell, after the final's evaluation, whose test scores it reuses when final/ is the one selected.
rule select_checkpoint:
    input:
        final=rules.train.output.final,
        scores=rules.evaluate.output.scores,
        manifest=rules.prepare_data.output.manifest,
    output:
        selection=f"{EVAL_DIR}/selection.json",
        scores=f"{EVAL_DIR}/selected_scores.json",
    log:
        f"{LOGS}/select_checkpoint/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        run_dir=lambda wildcards, input: os.path.dirname(input.final),
        settings=settings_digest("selection", "evaluation", "prompt"),
    threads: THREADS
    resources:
        **gpu_job_resources("evaluate", evaluate_gpus),
    conda:
        "../environment.yml"
    shell:
        "hara select-checkpoint --config {params.config:q} --run {params.run_dir:q} --data {params.data:q}"
        " --final-scores {input.scores:q} --out {output.selection:q} --scores-out {output.scores:q} > {log:q} 2>&1"

# One job per trained checkpoint, all of the config's benchmarks in one `hara evaluate` call: importing lighteval
# costs about 10 s per process and the checkpoint is hashed once, against seconds of work per benchmark on the
# embedded default. Scores go to a JSON file and into the training run's MLflow run. The Base model of every size is
# evaluated the same way (evaluate_base; no training run, so no MLflow run), so the report shows what RL adds.
#
# Checkpoint selection (config selection, hara/evaluation/selection.py) runs in the same job, after the final's
# evaluation (`--selection-out`): the run's candidate checkpoints scored on the validation split held out of the
# training problems, the best one's test scores beside the final's (the final's own when final/ is selected). A job
# of its own paid lighteval's import and a scheduler slot again for seconds of work (docs/profile.md). With
# report.speed the same loop scores each candidate on the speed benchmark too, on the engine its validation loads
# (speed.json: the in-distribution curve the report's speed endpoint pairs by seed and problem).


rule evaluate:
    input:
        final=rules.train.output.final,
        manifest=rules.prepare_data.output.manifest,
    output:
        **selection_outputs(),
        scores=EVAL_SCORES,
    log:
        f"{LOGS}/evaluate/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        benchmarks=benchmark_args(),
        selection=selection_args,
        settings=settings_digest("selection", "evaluation", "prompt", speed=SPEED_SETTINGS),
    threads: THREADS
    resources:
        **gpu_job_resources("evaluate", evaluate_gpus),
    conda:
        "../environment.yml"
    shell:
        "hara evaluate --config {params.config:q} --checkpoint {input.final:q} {params.benchmarks}"
        " --data {params.data:q} --out {output.scores:q}{params.selection} > {log:q} 2>&1"


use rule evaluate as evaluate_base with:
    input:
        final=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
    output:
        scores=BASE_SCORES,
    log:
        f"{LOGS}/evaluate_base/{{size}}.log",
    params:  # merged into evaluate's; no selection files declared, so no selection flags (selection_args)
        settings=settings_digest("evaluation", "prompt"),


# The Base model's completions checked before any training job (cluster.gates: train waits for it): `hara base-sanity`
# stops the grid in one line when too few of them box an answer or stop (evaluation.base_sanity), so no GPU-hour is
# spent on a prompt the model does not follow. A local rule: it reads one JSON file. Its line goes to the console too.
rule base_sanity:
    input:
        scores=rules.evaluate_base.output.scores,
    output:
        summary=BASE_SANITY,
    log:
        f"{LOGS}/base_sanity/{{size}}.log",
    params:
        config=CONFIG_FILE,
        settings=settings_digest("evaluation"),
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../environment.yml"
    shell:
        "hara base-sanity --config {params.config:q} --size {wildcards.size:q} --scores {input.scores:q}"
        " --out {output.summary:q} 2>&1 | tee {log:q}"

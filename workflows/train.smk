# One RL training run per grid cell (size x rlvr x method x seed). `hara train` writes final/, checkpoints/,
# metrics.jsonl and mlflow_run.json into the run folder; only final/ is declared, so that a failed job's checkpoints
# and metrics survive Snakemake's cleanup and the rerun resumes from the last checkpoint.


rule tracking_store:
    input:
        preflight=preflight_gate(),
    output:
        store=f"{RESULTS}/{layout.STORE_FILE}",
    log:
        f"{LOGS}/tracking_store/tracking_store.log",
    params:
        uri=TRACKING_URI,
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../environment.yml"
    script:
        "scripts/tracking_store.py"


# Pass-rate selection of the RL prompts (hara/rlvr/prompts.py), once per size, shared by its whole grid.
rule select_prompts:
    input:
        base_model=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
    output:
        prompts=directory(PROMPTS_DIR),
    log:
        f"{LOGS}/select_prompts/{{size}}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        settings=settings_digest("training", "prompt"),
    threads: THREADS
    resources:
        **job_resources("evaluate"),
    conda:
        "../environment.yml"
    shell:
        "hara select-prompts --config {params.config:q} --model {input.base_model:q} --data {params.data:q}"
        " --out {output.prompts:q} > {log:q} 2>&1"


rule train:
    input:
        store=rules.tracking_store.output.store,
        base_model=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
        prompts=lambda wildcards: PROMPTS_DIR.format(size=wildcards.size) if SELECT_PROMPTS else [],
        base_sanity=base_sanity_gate,
    output:
        final=directory(RUN_FINAL),
    log:
        f"{LOGS}/train/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        run_dir=lambda wildcards, output: layout.run_of(output.final),
        settings=settings_digest("training", "rlvr", "hara", "prompt", "selection"),
        prompts=lambda wildcards, input: f"--prompts {shlex.quote(input.prompts)}" if SELECT_PROMPTS else "",
        processes=train_processes,
        overrides="",  # config changes of an analysis run (workflows/analyses.smk), as " --set KEY=VALUE ..."
    threads: THREADS
    resources:
        **gpu_job_resources("train", train_gpus),
    conda:
        "../environment.yml"
    shell:
        "hara train --config {params.config:q}{params.overrides} --size {wildcards.size:q} --rlvr {wildcards.rlvr:q}"
        " --method {wildcards.method:q} --seed {wildcards.seed:q} --base-model {input.base_model:q}"
        " --data {params.data:q} {params.prompts} --processes {params.processes:q} --out {params.run_dir:q}"
        " > {log:q} 2>&1"

# One RL training run per grid cell (size x rlvr x method x seed). `hara train` writes final/, checkpoints/,
# metrics.jsonl and mlflow_run.json into the run folder; only final/ is declared, so that a failed job's checkpoints
# and metrics survive Snakemake's cleanup and the rerun resumes from the last checkpoint.


rule tracking_store:
    output:
        store=f"{RESULTS}/mlflow_store.json",
    log:
        f"{LOGS}/tracking_store/tracking_store.log",
    params:
        uri=TRACKING_URI,
    localrule: True  # seconds of work: not worth a cluster job
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../environment.yml"
    script:
        "scripts/tracking_store.py"


rule train:
    input:
        store=rules.tracking_store.output.store,
        base_model=rules.base_model.output.model,
        manifest=rules.prepare_data.output.manifest,
    output:
        final=directory(f"{RUN_DIR}/final"),
    log:
        f"{LOGS}/train/{CELL}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        run_dir=lambda wildcards, output: os.path.dirname(output.final),
        settings=settings_digest("training", "rlvr", "hara"),
    threads: THREADS
    resources:
        mem_mb=resource("train", "mem_mb"),
        runtime=resource("train", "runtime"),
        gpu=resource("train", "gpu"),
    conda:
        "../environment.yml"
    shell:
        "hara train --config {params.config:q} --size {wildcards.size:q} --rlvr {wildcards.rlvr:q}"
        " --method {wildcards.method:q} --seed {wildcards.seed:q} --base-model {input.base_model:q}"
        " --data {params.data:q} --out {params.run_dir:q} > {log:q} 2>&1"

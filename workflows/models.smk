# The "Base" model of each size: tiny family = build + SFT warm-up; hub family = copy of the local snapshot, which
# download_model fetches first. The tiny family never reaches download_model (base_model asks for no snapshot).


# The DAG's only model download, in a job of its own, so the training and evaluation jobs read local files only.
# A local rule: cluster compute nodes often have no internet access, the login node running Snakemake does.
rule download_model:
    input:
        preflight=preflight_gate(),
    output:
        snapshot=directory(f"{MODEL_SNAPSHOTS}/{{size}}"),
    log:
        f"{LOGS}/download_model/{{size}}.log",
    params:
        hub_id=lambda wildcards: HUB_IDS[wildcards.size],
    localrule: True
    threads: 1
    resources:
        mem_mb=4000,
        runtime=120,
    conda:
        "../environment.yml"
    script:
        "scripts/download_model.py"


rule base_model:
    input:
        manifest=rules.prepare_data.output.manifest,
        # the hub snapshot the base model is copied from; nothing for the tiny family, which builds its own
        snapshot=lambda wildcards: f"{MODEL_SNAPSHOTS}/{wildcards.size}" if FAMILY == "hub" else [],
    output:
        model=directory(BASE_MODEL_DIR),
    log:
        f"{LOGS}/base_model/{{size}}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        settings=settings_digest("seed", "models", "warmup", "prompt"),
        accuracy=base_model_args(),
    threads: BASE_MODEL_THREADS
    resources:
        **job_resources("base_model"),
    conda:
        "../environment.yml"
    shell:
        "hara base-model --config {params.config:q} --size {wildcards.size:q} --data {params.data:q}"
        " --out {output.model:q} {params.accuracy} > {log:q} 2>&1"

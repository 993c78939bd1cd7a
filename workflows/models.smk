# The "Base" model of each size: tiny family = build + SFT warm-up; hub family = copy of the local snapshot.


rule base_model:
    input:
        manifest=rules.prepare_data.output.manifest,
    output:
        model=directory(f"{RESULTS}/base_model/{{size}}"),
    log:
        f"{LOGS}/base_model/{{size}}.log",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: os.path.dirname(input.manifest),
        settings=settings_digest("seed", "models", "warmup"),
    threads: THREADS
    resources:
        mem_mb=resource("base_model", "mem_mb"),
        runtime=resource("base_model", "runtime"),
        gpu=resource("base_model", "gpu"),
    conda:
        "../environment.yml"
    shell:
        "hara base-model --config {params.config:q} --size {wildcards.size:q} --data {params.data:q}"
        " --out {output.model:q} > {log:q} 2>&1"

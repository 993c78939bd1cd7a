# Training set and benchmarks as local JSON Lines files (synthetic, champ, or the fetched hub folders).


rule prepare_data:
    output:
        manifest=f"{RESULTS}/data/manifest.json",
        train=f"{RESULTS}/data/train.jsonl",
        benchmarks=expand(f"{RESULTS}/data/benchmarks/{{benchmark}}.jsonl", benchmark=BENCHMARKS),
    log:
        f"{LOGS}/prepare_data/data.log",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: os.path.dirname(output.manifest),
        settings=settings_digest("seed", "data"),
    threads: 1
    resources:
        mem_mb=resource("prepare_data", "mem_mb"),
        runtime=resource("prepare_data", "runtime"),
        gpu=resource("prepare_data", "gpu"),
    conda:
        "../environment.yml"
    shell:
        "hara data --config {params.config:q} --out {params.out:q} > {log:q} 2>&1"

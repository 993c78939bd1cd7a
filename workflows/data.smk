# Training set and benchmarks as local JSON Lines files (synthetic, champ, or the fetched hub folders).


# The paper's datasets, downloaded once with `hara fetch-data` (datasets.load_dataset of each dataset's split) into
# data.local_dir. A local rule like download_model: the login node running Snakemake has hub access, compute nodes
# often do not. Only the hub source reaches it; an existing fetch (its manifest) is not repeated.
rule fetch_data:
    input:
        preflight=preflight_gate(),
    output:
        manifest=f"{HUB_DATA}/fetch_manifest.json",
    log:
        f"{LOGS}/fetch_data/fetch_data.log",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: os.path.dirname(output.manifest),
    localrule: True
    threads: 1
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../environment.yml"
    shell:
        "hara fetch-data --config {params.config:q} --out {params.out:q} > {log:q} 2>&1"


rule prepare_data:
    input:
        fetched=rules.fetch_data.output.manifest if FETCH_DATA else [],
        preflight=preflight_gate(),
    output:
        manifest=layout.manifest_path(RESULTS),
        train=f"{DATA_DIR}/train.jsonl",
        benchmarks=expand(f"{DATA_DIR}/benchmarks/{{benchmark}}.jsonl", benchmark=DATA_BENCHMARKS),
        validation=[f"{DATA_DIR}/validation.jsonl"] if SELECTION else [],
    log:
        f"{LOGS}/prepare_data/data.log",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: os.path.dirname(output.manifest),
        # report.speed's benchmark is drawn too, and kept out of the training problems
        settings=settings_digest("seed", "data", speed=SPEED),
        held_out=HELD_OUT,
    threads: 1
    resources:
        **job_resources("prepare_data"),
    conda:
        "../environment.yml"
    shell:
        "hara data --config {params.config:q} --out {params.out:q} > {log:q} 2>&1"

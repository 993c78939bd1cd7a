# Optuna sweeps (config `sweeps`: study files, e.g. sweeps/alpha.yaml; included by the Snakefile only when the list
# is not empty). Per study: N worker jobs (one Slurm job each) share the study's Optuna journal until its trial budget
# is spent, then one summary job writes results/sweeps/<study>/ (sensitivity figures, best params, summary.json),
# which the report shows as its "Sweeps" section. A failed or preempted worker job is simply rerun: the study
# continues, the interrupted trial is marked FAIL.


wildcard_constraints:
    sweep=alternatives(SWEEPS),
    worker=r"\d+",


rule sweep_worker:
    input:
        store=rules.tracking_store.output.store,
        base_model=lambda wildcards: BASE_MODEL_DIR.format(size=SWEEPS[wildcards.sweep].size),
    output:
        done=f"{SWEEP_DIR}/jobs/worker{{worker}}.json",
    log:
        f"{LOGS}/sweep_worker/{{sweep}}/worker{{worker}}.log",
    params:
        config=CONFIG_FILE,
        study=lambda wildcards: SWEEPS[wildcards.sweep].file,
        settings=lambda wildcards: SWEEPS[wildcards.sweep].digest,
    threads: THREADS
    resources:
        **sweep_worker_resources(),
    conda:
        "../environment.yml"
    shell:
        "hara sweep run --study {params.study:q} --config {params.config:q} --workers 1"
        " --base-model {input.base_model:q} --out {output.done:q} > {log:q} 2>&1"


rule sweep_summary:
    input:
        workers=lambda wildcards: expand(
            f"{SWEEP_DIR.format(sweep=wildcards.sweep)}/jobs/worker{{worker}}.json",
            worker=range(SWEEPS[wildcards.sweep].workers),
        ),
    output:
        summary=SWEEP_SUMMARY,
        best=f"{SWEEP_DIR}/{layout.BEST_PARAMS}",
        history=f"{SWEEP_DIR}/history.png",
    log:
        f"{LOGS}/sweep_summary/{{sweep}}.log",
    params:
        config=CONFIG_FILE,
        study=lambda wildcards: SWEEPS[wildcards.sweep].file,
    threads: 1
    resources:
        **job_resources("report"),
    conda:
        "../environment.yml"
    shell:
        "hara sweep report --study {params.study:q} --config {params.config:q} > {log:q} 2>&1"

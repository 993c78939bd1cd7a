# The site's checks before a cluster run spends anything (cluster.gates; `hara preflight`, docs/cluster.md): every
# rule without an input of its own waits for its report. A local rule on the login node, like the downloads: it reads
# sinfo / scontrol and submits its compute-node checks (compiler, tracking server) as one tiny Slurm job. The
# profile's set-resources entry for it names the GPU jobs' partition, which it checks.


rule preflight:
    output:
        report=PREFLIGHT_REPORT,
    log:
        f"{LOGS}/preflight/preflight.log",
    params:
        config=CONFIG_FILE,
        site=preflight_args,
    localrule: True
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../environment.yml"
    shell:
        "hara preflight --config {params.config:q}{params.site} --out {output.report:q} > {log:q} 2>&1"

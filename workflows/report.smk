# The paper's tables and training-dynamics figures over every grid cell, as HTML + Markdown, logged to MLflow.


rule report:
    input:
        scores=cell_paths(EVAL_SCORES),
        selections=selection_paths(),
        base_scores=base_score_paths(),
        finals=cell_paths(RUN_FINAL),
        analyses=ANALYSIS_JSONS,  # workflows/analyses.smk: [] unless config analyses.enabled
        sweeps=SWEEP_TARGETS,  # workflows/sweeps.smk: the studies' summaries, [] unless config sweeps lists some
    output:
        html=REPORT_PAGE,
        markdown=REPORT_MARKDOWN,
    log:
        f"{LOGS}/report/report.log",
    params:
        config=CONFIG_FILE,
        # derived from the job's files, as Snakemake's lint asks of a prefix of them (tests/workflow/test_dag.py)
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.html)),
        out=lambda wildcards, output: os.path.dirname(output.html),
    threads: 1
    resources:
        **job_resources("report"),
    conda:
        "../environment.yml"
    shell:
        "hara report --config {params.config:q} --results {params.results:q} --out {params.out:q} > {log:q} 2>&1"

# The paper's tables and training-dynamics figures over every grid cell, as HTML + Markdown, logged to MLflow.


rule report:
    input:
        scores=cell_paths(f"{EVAL_DIR}/scores.json"),
        selections=selection_paths(),
        base_scores=base_score_paths(),
        finals=cell_paths(f"{RUN_DIR}/final"),
        analyses=ANALYSIS_JSONS,  # workflows/analyses.smk: [] unless config analyses.enabled
        sweeps=SWEEP_TARGETS,  # workflows/sweeps.smk: the studies' summaries, [] unless config sweeps lists some
    output:
        html=f"{REPORT_DIR}/index.html",
        markdown=f"{REPORT_DIR}/report.md",
    log:
        f"{LOGS}/report/report.log",
    params:
        config=CONFIG_FILE,
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.html)),
        out=lambda wildcards, output: os.path.dirname(output.html),
    threads: 1
    resources:
        **job_resources("report"),
    conda:
        "../environment.yml"
    shell:
        "hara report --config {params.config:q} --results {params.results:q} --out {params.out:q} > {log:q} 2>&1"

"""benchmarks/bench_reproduce.py: job times read back from a Snakemake log, the scoring-rule memo and the warm-up
thread comparison."""

import json

import torch

from tests.benchmarks.scripts import load_benchmark

#: The shape of a Snakemake 9 log: a stamp, the job's block, then a stamp before each "Finished jobid" line.
LOG = """Building DAG of jobs...
[Thu Dec  3 08:03:57 2026]
localrule prepare_data:
    output: results/data/manifest.json
    jobid: 6
Shell command: None
[Thu Dec  3 08:03:57 2026]
Finished jobid: 6 (Rule: prepare_data)
1 of 4 steps (25%) done
[Thu Dec  3 08:03:58 2026]
rule base_model:
    input: results/data/manifest.json
    jobid: 5
    threads: 2
[Thu Dec  3 08:09:25 2026]
Finished jobid: 5 (Rule: base_model)
[Thu Dec  3 08:09:25 2026]
rule train:
    jobid: 13
[Thu Dec  3 08:09:26 2026]
rule train:
    jobid: 14
[Thu Dec  3 08:11:20 2026]
Finished jobid: 14 (Rule: train)
[Thu Dec  3 08:11:25 2026]
Finished jobid: 13 (Rule: train)
"""


def test_job_times_pair_each_job_with_its_own_finish():
    bench = load_benchmark("bench_reproduce")
    times = bench.job_times(LOG)
    assert times == {"prepare_data": [0.0], "base_model": [327.0], "train": [114.0, 120.0]}
    assert bench.dag_wall_seconds(LOG) == 448.0


def test_the_benchmark_prints_stage_times_and_the_warmup_ratio(tmp_path, capsys, tiny_base):
    bench = load_benchmark("bench_reproduce")
    log = tmp_path / "run.snakemake.log"
    log.write_text(LOG, encoding="utf-8")
    scores = tmp_path / "scores.json"
    predictions = [{"gold": "7/4", "completions": [r"\boxed{1.75}", r"so \boxed{1.75}", "no box", r"\boxed{2}"]}]
    scores.write_text(json.dumps({"benchmarks": {"mini": {"predictions": predictions}}}), encoding="utf-8")
    try:
        results = bench.main(
            [
                "--warmup-steps",
                "2",
                "--repeats",
                "1",
                "--snakemake-log",
                str(log),
                "--scores",
                str(scores),
                "--model",
                str(tiny_base),
                "--problems",
                "3",
            ]
        )
    finally:
        torch.set_num_threads(1)
    out = capsys.readouterr().out
    assert results["warmup_threads"] == 2 and results["warmup_speedup_vs_1_thread"] > 0
    assert results["dag_wall_s"] == 448.0 and results["job_s"] == 561.0 and results["reward_pairs"] == 3
    assert results["generation_speedup_vs_sdpa"] > 0 and "12 completions, sdpa:" in out
    assert "warm-up 2 steps on 1 thread(s)" in out and "warm-up 2 steps on 2 thread(s)" in out
    assert out.splitlines()[-1].startswith("dag_wall_s=448.00 job_s=561.00 reward_pairs=3 ")
    assert " generation_tokens_per_s=" in out.splitlines()[-1]

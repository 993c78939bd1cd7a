"""The workflow's DAG without running it: the paper grid's job counts, GPU resources under the Slurm profile, lint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from hara.config import load_config, validate_config
from hara.planning import slurm_resources
from hara.rlvr.presets import PRESETS
from tests.helpers import REPO, merged, read
from tests.workflow.conftest import job_counts, snakemake

PAPER = REPO / "config" / "paper.yaml"


def expected_counts(config: dict) -> dict[str, int]:
    """Jobs per rule implied by the config: one train and one evaluate job per grid cell (the evaluate job also
    selects the run's checkpoint with selection on: no job of its own), one Base model and its evaluation per size."""
    grid, sizes = config["grid"], config["models"]["sizes"]
    cells = len(sizes) * len(grid["rlvr"]) * len(grid["methods"]) * len(grid["seeds"])
    counts = {
        "prepare_data": 1,
        "tracking_store": 1,
        "base_model": len(sizes),
        "evaluate_base": len(sizes),
        "train": cells,
        "evaluate": cells,
        "report": 1,
        "all": 1,
    }
    if config["models"]["family"] == "hub":
        counts["download_model"] = len(sizes)  # one snapshot download per size; the tiny family builds its own
    if config["data"]["source"] == "hub":
        counts["fetch_data"] = 1  # `hara fetch-data`, a local rule before prepare_data
    if config["cluster"]["gates"]:
        counts["preflight"] = 1  # `hara preflight`, before every rule without an input of its own
        counts["base_sanity"] = len(sizes)  # the Base model's sanity, before any training job of its size
    return counts


def paper_config() -> dict:
    return load_config(PAPER, skip_checks=("check_local_folders",))


def output_of(proc) -> str:
    return proc.stdout + proc.stderr


DEFAULT = str(REPO / "config" / "default.yaml")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The output of ``snakemake -n -p --configfile FILES``, run once per list of files in this module: the printed
    commands change no job, so one run serves the tests that count jobs and those that read commands (each dry run
    of the paper grid is a Snakemake process building a DAG of 400 jobs)."""
    workdir, outputs = tmp_path_factory.mktemp("dry_run"), {}

    def run(*configfiles: str) -> str:
        if configfiles not in outputs:
            outputs[configfiles] = output_of(snakemake(workdir, "-n", "-p", "--configfile", *configfiles))
        return outputs[configfiles]

    return run


def test_paper_dry_run_lists_the_full_grid(dry_run):
    config = paper_config()
    assert job_counts(dry_run(str(PAPER))) == expected_counts(config)
    assert expected_counts(config)["train"] == 3 * 3 * 7 * 3  # sizes x rlvr x methods x seeds of the paper


def test_parsing_the_workflow_imports_no_torch(tmp_path):
    """Snakemake parses the Snakefile in every process it starts: the DAG's, and twice per Slurm job (the job
    script's and its job step's). With the analyses off that parse needs no torch (1.2 of its 2.6 CPU seconds when
    the analyses' plan imported hara.ot for the FGW variants' alphas)."""
    proc = snakemake(tmp_path, "-n", "--configfile", str(PAPER), env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", proc.stderr, re.MULTILINE)
    assert "snakemake.workflow" in imported  # the import log is there
    assert [name for name in imported if name.split(".")[0] == "torch"] == []


def job_blocks(output: str, rule: str) -> list[str]:
    """The dry run's description block of every job of ``rule``."""
    blocks = re.split(r"\n(?=\[[A-Z][a-z]{2} )", output)
    return [b for b in blocks if re.search(rf"^(local)?rule {rule}:", b, re.MULTILINE)]


def gpus_of(block: str) -> int:
    match = re.search(r"resources:.*\bgpu=(\d+)", block)
    return int(match.group(1)) if match else 0


def test_slurm_profile_dry_run_requests_gpus_for_train_and_evaluate(tmp_path):
    """With a sweep of a paper size too: its worker jobs hold a training job's GPU and that size's runtime per trial
    (before, a per-size runtime times the trial count stopped the DAG with a TypeError)."""
    study = tmp_path / "alpha_1.7b.yaml"
    study.write_text(
        (REPO / "sweeps" / "alpha.yaml")
        .read_text(encoding="utf-8")
        .replace("base_config: ../config/default.yaml", f"base_config: {PAPER}")
        .replace("size: tiny-s", "size: qwen3-1.7b")
    )
    proc = snakemake(
        tmp_path,
        "-n",
        "-p",
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "--configfile",
        str(PAPER),
        "--config",
        f"sweeps=[{study}]",
    )
    output = output_of(proc)
    config = paper_config()
    workers = job_blocks(output, "sweep_worker")
    # alpha.yaml: 3 points (2 values + the reference) x 3 seeds = 9 training runs over 2 workers: 5 each at most
    runtime = slurm_resources(config)["train"]["runtime"]["qwen3-1.7b"] * 5  # paper.yaml: `plan`
    assert len(workers) == 2 and all(gpus_of(b) == 1 and resources_of(b)["runtime"] == str(runtime) for b in workers)
    cells = expected_counts(config)["train"]
    for rule, jobs in (("train", cells), ("evaluate", cells), ("evaluate_base", len(config["models"]["sizes"]))):
        blocks = job_blocks(output, rule)
        assert len(blocks) == jobs
        assert all(gpus_of(b) >= 1 for b in blocks), rule
    # a training job holds models.train_gpus[size] GPUs, runs one process per GPU and asks what `hara plan` plans
    planned = slurm_resources(config)["train"]
    for block in job_blocks(output, "train"):
        size = re.search(r"wildcards: size=([^,\s]+)", block).group(1)
        gpus = config["models"]["train_gpus"].get(size, 1)
        assert gpus_of(block) == gpus and f"--processes {gpus} " in block, size
        asked = resources_of(block)
        assert (asked["mem_mb"], asked["runtime"]) == (str(planned["mem_mb"][size]), str(planned["runtime"][size]))
    assert {gpus_of(b) for b in job_blocks(output, "train")} == {2, 4, 8}
    for rule in ("prepare_data", "base_model", "report"):
        blocks = job_blocks(output, rule)
        assert blocks and all(gpus_of(b) == 0 for b in blocks), rule


def site_profile(tmp_path: Path) -> Path:
    """profiles/slurm with its site example filled in (the commented default-resources / set-resources block)."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text(encoding="utf-8")
    example = re.search(r"^# default-resources:.*", text, re.MULTILINE | re.DOTALL).group(0)
    filled = text.replace(example, "\n".join(line[2:] for line in example.splitlines()))
    profile = tmp_path / "site_profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(filled, encoding="utf-8")
    return profile


def test_the_profiles_site_example_keeps_cpu_jobs_off_the_gpu_partition_and_pins_one_gpu_model(tmp_path):
    """Before: the example's partition and `a100|h100` constraint sat in default-resources, so CPU-only jobs asked
    a GPU partition with a GPU constraint (refused at some sites, and each refusal was a failed job) and a method
    and its baseline could land on different cards. Also: keep-going, and jobs at a documented site limit."""
    profile = site_profile(tmp_path)
    settings = yaml.safe_load((profile / "config.yaml").read_text(encoding="utf-8"))
    assert settings["keep-going"] is True and settings["jobs"] <= 50 and settings["slurm-status-command"] == "sacct"
    output = output_of(snakemake(tmp_path, "-n", "-p", "--profile", str(profile), "--configfile", str(PAPER)))
    rules = set(re.findall(r"^rule (\w+):", output, re.MULTILINE)) - {"all"}
    gpu_rules = {rule for rule in rules if any(gpus_of(b) for b in job_blocks(output, rule))}
    assert gpu_rules and gpu_rules <= set(settings["set-resources"]), gpu_rules - set(settings["set-resources"])
    for rule in rules:
        for block in job_blocks(output, rule):
            res = resources_of(block)
            if rule in gpu_rules:
                assert (res["slurm_partition"], res["constraint"]) == ("gpu", "h100"), rule
            elif rule == "preflight":  # a local rule checking the GPU partition, where it sends its node job
                assert res["slurm_partition"] == "gpu" and "constraint" not in res
            else:
                assert res["slurm_partition"] == "cpu" and "constraint" not in res, rule
            assert res["slurm_account"] == "my-project", rule
    assert_gates(output, "--account my-project --partition gpu --jobs 50")


def assert_gates(output: str, site_args: str) -> None:
    """cluster.gates: `hara preflight` with the profile's account, partition and jobs, and every rule without an
    input of its own waits for its report; every training job waits for its size's Base-model sanity check."""
    (block,) = job_blocks(output, "preflight")
    assert f"hara preflight --config results/workflow_config.yaml {site_args} --out" in block
    for rule in ("fetch_data", "download_model", "tracking_store", "prepare_data"):
        blocks = job_blocks(output, rule)
        assert blocks and all("results/preflight/preflight.txt" in b.split("output:")[0] for b in blocks), rule
    for block in job_blocks(output, "train"):
        size = re.search(r"wildcards: size=([^,\s]+)", block).group(1)
        assert f"results/eval/{size}/base/sanity.json" in block.split("output:")[0], size


def resources_of(block: str) -> dict[str, str]:
    line = re.search(r"^\s*resources: (.*)$", block, re.MULTILINE).group(1)
    return dict(item.split("=", 1) for item in line.split(", "))


def test_slurm_gpu_jobs_hold_one_node_one_task_and_their_cpus_with_memory_and_time_per_size(tmp_path):
    """Before: an 8-GPU job could be spread over nodes, got one task per GPU with `threads` CPUs in all while each
    of its 8 processes sets `threads` torch threads, and every size asked for the same memory and 48 h."""
    proc = snakemake(tmp_path, "-n", "-p", "--profile", str(REPO / "profiles" / "slurm"), "--configfile", str(PAPER))
    output, config = output_of(proc), paper_config()
    per_size = {}
    for rule in ("train", "evaluate"):
        for block in job_blocks(output, rule):
            size = re.search(r"wildcards: size=([^,\s]+)", block).group(1)
            res = resources_of(block)
            gpus = int(res["gpu"])
            assert (res["nodes"], res["tasks_per_gpu"], int(res["cpus_per_task"])) == (
                "1",
                "0",
                gpus * config["threads"],
            )
            per_size.setdefault(rule, {})[size] = (int(res["mem_mb"]), int(res["runtime"]))
    for rule, sizes in per_size.items():
        small, medium, large = (sizes[s] for s in config["models"]["sizes"])
        # Runtimes are per size too, each covering `hara plan`'s wall time (tests/planning/test_planning.py): 1.7B on its one
        # GPU trains longest.
        assert small[0] < medium[0] < large[0] and len({small[1], medium[1], large[1]}) == 3, (rule, sizes)


def test_hub_base_model_job_copies_the_snapshot_without_measuring_accuracy(dry_run):
    """Before: `hara base-model` measured greedy and sampled accuracy of Qwen3 in fp32 on a GPU-less job's CPU
    (3072 tokens x ~1,500 problems); evaluate_base measures it on a GPU."""
    blocks = job_blocks(dry_run(str(PAPER)), "base_model")
    assert blocks and all("--skip-accuracy" in b for b in blocks)
    tiny = dry_run(DEFAULT)
    assert job_blocks(tiny, "base_model") and not any("--skip-accuracy" in b for b in job_blocks(tiny, "base_model"))


def test_embedded_configs_request_no_gpu(dry_run):
    output = dry_run(DEFAULT)
    blocks = job_blocks(output, "train")
    assert blocks and all(gpus_of(b) == 0 for b in blocks)
    assert not job_blocks(output, "download_model")  # the CPU path never downloads a model
    assert not job_blocks(output, "preflight")  # nor checks a site


def test_seeds_overlay_and_sweeps_add_only_their_jobs(tmp_path):
    """config/seeds.yaml after the default: none and hara_tok get seeds 1 and 2 in every preset, hara_seq keeps one.
    `--config 'sweeps=[...]'` (docs/sweeps.md): one worker job per study worker and one summary, read by the report."""
    output = output_of(
        snakemake(
            tmp_path,
            "-n",
            "--configfile",
            str(REPO / "config" / "default.yaml"),
            str(REPO / "config" / "seeds.yaml"),
            "--config",
            "sweeps=[sweeps/smoke.yaml, sweeps/alpha.yaml]",
        )
    )
    counts = job_counts(output)
    assert counts["train"] == counts["evaluate"] == 9 + 3 * 2 * 2
    selecting = [block for block in job_blocks(output, "evaluate") if "/selection.json" in block]
    assert len(selecting) == counts["evaluate"] and "select_checkpoint" not in counts  # selection: in the evaluate job
    trained = set(re.findall(r"output: results/train/tiny-s/(\w+)/(\w+)/seed(\d+)/final\n", output))
    assert {(method, seed) for _, method, seed in trained} == {
        ("none", "0"),
        ("none", "1"),
        ("none", "2"),
        ("hara_seq", "0"),
        ("hara_tok", "0"),
        ("hara_tok", "1"),
        ("hara_tok", "2"),
    }
    assert counts["sweep_worker"] == 2 + 2 and counts["sweep_summary"] == 2  # smoke: 2 workers, alpha (sensitivity): 2
    report = job_blocks(output, "report")[0]
    assert "results/sweeps/smoke/summary.json" in report and "results/sweeps/alpha/summary.json" in report


def test_control_levels_overlay_trains_none_and_the_oracle_on_level_4_5_prompts_in_its_own_folder(tmp_path):
    """config/control_levels.yaml after the default and the control: GRPO only, none and oracle_steps over three
    seeds, the candidate world's warm-up, skills and prompt levels, under results/control_levels."""
    output = output_of(
        snakemake(
            tmp_path,
            "-n",
            "--configfile",
            str(REPO / "config" / "default.yaml"),
            str(REPO / "config" / "control.yaml"),
            str(REPO / "config" / "control_levels.yaml"),
        )
    )
    assert job_counts(output)["train"] == 2 * 3
    trained = set(re.findall(r"output: results/control_levels/train/tiny-s/(\w+)/(\w+)/seed(\d+)/final\n", output))
    assert trained == {("grpo", method, seed) for method in ("none", "oracle_steps") for seed in "012"}
    raw = merged(
        merged(read(REPO / "config" / "default.yaml"), read(REPO / "config" / "control.yaml")),
        read(REPO / "config" / "control_levels.yaml"),
    )
    config = validate_config(raw, source="control_levels")
    assert config["training"]["prompt_selection"]["levels"] == [4, 5] and config["warmup"]["direct_fraction"] == 0


def test_control_overlay_trains_the_oracle_beside_none_and_hara_tok_in_its_own_folder(dry_run):
    """config/control.yaml after the default: none, hara_tok and oracle_steps over three seeds in every preset, under
    results/control (the default's results and tracking store are left alone)."""
    output = dry_run(DEFAULT, str(REPO / "config" / "control.yaml"))
    assert job_counts(output)["train"] == 3 * 3 * 3
    trained = set(re.findall(r"output: results/control/train/tiny-s/(\w+)/(\w+)/seed(\d+)/final\n", output))
    assert {(method, seed) for _, method, seed in trained} == {
        (method, seed) for method in ("none", "hara_tok", "oracle_steps") for seed in "012"
    }


def test_the_speed_endpoint_adds_its_benchmark_and_files_and_nothing_else(tmp_path, dry_run):
    """report.speed on the control overlay, naming a benchmark that data.benchmarks does not list: the data job writes
    it, every evaluate job declares speed.json and passes --speed-out, the report reads them; the evaluate jobs still
    evaluate only data.benchmarks, and no job is added."""
    overlay = tmp_path / "speed.yaml"
    overlay.write_text(
        "data: {benchmarks: [mini_math500, mini_minerva]}\nreport: {speed: {benchmark: mini_aime24, problems: 40}}\n"
    )
    configs = [DEFAULT, str(REPO / "config" / "control.yaml")]
    output = output_of(snakemake(tmp_path, "-n", "-p", "--configfile", *configs, str(overlay)))
    assert job_counts(output) == job_counts(dry_run(*configs))
    (data,) = job_blocks(output, "prepare_data")
    assert "results/control/data/benchmarks/mini_aime24.jsonl" in data
    evaluations = job_blocks(output, "evaluate")
    assert len(evaluations) == 27
    for block in evaluations:
        speed = re.search(r"output: .*(results/control/eval/\S+/speed\.json)", block).group(1)
        assert f"--speed-out {speed}" in block and "--benchmark mini_aime24" not in block
    (report,) = job_blocks(output, "report")
    assert re.search(r"input: .*", report).group(0).count("/speed.json") == 27


def test_bare_slurm_profile_name_resolves_from_the_repository_root(monkeypatch):
    from snakemake.cli import get_profile_dir

    monkeypatch.chdir(REPO)  # the README's `snakemake --profile slurm`, looked up the way Snakemake 9 does
    _, config_file = get_profile_dir("slurm")
    assert config_file.resolve() == REPO / "profiles" / "slurm" / "config.yaml"


def test_lint_reports_nothing(tmp_path):
    proc = snakemake(tmp_path, "--lint", "--configfile", str(REPO / "config" / "smoke.yaml"), check=False)
    output = output_of(proc)
    assert proc.returncode == 0, output
    assert "Lints for" not in output and "Congratulations" in output, output


def test_bad_config_stops_with_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {methods: [none, not_a_method]}\n", encoding="utf-8")
    proc = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    assert "grid.methods[1]" in output_of(proc)


def test_grid_schema_enums_match_the_registries():
    """The presets are an enum of the schema; the methods and benchmarks are checked against their registries
    instead (plug-ins add names: tests/test_methods.py), so the schema lists none."""
    from hara.config import load_schema

    schema = load_schema()["properties"]
    grid = schema["grid"]["properties"]
    assert sorted(grid["rlvr"]["items"]["enum"]) == sorted(PRESETS.names())
    assert "enum" not in grid["methods"]["items"]
    # benchmarks: checked against the benchmark registry (hara/data/catalog.py, tests/evaluation/test_benchmark_registry.py)
    assert "enum" not in schema["data"]["properties"]["benchmarks"]["items"]


def test_base_model_job_holds_the_warmup_threads(tmp_path):
    """The tiny warm-up runs on warmup.threads torch threads, so its job must hold that many cores (before: the
    run's `threads`, 1, and the warm-up ran beside another job on the second core)."""
    overlay = tmp_path / "warmup_threads.yaml"
    overlay.write_text("warmup: {threads: 2}\n", encoding="utf-8")
    output = output_of(snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / "default.yaml"), str(overlay)))
    blocks = job_blocks(output, "base_model")
    assert blocks and all(re.search(r"^\s*threads: 2$", b, re.MULTILINE) for b in blocks)
    assert not re.search(r"^\s*threads:", job_blocks(output, "train")[0], re.MULTILINE)  # the run's threads: 1


def test_the_cheapest_design_with_power_is_an_overlay_the_paper_dag_runs(tmp_path, capsys):
    """`hara plan --design`: every primary endpoint at >= 80% power at the paper's effect, at or under the
    configured grid's device-hours, and its overlay accepted by the paper DAG's dry run with the seeds it says."""
    from hara.cli import main

    overlay = tmp_path / "design.yaml"
    assert (
        main(["plan", "--config", str(PAPER), "--design", "--overlay", str(overlay), "--out", str(tmp_path / "p")]) == 0
    )
    printed = capsys.readouterr().out
    design = json.loads((tmp_path / "p").read_text())["power"]["design"]
    assert design["feasible"] and design["total"] <= design["configured"]
    assert "Design: the cheapest grid whose primary endpoints detect the paper's effects" in printed
    assert {row["claim"] for row in design["primaries"]} == {"gain_vs_grpo", "gain_vs_credit"}
    assert min(row["power"] for row in design["primaries"]) >= 0.8
    seeds = design["seeds"]
    proc = snakemake(tmp_path, "-n", "--configfile", str(PAPER), str(overlay))
    assert job_counts(output_of(proc))["train"] == 3 * 3 * sum(seeds.values())

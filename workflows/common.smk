# The only workflow file with Python definitions: paths, grid expansion, input functions, resources, quoting.
# The config is already validated and default-filled by the Snakefile (hara.config); rules read it only through
# the names defined here.

import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex

import yaml

from hara import layout
from hara.data.pipeline import data_benchmarks
from hara.analysis.workflow import (
    analysis_gpu,
    analysis_inputs,
    analysis_methods,
    analysis_names,
    analysis_outputs,
    analysis_runs,
    enabled_analyses,
    override_args,
    study_run_dir,
)
from hara.sweeps.workflow import sweep_plans

RESULTS = config["results_dir"]
LOGS = "logs"
THREADS = config["threads"]
FAMILY = config["models"]["family"]
# The tiny family's warm-up has its own thread count (it runs alone: every later job needs its model).
BASE_MODEL_THREADS = config["warmup"]["threads"] if FAMILY == "tiny" else THREADS
SIZES = config["models"]["sizes"]
GRID = config["grid"]
BENCHMARKS = config["data"]["benchmarks"]
TRACKING_URI = config["tracking"]["mlflow_uri"]
METHODS = [*GRID["methods"], *analysis_methods(config)]  # the grid's + the analyses' extra methods
HUB_DATA = config["data"]["local_dir"]  # the paper's datasets, fetched once (hub source)
FETCH_DATA = config["data"]["source"] == "hub"
MODEL_SNAPSHOTS = config["models"]["local_dir"]  # hub snapshots of the policy models
HUB_IDS = config["models"]["hub_ids"]
SELECTION = config["selection"]["enabled"]  # checkpoint selection on a validation split held out of training
HELD_OUT = config["selection"]["validation_problems"] if SELECTION else 0
# Speed as an endpoint (report.speed): every candidate also scored on this benchmark (None: off); the data stage
# writes it even when data.benchmarks does not list it (hara.data.pipeline.data_benchmarks).
SPEED = config["report"]["speed"]["benchmark"]
SPEED_SETTINGS = config["report"]["speed"] if SPEED else None
DATA_BENCHMARKS = data_benchmarks(config)
SELECT_PROMPTS = config["training"]["prompt_selection"]["enabled"]
LABELLING = config["analyses"]["interpretability"]

# The results layout (hara.layout) as wildcard patterns: one run folder per grid cell, the Base model's evaluation of
# a size before RL (the report's "base" row).
CELL = layout.CELL
RUN_DIR = f"{RESULTS}/{layout.TRAIN}"
EVAL_DIR = f"{RESULTS}/{layout.EVAL}"
BASE_EVAL_DIR = f"{RESULTS}/{layout.BASE_EVAL_DIR}"
REPORT_DIR = f"{RESULTS}/{layout.REPORT}"
PROMPTS_DIR = f"{RESULTS}/{layout.PROMPTS}"  # the RL prompts of a size, selected once (select_prompts)
DATA_DIR = f"{RESULTS}/{layout.DATA}"
BASE_MODEL_DIR = f"{RESULTS}/{layout.BASE_MODEL}"
# The stage files that rules name (hara.layout's file names below those folders).
RUN_FINAL = f"{RUN_DIR}/{layout.FINAL_DIR}"  # a run's trained model: rule train's declared output
EVAL_SCORES = f"{EVAL_DIR}/{layout.SCORES_FILE}"
BASE_SCORES = f"{BASE_EVAL_DIR}/{layout.SCORES_FILE}"
BASE_SANITY = f"{BASE_EVAL_DIR}/{layout.SANITY_FILE}"
REPORT_PAGE = f"{REPORT_DIR}/{layout.REPORT_HTML}"
REPORT_MARKDOWN = f"{REPORT_DIR}/{layout.REPORT_MD}"


# Gates of a cluster run (cluster.gates): `hara preflight` before every first rule, the Base models' sanity before
# training. Read through ancient(): a rerun gate never makes the jobs behind it look outdated.
GATES = config["cluster"]["gates"]
PREFLIGHT_REPORT = f"{RESULTS}/preflight/preflight.txt"


def preflight_gate():
    """The preflight report as an input of a rule with no other input (nothing without cluster.gates)."""
    return ancient(PREFLIGHT_REPORT) if GATES else []


def base_sanity_gate(wildcards):
    """The Base model's sanity summary of a training job's size (workflows/evaluate.smk; nothing without
    cluster.gates)."""
    return ancient(BASE_SANITY.format(size=wildcards.size)) if GATES else []


def preflight_args(wildcards, resources):
    """`hara preflight`'s site options: the account and partition its resources name (the profile's), the jobs
    Snakemake runs at once (the runs in flight that the disk check counts)."""
    options = {
        "--account": resources.get("slurm_account"),
        "--partition": resources.get("slurm_partition"),
        "--jobs": workflow.resource_settings.nodes,
    }
    return "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in options.items() if value)


def alternatives(values):
    """A wildcard regex matching exactly these names (so a path can never match the wrong rule)."""
    return "|".join(sorted((re.escape(str(value)) for value in values), key=len, reverse=True))


def cell_paths(pattern):
    """``pattern`` (with the cell wildcards) filled for every grid cell (hara.layout.grid_cells)."""
    return [pattern.format(**dataclasses.asdict(cell)) for cell in layout.grid_cells(config)]


def final_targets():
    """The DAG's targets: the report and every evaluation. Listing the evaluations too makes a deleted scores.json
    a missing target that is rebuilt (Snakemake does not rebuild a missing input of an up-to-date report), and the
    new file then reruns the report."""
    return [
        REPORT_PAGE,
        REPORT_MARKDOWN,
        *cell_paths(EVAL_SCORES),
        *selection_paths(),
        *base_score_paths(),
    ]


def selection_outputs():
    """The selection files of a cell's evaluate job (workflows/evaluate.smk), when selection.enabled; the candidates'
    speed scores too when report.speed names a benchmark."""
    if not SELECTION:
        return {}
    files = {
        "selection": f"{EVAL_DIR}/{layout.SELECTION_FILE}",
        "selected_scores": f"{EVAL_DIR}/{layout.SELECTED_SCORES}",
    }
    return files | ({"speed": f"{EVAL_DIR}/{layout.SPEED_SCORES}"} if SPEED else {})


#: `hara evaluate`'s flag of each selection file a job declares.
SELECTION_FLAGS = {"selection": "--selection-out", "selected_scores": "--selected-scores-out", "speed": "--speed-out"}


def selection_args(wildcards, output):
    """`hara evaluate`'s selection flags for a job that declares the selection files (evaluate_base does not)."""
    declared = output.keys()
    return "".join(
        f" {flag} {shlex.quote(getattr(output, name))}" for name, flag in SELECTION_FLAGS.items() if name in declared
    )


def selection_paths():
    """Each cell's checkpoint selection (workflows/evaluate.smk, the evaluate job) and, with report.speed, its
    candidates' speed scores; none unless selection.enabled."""
    names = ("selection", "speed")
    return [path for name, pattern in selection_outputs().items() if name in names for path in cell_paths(pattern)]


def base_score_paths():
    """The Base models' scores, one per size."""
    return [BASE_SCORES.format(size=size) for size in SIZES]


def _write_if_changed(path, text):
    """Write ``text`` only when it differs, so the file's mtime moves only when the config does."""
    if os.path.isfile(path) and open(path, encoding="utf-8").read() == text:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


# Every `hara` command reads this one resolved file, so Snakemake's --config overrides reach the jobs too.
CONFIG_FILE = f"{RESULTS}/{layout.WORKFLOW_CONFIG}"
_write_if_changed(CONFIG_FILE, yaml.safe_dump(dict(config), sort_keys=False))


def settings_digest(*sections, **values):
    """A short hash of the config sections a stage depends on; used as a param so that changing them (and only
    them) reruns the stage through Snakemake's params trigger, while a grid change reruns nothing. ``values``: single
    settings of other sections it depends on, left out while None, so that a setting added as off changes no digest
    (results made before it stay up to date)."""
    chosen = {name: config[name] for name in sections} | {k: v for k, v in values.items() if v is not None}
    payload = json.dumps(chosen, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def benchmark_args():
    """``--benchmark NAME`` for every benchmark of the config, quoted for the shell."""
    return " ".join(f"--benchmark {shlex.quote(name)}" for name in BENCHMARKS)


# Memory and wall time of each job kind come from the config's `resources` section (per model size where it is a
# table, from `hara plan` where it is `plan`); GPUs from the model family: the tiny family runs on a laptop's CPUs, the hub family's train and
# evaluation jobs hold GPUs (models.train_gpus, evaluation.vllm.tensor_parallel_size). The hub base_model job only
# copies the downloaded snapshot: no GPU, no weights loaded (evaluate_base measures the Base model on a GPU).
GPU_JOBS = {"tiny": set(), "hub": {"train", "evaluate"}}


def train_processes(wildcards):
    """Training processes of one run: on the cluster the GPUs its job holds (models.train_gpus), one process per
    GPU; the tiny family runs training.processes processes on the CPU."""
    if FAMILY == "hub":
        return config["models"]["train_gpus"].get(wildcards.size, 1)
    return config["training"]["processes"]


@functools.cache
def slurm_requests():
    """The config's `resources` with each `plan` value planned (hara.planning.slurm_resources: `hara plan`'s figure
    for the size times its stated factor), computed once per parse."""
    from hara.planning import slurm_resources

    return slurm_resources(config)


def resource(rule_name, key):
    """The resource ``key`` of ``rule_name``: ``gpu`` from the model family (1 = a GPU job), memory and runtime from
    the config or its plan (a function of the wildcards where they depend on the model size)."""
    if key == "gpu":
        return int(rule_name in GPU_JOBS[FAMILY])
    value = slurm_requests()[rule_name][key]
    if not isinstance(value, dict):
        return value
    return lambda wildcards: value.get(job_size(wildcards), max(value.values()))


def resource_of(rule_name, key, wildcards):
    """:func:`resource` for one job's wildcards (a number, whether or not it depends on the size)."""
    value = resource(rule_name, key)
    return value(wildcards) if callable(value) else value


def job_size(wildcards):
    """The model size a job works on: its size wildcard, or its sweep study's size; None for neither."""
    if hasattr(wildcards, "size"):
        return wildcards.size
    return SWEEPS[wildcards.sweep].size if hasattr(wildcards, "sweep") else None


def job_resources(rule_name, gpu=None):
    """Memory and runtime of ``rule_name`` from the config, GPUs from the model family unless given."""
    return {
        "mem_mb": resource(rule_name, "mem_mb"),
        "runtime": resource(rule_name, "runtime"),
        "gpu": resource(rule_name, "gpu") if gpu is None else gpu,
    }


def job_cpus(gpus):
    """CPUs of a job holding ``gpus`` GPUs: one process per GPU with `threads` torch threads each (a CPU job is one
    process). The GPU rules ask for one node and one Slurm task holding all of them (`nodes=1, tasks_per_gpu=0`):
    `hara train` starts its processes itself, through accelerate, and the Slurm plugin would otherwise ask for one
    task per GPU with `threads` CPUs in all."""
    return max(1, gpus) * THREADS


def train_gpus(wildcards):
    """GPUs of a training job: one per training process on the cluster, none for the tiny family."""
    return train_processes(wildcards) if resource("train", "gpu") else 0


def evaluate_gpus(wildcards):
    """GPUs of an evaluation job: the vLLM engine's tensor parallel size on the cluster, none for the tiny family."""
    return config["evaluation"]["vllm"]["tensor_parallel_size"] if resource("evaluate", "gpu") else 0


def gpu_job_resources(rule_name, gpus):
    """The resources of a job that may hold GPUs (train, evaluate and the rules that reuse their setup): memory and
    runtime of ``rule_name``, ``gpus`` (a function of the wildcards), one node and one task with every CPU
    (job_cpus)."""
    return {
        **job_resources(rule_name, gpu=gpus),
        "nodes": 1,
        "tasks_per_gpu": 0,
        "cpus_per_task": lambda wildcards: job_cpus(gpus(wildcards)),
    }


def base_model_args():
    """The hub family's Base model is measured by evaluate_base on a GPU, not by the (CPU) copy job."""
    return "--skip-accuracy" if FAMILY == "hub" else ""


# The paper's analyses (workflows/analyses.smk; hara.analysis.workflow decides which runs and files exist): the extra
# training runs by folder, their path patterns, what each analysis job reads, and every enabled analysis' JSON.
ANALYSIS_RUNS = {study_run_dir(config, run): run for run in analysis_runs(config)}
ANALYSIS_NAMES = analysis_names()  # the analysis registry, hara.analysis.registry
ANALYSIS_DIR = f"{RESULTS}/{layout.ANALYSIS.format(name='{analysis}')}"
ANALYSIS_TRAIN = f"{RESULTS}/{layout.ANALYSIS_TRAIN}"
ANALYSIS_EVAL = f"{RESULTS}/{layout.ANALYSIS_EVAL}"
ANALYSIS_INPUTS = {name: analysis_inputs(config, name) for name in ANALYSIS_NAMES}
ANALYSIS_JSONS = [analysis_outputs(config, name)["json"] for name in enabled_analyses(config)]


def analysis_overrides(wildcards, output):
    """An analysis run's config changes as ``" --set KEY=VALUE ..."`` (the train rule's `overrides` param)."""
    run = ANALYSIS_RUNS[layout.run_of(output.final)]
    return "".join(f" --set {shlex.quote(arg)}" for arg in override_args(config, run))


def analysis_gpus(wildcards):
    """An analysis whose job runs a model (its declaration's gpu) gets an evaluation job's GPUs."""
    return resource("evaluate", "gpu") if analysis_gpu(wildcards.analysis) else 0


# Optuna sweeps (workflows/sweeps.smk, included only when the config lists study files).
SWEEPS = sweep_plans(config["sweeps"], CONFIG_FILE, workflow.basedir) if config["sweeps"] else {}
SWEEP_DIR = f"{RESULTS}/{layout.SWEEP}"
SWEEP_SUMMARY = f"{SWEEP_DIR}/{layout.SUMMARY_FILE}"
SWEEP_TARGETS = [SWEEP_SUMMARY.format(sweep=name) for name in SWEEPS]


def sweep_worker_resources():
    """A sweep worker trains about trials_per_worker trials of its study's model size: a training job's memory and
    GPU, its runtime times that many."""

    def runtime(wildcards):
        return resource_of("train", "runtime", wildcards) * SWEEPS[wildcards.sweep].trials_per_worker

    return job_resources("train") | {"runtime": runtime}

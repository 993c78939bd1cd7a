"""The results layout and the experiment grid: every path one stage writes and another reads, in one place.

The workflow (workflows/common.smk) formats the same patterns with Snakemake wildcards; the report, the analyses,
the sweeps and ``hara train`` call the functions. Below ``results_dir``::

    mlflow_store.json, workflow_config.yaml   the run's MLflow store (rule tracking_store), the resolved config
    data/                                     the data stage: train.jsonl, benchmarks/<name>.jsonl, manifest.json
    base_model/<size>/                        the Base model of a size (hara base-model)
    rl_prompts/<size>/                        the RL prompts of a size (hara select-prompts): prompts.jsonl,
                                              selection.json
    train/<size>/<rlvr>/<method>/seed<k>/     one training run (a grid cell): metrics.jsonl, run_info.json,
                                              resolved_config.yaml, mlflow_run.json, final/, checkpoints/,
                                              candidates/step-<s>/
    eval/<size>/<rlvr>/<method>/seed<k>/      its evaluation: scores.json, selection.json, selected_scores.json,
                                              speed.json (report.speed: the candidates on the speed benchmark)
    eval/<size>/base/                         the Base model's evaluation (the report's "base" row), sanity.json
    analysis/<name>/                          one analysis' <name>.csv, <name>.json and figures (hara analysis)
    analysis/train|eval/<study>/<label>/<cell>/  an analysis' extra training run and its evaluation
    sweeps/<study>/                           one Optuna study: summary.json, trials.csv, best_params.yaml, its
                                              trials' runs (hara sweep)
    report/                                   index.html, report.md, comparisons.json, mlflow_run.json

The file names are the constants below (``METRICS_FILE`` ... ``COMPARISONS``, listed in ``STAGE_FILES``): code names a
stage file only through them (tests/test_layout.py finds a name spelled out anywhere else in hara/ and workflows/).

The grid is ``models.sizes x grid.rlvr x grid.methods x seeds``, where a method's seeds are ``grid.seeds`` plus its
``grid.extra_seeds`` (more seeds where they are cheap, e.g. config/seeds.yaml for none and hara_tok).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ACCURACY_FILE",
    "ANALYSIS",
    "ANALYSIS_EVAL",
    "ANALYSIS_TRAIN",
    "BASE_EVAL",
    "BASE_EVAL_DIR",
    "BASE_MODEL",
    "BEST_PARAMS",
    "CANDIDATE",
    "CANDIDATES_DIR",
    "CELL",
    "CHECKPOINTS_DIR",
    "COMPARISONS",
    "DATA",
    "EVAL",
    "FINAL_DIR",
    "MANIFEST",
    "MANIFEST_FILE",
    "METRICS_FILE",
    "PROMPTS",
    "PROMPTS_FILE",
    "REPORT",
    "REPORT_HTML",
    "REPORT_MD",
    "RESOLVED_CONFIG",
    "RUN_FILE",
    "RUN_INFO",
    "SANITY_FILE",
    "SCORES_FILE",
    "SELECTED_SCORES",
    "SELECTION_FILE",
    "SPEED_SCORES",
    "STAGE_FILES",
    "STORE_FILE",
    "SUMMARY_FILE",
    "SWEEP",
    "SWEEPS",
    "TRAIN",
    "TRIALS_FILE",
    "WARMUP_FILE",
    "WORKFLOW_CONFIG",
    "Cell",
    "analysis_dir",
    "analysis_eval_dir",
    "analysis_train_dir",
    "base_eval_dir",
    "base_model_dir",
    "candidate_dir",
    "candidate_steps",
    "eval_dir",
    "grid_cells",
    "manifest_path",
    "method_seeds",
    "prompts_dir",
    "run_dir",
    "run_of",
    "sweep_dir",
]

#: A grid cell's folder below a stage folder; the MLflow run name (hara.tracking.run_name) has the same fields.
CELL = "{size}/{rlvr}/{method}/seed{seed}"
#: The Base model's evaluation folder of a size, below eval/.
BASE_EVAL = "{size}/base"
#: A candidate checkpoint of checkpoint selection, below a run's candidates/ (the last candidate is final/).
CANDIDATE = "step-{step}"

# The files and folders of a training run (TRAIN; a sweep trial's and an analysis' runs alike).
#: The trained model (rule train's declared output; the last candidate of checkpoint selection).
FINAL_DIR = "final"
#: The trainer's checkpoints (checkpoint-<step>/), what a killed run resumes from.
CHECKPOINTS_DIR = "checkpoints"
#: The candidates of checkpoint selection other than the last (CANDIDATE folders).
CANDIDATES_DIR = "candidates"
#: One JSON line of metrics per logged step (hara.rlvr.metrics_sink writes it, hara.results.collect.read_metrics reads it).
METRICS_FILE = "metrics.jsonl"
#: The command, seed, versions and host of a stage's run (hara.runinfo.write_run_info), beside its resolved config.
RUN_INFO = "run_info.json"
RESOLVED_CONFIG = "resolved_config.yaml"
#: The MLflow run a folder logs into (hara.tracking: a training run's, a sweep trial's, the report's).
RUN_FILE = "mlflow_run.json"

# The files of an evaluation (EVAL, BASE_EVAL_DIR).
#: Every benchmark's scores of a checkpoint (hara evaluate --out).
SCORES_FILE = "scores.json"
#: Checkpoint selection's candidates and choice (hara.evaluation.selection); the RL prompts' selection summary below
#: PROMPTS has the same name (hara.rlvr.prompts).
SELECTION_FILE = "selection.json"
#: The selected checkpoint's scores.
SELECTED_SCORES = "selected_scores.json"
#: A cell's evaluation file of the speed endpoint (config report.speed; hara.evaluation.speed writes it, the report
#: reads it): every candidate checkpoint's per-problem pass@1 on the speed benchmark.
SPEED_SCORES = "speed.json"
#: The Base model's completion checks (hara base-sanity), below BASE_EVAL_DIR.
SANITY_FILE = "sanity.json"

# The other stages' files.
#: The Base model's warm-up record and its accuracy check, beside its weights below BASE_MODEL (hara base-model).
WARMUP_FILE = "warmup.json"
ACCURACY_FILE = "accuracy.json"
#: The data stage's list of its files and their hashes, below DATA.
MANIFEST_FILE = "manifest.json"
#: The selected RL prompts of a size, below PROMPTS.
PROMPTS_FILE = "prompts.jsonl"
#: A sweep's summary, its trials' table and best parameters, below SWEEP.
SUMMARY_FILE = "summary.json"
TRIALS_FILE = "trials.csv"
BEST_PARAMS = "best_params.yaml"
#: The report's page, its Markdown twin and its comparisons (what the MLflow runs' verdict tags come from).
REPORT_HTML = "index.html"
REPORT_MD = "report.md"
COMPARISONS = "comparisons.json"
#: Below results_dir: the MLflow store of the results (rule tracking_store), the config every rule's command reads.
STORE_FILE = "mlflow_store.json"
WORKFLOW_CONFIG = "workflow_config.yaml"
#: Every stage file's (and folder's) name above.
STAGE_FILES = (
    FINAL_DIR,
    CHECKPOINTS_DIR,
    CANDIDATES_DIR,
    METRICS_FILE,
    RUN_INFO,
    RESOLVED_CONFIG,
    RUN_FILE,
    SCORES_FILE,
    SELECTION_FILE,
    SELECTED_SCORES,
    SPEED_SCORES,
    SANITY_FILE,
    WARMUP_FILE,
    ACCURACY_FILE,
    MANIFEST_FILE,
    PROMPTS_FILE,
    SUMMARY_FILE,
    TRIALS_FILE,
    BEST_PARAMS,
    REPORT_HTML,
    REPORT_MD,
    COMPARISONS,
    STORE_FILE,
    WORKFLOW_CONFIG,
)

#: The stage folders below results_dir that a Snakemake pattern or another stage names (a wildcard in braces).
TRAIN = "train/" + CELL
EVAL = "eval/" + CELL
BASE_EVAL_DIR = "eval/" + BASE_EVAL
DATA = "data"
MANIFEST = f"{DATA}/{MANIFEST_FILE}"
BASE_MODEL = "base_model/{size}"
PROMPTS = "rl_prompts/{size}"
SWEEPS = "sweeps"
SWEEP = SWEEPS + "/{sweep}"
REPORT = "report"
#: An analysis' extra training run and its evaluation (a grid cell with overrides, hara.analysis.runs), below
#: results_dir.
ANALYSIS = "analysis/{name}"
ANALYSIS_TRAIN = "analysis/train/{study}/{label}/" + CELL
ANALYSIS_EVAL = "analysis/eval/{study}/{label}/" + CELL


@dataclass(frozen=True)
class Cell:
    """One training run of the grid."""

    size: str
    rlvr: str
    method: str
    seed: int

    def path(self) -> str:
        """The cell's folder below a stage folder (train/, eval/)."""
        return CELL.format(size=self.size, rlvr=self.rlvr, method=self.method, seed=self.seed)


def method_seeds(config: Mapping, method: str) -> list[int]:
    """The seeds a method is trained with: grid.seeds, then its grid.extra_seeds not already there."""
    grid = config["grid"]
    seeds = [int(seed) for seed in grid["seeds"]]
    return seeds + [int(seed) for seed in grid.get("extra_seeds", {}).get(method, []) if int(seed) not in seeds]


def grid_cells(config: Mapping) -> list[Cell]:
    """Every training run of the grid, in report order (sizes, rlvr presets, methods, each method's seeds)."""
    grid = config["grid"]
    return [
        Cell(size, rlvr, method, seed)
        for size, rlvr, method in itertools.product(config["models"]["sizes"], grid["rlvr"], grid["methods"])
        for seed in method_seeds(config, method)
    ]


def run_dir(results: str | Path, cell: Cell) -> Path:
    """A cell's training run folder."""
    return Path(results) / TRAIN.format(**dataclasses.asdict(cell))


def eval_dir(results: str | Path, cell: Cell) -> Path:
    """A cell's evaluation folder."""
    return Path(results) / EVAL.format(**dataclasses.asdict(cell))


def base_eval_dir(results: str | Path, size: str) -> Path:
    """The Base model's evaluation folder of a size."""
    return Path(results) / BASE_EVAL_DIR.format(size=size)


def base_model_dir(results: str | Path, size: str) -> Path:
    """The Base model of a size (the start of every training run of that size)."""
    return Path(results) / BASE_MODEL.format(size=size)


def manifest_path(results: str) -> str:
    """The data stage's manifest (a string, as the workflow's patterns give it)."""
    return f"{results}/{MANIFEST}"


def prompts_dir(results: str | Path, size: str) -> Path:
    """The RL prompts of a size."""
    return Path(results) / PROMPTS.format(size=size)


def sweep_dir(results: str | Path, study: str) -> Path:
    """One Optuna study's folder."""
    return Path(results) / SWEEP.format(sweep=study)


def run_of(final: str) -> str:
    """The run folder holding ``final`` (a run's FINAL_DIR: rule train's declared output, whose command writes the
    whole folder)."""
    if os.path.basename(final) != FINAL_DIR:
        raise ValueError(f"{final}: not a run's {FINAL_DIR}/ folder")
    return os.path.dirname(final)  # the string as given (Path would drop a "./"), as the workflow's patterns make it


def candidate_steps(config: Mapping) -> list[int]:
    """The steps whose checkpoints checkpoint selection compares (``selection.candidates``, hara.evaluation.selection):
    k/candidates of training.steps for k = 1..candidates, rounded to the nearest saved step (a multiple of
    training.save_steps) and at least the first one; the last is training.steps itself (final/). Sorted, no repeats."""
    steps, every = config["training"]["steps"], config["training"]["save_steps"]
    count = config["selection"]["candidates"]
    spread = {min(steps, max(every, round(k * steps / count / every) * every)) for k in range(1, count)}
    return sorted(spread | {steps})


def candidate_dir(run: str | Path, step: int) -> Path:
    """A run's kept checkpoint of ``step`` (a candidate of checkpoint selection other than the last)."""
    return Path(run) / CANDIDATES_DIR / CANDIDATE.format(step=step)


def analysis_dir(results: str, name: str) -> str:
    """The output folder of analysis ``name`` (a string, as the workflow's patterns give it)."""
    return f"{results}/{ANALYSIS.format(name=name)}"


def _analysis_run(pattern: str, results: str, study: str, label: str, cell: Cell) -> str:
    return f"{results}/" + pattern.format(study=study, label=label, **dataclasses.asdict(cell))


def analysis_train_dir(results: str, study: str, label: str, cell: Cell) -> str:
    """An analysis' extra training run folder (a string, as the workflow's patterns give it)."""
    return _analysis_run(ANALYSIS_TRAIN, results, study, label, cell)


def analysis_eval_dir(results: str, study: str, label: str, cell: Cell) -> str:
    """The evaluation folder of an analysis' extra training run."""
    return _analysis_run(ANALYSIS_EVAL, results, study, label, cell)

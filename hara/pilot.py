"""`hara pilot`: the one-node pilot before the grid (docs/cluster.md#the-pilot), and the summary `hara plan
--calibrate` reads.

The pilot runs the paper's DAG through the Slurm profile for a few targets of a small grid (config/pilot.yaml on top
of config/paper.yaml): the Base model's evaluation and its sanity gate for ``--evaluate-base`` sizes, and every
training run of the grid. One training job (the ``--interrupt`` size's first cell) is cancelled with `scancel` once
its first checkpoint is complete; Snakemake's retry (the profile's ``retries``) starts it again and `hara train`
resumes from that checkpoint, the path a preempted or timed-out job takes. Then it writes one JSON summary
(``SUMMARY_FORMAT``):

- ``runs``: per training run, the medians over its steady steps (the first step and the first after a resume pay
  warm-up) of the step time and of each phase's time (``time/<phase>_s``, hara/rlvr/phases.py), each phase's peak
  device memory (``memory/<phase>_peak_gib``, max over the steps; None on a CPU), the mean completion length, the
  generated tokens and pass FLOPs of a step at that length, the checkpoint it resumed from, and its Slurm jobs;
- ``evaluate_base``: the Base model evaluations' Slurm jobs and their sanity summaries;
- ``interrupt``: the cancelled job, the checkpoint it had written, scancel's exit status;
- every Slurm job: id, state, elapsed seconds and MaxRSS from `sacct` where Slurm keeps accounting, else the
  reason it has none ("not available: ...") and the state and run time `scontrol` still knows.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hara.config import merge_overlay, read_yaml, validate_config
from hara.errors import ConfigError, UserError
from hara.layout import (
    CHECKPOINTS_DIR,
    FINAL_DIR,
    METRICS_FILE,
    RUN_INFO,
    SANITY_FILE,
    Cell,
    base_eval_dir,
    grid_cells,
    run_dir,
)
from hara.planning.calibration import SUMMARY_FORMAT
from hara.results.collect import read_metrics
from hara.results.files import read_json

#: Snakemake settings the pilot needs whatever the profile says: the Slurm logs of successful jobs are where it
#: reads each job's id back (the plugin names them .snakemake/slurm_logs/rule_<rule>/<wildcards>/<job id>.log).
SNAKEMAKE_ARGS = ("--slurm-keep-successful-logs",)
MANIFEST = "hara_manifest.json"


def pilot_config(files: list[str], workdir: Path) -> dict:
    """The config the DAG will run (the files merged in order, validated), with the model folder made absolute
    (the plan reads the snapshots' config.json from it)."""
    raw: dict = {}
    for name in files:
        raw = merge_overlay(raw, read_yaml(name))
    config = validate_config(raw, source=" + ".join(files), skip_checks=("check_local_folders",))
    config["models"]["local_dir"] = str(workdir / config["models"]["local_dir"])
    return config


def results_path(config: Mapping, workdir: Path) -> Path:
    """results_dir as this process reads it (the DAG's targets keep the config's own spelling: Snakemake matches a
    target against the rules' outputs as written)."""
    return workdir / config["results_dir"]


def pilot_targets(config: Mapping, evaluate_base: list[str]) -> list[str]:
    """The Base model's sanity summary of each ``evaluate_base`` size (its evaluation first) and every training
    run's final/."""
    unknown = sorted(set(evaluate_base) - set(config["models"]["sizes"]))
    if unknown:
        raise UserError(f"--evaluate-base {' '.join(unknown)}: not in models.sizes {config['models']['sizes']}")
    results = config["results_dir"]
    base = [str(base_eval_dir(results, size) / SANITY_FILE) for size in evaluate_base]
    return base + [str(run_dir(results, cell) / FINAL_DIR) for cell in grid_cells(config)]


# ---------------------------------------------------------------------------------------------------------------
# The interruption: scancel after the first checkpoint.


def interrupted_cell(config: Mapping, size: str | None) -> Cell:
    """The first cell of ``size`` (default: the last of models.sizes, the largest in the paper's order)."""
    size = size or config["models"]["sizes"][-1]
    cells = [cell for cell in grid_cells(config) if cell.size == size]
    if not cells:
        raise UserError(f"--interrupt {size}: not in models.sizes {config['models']['sizes']}")
    return cells[0]


def owner_job(run: Path) -> str | None:
    """The Slurm job training ``run`` now (its owner.json claim, hara/rlvr/ownership.py)."""
    try:
        return json.loads((run / "owner.json").read_text(encoding="utf-8")).get("slurm_job_id")
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # not claimed yet, or being written


def interrupt_after_checkpoint(run: Path, step: int, env: Mapping, found: dict, stop: threading.Event) -> None:
    """Wait for checkpoint-<step> of ``run`` to be complete (its manifest is written last), then scancel the job
    that trains it; what happened goes into ``found``."""
    checkpoint = run / CHECKPOINTS_DIR / f"checkpoint-{step}"
    while not stop.is_set() and not (checkpoint / MANIFEST).is_file():
        time.sleep(0.05)
    if stop.is_set():
        found["skipped"] = f"the DAG ended before {checkpoint.name} was complete"
        return
    job = owner_job(run)
    if job is None:  # the run finished (its claim is removed at the end) before this thread saw the checkpoint
        found["skipped"] = (
            f"{checkpoint.name} was written, but no Slurm job claims the run (owner.json: ended, or not Slurm)"
        )
        return
    cancel = subprocess.run(["scancel", job], env=dict(env), capture_output=True, text=True, timeout=60, check=False)
    found.update(job_id=job, checkpoint=checkpoint.name, scancel_rc=cancel.returncode, scancel_stderr=cancel.stderr)


# ---------------------------------------------------------------------------------------------------------------
# Slurm records of the pilot's jobs.


def job_ids(workdir: Path, rule: str, wildcards: str) -> list[str]:
    """Every Slurm job of one rule and wildcard string, in submission order (from the plugin's log names)."""
    folder = workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}" / wildcards
    return sorted((log.stem for log in folder.glob("*.log") if log.stem.isdigit()), key=int)


def memory_mb(text: str) -> float | None:
    """sacct's MaxRSS (`1234K`, `56M`, `7G`, bytes without a suffix) in MB."""
    match = re.fullmatch(r"([\d.]+)([KMGT]?)", text.strip())
    if not match:
        return None
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[match.group(2)]
    return float(match.group(1)) * scale / 1e6


def sacct_records(ids: list[str], env: Mapping) -> tuple[dict[str, dict], str | None]:
    """job id -> {state, elapsed_s, max_rss_mb (the largest step's)} from sacct; or ({}, why there are none)."""
    if shutil.which("sacct", path=env.get("PATH")) is None:
        return {}, "not available: sacct is not on PATH"
    cmd = ["sacct", "-j", ",".join(ids), "--noheader", "--parsable2", "--format=JobID,State,ElapsedRaw,MaxRSS"]
    try:
        done = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return {}, "not available: sacct did not answer in 60 s"
    lines = [line.split("|") for line in done.stdout.splitlines() if line.count("|") == 3]
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["sacct printed no job (no accounting storage)"])[0]
        return {}, f"not available: {why}"
    records: dict[str, dict] = {}
    for job_id, state, elapsed, rss in lines:
        record = records.setdefault(job_id.split(".")[0], {"max_rss_mb": None})
        if "." not in job_id:
            record.update(state=state.split()[0], elapsed_s=int(elapsed or 0))
        step_mb = memory_mb(rss) if rss else None
        if step_mb is not None:
            record["max_rss_mb"] = max(record["max_rss_mb"] or 0.0, round(step_mb, 1))
    return records, None


def scontrol_record(job_id: str, env: Mapping) -> dict:
    """State, run time and restarts the controller still holds for a job (for MinJobAge after it ended)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=dict(env), capture_output=True, text=True, timeout=60, check=False
    ).stdout
    fields = dict(re.findall(r"\b(JobState|RunTime|Restarts)=(\S+)", shown))
    if not fields:
        return {"state": "unknown (scontrol no longer lists it)"}
    h, m, s = (fields["RunTime"].split("-")[-1].split(":") + ["0", "0"])[:3]
    days = int(fields["RunTime"].split("-")[0]) if "-" in fields["RunTime"] else 0
    return {
        "state": fields["JobState"],
        "elapsed_s": days * 86400 + int(h) * 3600 + int(m) * 60 + int(s),
        "restarts": int(fields["Restarts"]),
    }


def job_records(ids: list[str], env: Mapping) -> list[dict]:
    """One record per job: sacct's where accounting answers, else scontrol's and MaxRSS "not available: why"."""
    accounted, why = sacct_records(ids, env) if ids else ({}, None)
    records = []
    for job_id in ids:
        if job_id in accounted:
            record = {"job_id": job_id, **accounted[job_id]}
            if record["max_rss_mb"] is None:  # accounted, but no step sampled its memory (JobAcctGatherType=none)
                record["max_rss_mb"] = "not available: sacct lists the job without a MaxRSS"
            records.append(record)
        else:
            records.append({"job_id": job_id, **scontrol_record(job_id, env), "max_rss_mb": why or "not available"})
    return records


# ---------------------------------------------------------------------------------------------------------------
# Figures of a training run (its metrics.jsonl) and the summary.


def median_of(lines: list[dict], key: str) -> float | None:
    values = [line[key] for line in lines if key in line]
    return statistics.median(values) if values else None


def steady_lines(lines: list[dict], resumed_step: int | None) -> list[dict]:
    """The steps that pay no warm-up: not the first, nor the first after a resume (a new process, a new engine)."""
    warm = {1, (resumed_step or 0) + 1}
    return [line for line in lines if line["step"] not in warm] or lines


def resumed_step(run: Path) -> tuple[str | None, int | None]:
    """The checkpoint the run resumed from (run_info.json), and its step."""
    info = read_json(run / RUN_INFO)
    name = Path(info["resumed_from"]).name if info.get("resumed_from") else None
    return name, int(name.rsplit("-", 1)[1]) if name else None


def run_figures(config: Mapping, cell: Cell, run: Path) -> dict:
    """One training run's measured figures (the module's docstring lists them)."""
    from hara.planning import architecture_of, setup_of, step_flops
    from hara.rlvr.phases import PHASES, memory_key, time_key

    lines = read_metrics(run / METRICS_FILE)
    checkpoint, step = resumed_step(run)
    steady = steady_lines(lines, step)
    setup = setup_of(config, cell.size, cell.rlvr, cell.method)
    completion = median_of(steady, "train/response_length") or 0.0
    peaks = {p: max((line[memory_key(p)] for line in lines if memory_key(p) in line), default=None) for p in PHASES}
    return {
        "size": cell.size,
        "rlvr": cell.rlvr,
        "method": cell.method,
        "seed": cell.seed,
        "gpus": setup.world,
        "steps": len(lines),
        "steady_steps": [line["step"] for line in steady],
        "step_s": median_of(steady, "time/step_s"),
        "phase_s": {p: median_of(steady, time_key(p)) for p in PHASES},
        "peak_gib": peaks if any(v is not None for v in peaks.values()) else None,
        "rollouts_per_step": setup.rollouts,
        "prompt_tokens": setup.prompt_tokens,
        "completion_tokens": completion,
        "generated_tokens_per_step": setup.rollouts * completion,
        "flops_per_step": step_flops(
            architecture_of(config, cell.size), setup, setup.prompt_tokens + round(completion)
        ),
        "resumed_from": checkpoint,
    }


def pilot_summary(config: Mapping, workdir: Path, env: Mapping, evaluate_base: list[str], interrupt: dict) -> dict:
    """The pilot's summary: every finished training run's figures and Slurm jobs, the Base evaluations' jobs and
    sanity summaries, the interruption."""
    runs, results = [], results_path(config, workdir)
    for cell in grid_cells(config):
        run = run_dir(results, cell)
        if (run / FINAL_DIR).is_dir():
            wildcards = f"{cell.size}_{cell.rlvr}_{cell.method}_{cell.seed}"
            jobs = job_records(job_ids(workdir, "train", wildcards), env)
            runs.append({**run_figures(config, cell, run), "slurm": jobs})
    bases = []
    for size in evaluate_base:
        sanity = base_eval_dir(results, size) / SANITY_FILE
        bases.append(
            {
                "size": size,
                "sanity": json.loads(sanity.read_text(encoding="utf-8")) if sanity.is_file() else None,
                "slurm": job_records(job_ids(workdir, "evaluate_base", size), env),
            }
        )
    return {
        "format": SUMMARY_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu_model": config["plan"]["gpu_model"],
        "peak_tflops": config["plan"]["peak_tflops"],
        "runs": runs,
        "evaluate_base": bases,
        "interrupt": interrupt,
    }


# ---------------------------------------------------------------------------------------------------------------
# The command.


def snakemake_command(args: Any, targets: list[str]) -> list[str]:
    """Snakemake on the pilot's targets through ``--profile``, with the config files in order."""
    binary = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    return [
        binary,
        "-s",
        str(Path(args.snakefile).resolve()),
        "--profile",
        args.profile,
        "--configfile",
        *[str(Path(name).resolve()) for name in args.configfile],
        *SNAKEMAKE_ARGS,
        *shlex.split(args.snakemake_args),
        "--",  # ends --configfile's list: the rest are targets
        *targets,
    ]


def run_pilot(args: Any, env: Mapping) -> int:
    """Run the pilot DAG with one interruption, write the summary to ``args.out``; Snakemake's exit status."""
    workdir = Path(args.workdir).resolve()
    config = pilot_config(args.configfile, workdir)
    evaluate_base = args.evaluate_base or [config["models"]["sizes"][0]]
    targets = pilot_targets(config, evaluate_base)
    cell = interrupted_cell(config, args.interrupt)
    found: dict = {"run": cell.path()}
    stop = threading.Event()
    watcher = threading.Thread(
        target=interrupt_after_checkpoint,
        args=(run_dir(results_path(config, workdir), cell), config["training"]["save_steps"], env, found, stop),
        daemon=True,
    )
    watcher.start()
    started = time.perf_counter()
    try:
        done = subprocess.run(snakemake_command(args, targets), cwd=workdir, env=dict(env), check=False)
    finally:
        stop.set()
        watcher.join(timeout=5)
    summary = {**pilot_summary(config, workdir, env, evaluate_base, found), "configfiles": args.configfile}
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["snakemake_rc"] = done.returncode
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(summary['runs'])} training runs, interrupt {found}, Snakemake rc {done.returncode}")
    return done.returncode


# ---------------------------------------------------------------------------------------------------------------
# `hara plan --calibrate`.


def read_summary(path: str) -> list[Mapping]:
    """A pilot summary's runs, checked; one line naming the file and the field otherwise."""
    from hara.planning.calibration import check_summary

    try:
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--calibrate {path}: no such file (the summary `hara pilot --out` writes)") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"--calibrate {path}: not JSON ({error.msg} at line {error.lineno})") from None
    return check_summary(summary, path)


def calibrate(config: Mapping, summary: str, overlay: Path) -> dict:
    """Print the measured figures beside the stated ones, write the overlay that sets them; the calibrated config
    (the plan `hara plan` then prints)."""
    import yaml

    from hara.planning import plan_grid
    from hara.planning.calibration import (
        calibrated_config,
        calibrated_rates,
        calibration_overlay,
        rate_lines,
        runtime_lines,
    )

    runs = read_summary(summary)
    rates = calibrated_rates(runs, config["plan"]["peak_tflops"])
    calibrated = calibrated_config(config, rates)
    print(f"calibration from {summary} ({len(runs)} runs):")
    lines = rate_lines(config["plan"], rates, config["models"]["sizes"])
    lines += runtime_lines(config, plan_grid(config), plan_grid(calibrated), runs)
    print("\n".join(f"  {line}" for line in lines))
    overlay.parent.mkdir(parents=True, exist_ok=True)
    header = f"# `hara plan --calibrate {summary}`: the plan's speeds measured by the pilot; give it after the config\n"
    overlay.write_text(header + yaml.safe_dump(calibration_overlay(rates), sort_keys=False), encoding="utf-8")
    print(f"  overlay: {overlay}")
    return calibrated

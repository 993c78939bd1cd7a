"""The short GPU check in one command: `hara train` itself (TRL, transformers generation in bf16 with the
hidden-state recorder, the paper's config and GRPO preset) on a Qwen3-1.7B-shaped model, a few steps of the methods
asked for, then the one-rank FSDP2 run the grid's multi-GPU cells take, with a checkpoint and a resume after its
final/ is deleted; each phase's time and peak memory against `hara plan`. No evaluation.

benchmarks/gpu_check.py measures the maths on plain torch; this one runs the stages a cluster job runs, through the
same commands and files, at the paper's shapes but for a few steps:

1. Assets, made on the machine, offline: a random-init Qwen3 of the scale's shapes with the real Qwen3 tokenizer,
   saved (bf16 at paper scale, as the hub's Base snapshots) in the Hugging Face cache layout, and the paper's six
   datasets as fixtures in their own schemas (tests/hub_assets.py, the rehearsal's own).
2. config/paper.yaml with scale keys changed (sizes, steps, batch, lengths, one GPU) and the path key the machine
   forces: `training.use_vllm: false` (no vLLM there); tracking into a local sqlite store; `plan.gpu_memory_gb` the
   device's and `plan.prompt_tokens` the fixtures' longest prompt.
3. `hara fetch-data`, the download rule's `snapshot_download`, `hara data`, `hara base-model`, then `hara train` for
   each of ``--methods`` (GRPO, seed 0, one process), then ``--fsdp-method`` under `accelerate launch` with
   training.accelerate_config (FSDP2) and one process, as `hara train --processes N` launches itself, saving its
   last step; its final/ deleted, the same command again must finish the run (the stranded-run case: a job that
   lost final/ after the prune), and the figures say whether it did and with the same weights.
4. Figures from each run's metrics.jsonl (the trainer's ``time/<phase>_s`` and, on CUDA, ``memory/<phase>_peak_gib``:
   hara/rlvr/phases.py) next to `hara plan`'s cell (hara.planning, runtime overhead left out: CUDA's counters do not
   see the context): peak per phase over plan, generation tokens/s (transformers' generate; the plan assumes vLLM's
   plan.generation_tokens_per_s) and the training passes' achieved TFLOP/s against plan.mfu x plan.peak_tflops.

    python benchmarks/stack_check.py --device cuda --scale paper --out $OUT/stack_check.json   # one H100: ~7 min
    python benchmarks/stack_check.py --device cpu --scale toy                                   # a CPU: ~2 min

Every figure is printed as ``key=value`` and written to ``--out`` the moment it is measured (the JSON is rewritten
after each stage), so a run stopped by its time limit keeps what it measured; ``--budget-s`` starts no stage past
that many seconds. What a bare GPU machine lacks (TRL, datasets, MLflow, math-verify) travels as wheels:
docs/gpu_check.md says how.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a copied working tree, not an installed package

import yaml

from hara.planning import GB, PAPER_ARCHITECTURES, Architecture
from hara.rlvr.phases import GIB, PHASES, memory_key, time_key
from tests.helpers import merged

METHODS = ("none", "hara_tok")  # the default and HarA's token level (--methods picks others)
SIZE = "qwen3-1.7b"
RLVR = "grpo"


@dataclass(frozen=True)
class Scale:
    hub_id: str
    arch: Architecture | None  # None: the rehearsal's tiny Qwen3
    dtype: str  # of the saved snapshot
    steps: int
    group_size: int
    prompts_per_step: int
    grad_accum_steps: int
    completion_tokens: int  # training.max_completion_length
    fsdp_steps: int  # of the one-rank FSDP2 run, which saves its last step (a full checkpoint: weights, AdamW)
    threads: int  # torch threads per stage: the paper's 8 on a GPU node; 1 on a shared CPU, where 2 threads of
    # each of CI's 4 test workers made a toy step 6x slower (15.5 s against 2.7 s alone)


SCALES = {
    "toy": Scale(
        "hara-stack/Qwen3-tiny-Base",
        None,
        "float32",
        steps=2,
        group_size=2,
        prompts_per_step=2,
        grad_accum_steps=1,
        completion_tokens=16,
        fsdp_steps=2,
        threads=1,
    ),
    # 32 rollouts per step, 8 per backward pass as the paper's 1.7B runs (64 x 8 over 32 micro-batches x 2 GPUs);
    # 512 tokens: a random model never stops, and 3 steps of 3072 would not end within the 8 minutes.
    "paper": Scale(
        "hara-stack/Qwen3-1.7B-shaped-Base",
        PAPER_ARCHITECTURES["Qwen/Qwen3-1.7B-Base"],
        "bfloat16",
        steps=3,
        group_size=8,
        prompts_per_step=4,
        grad_accum_steps=4,
        completion_tokens=512,
        fsdp_steps=2,
        threads=8,
    ),
}


def longest_prompt_tokens(template: str) -> int:
    """Tokens of the longest fixture problem in the paper's template (the plan's plan.prompt_tokens)."""
    from hara.models.tokenizer import build_tokenizer
    from tests.hub_assets import DATASETS

    tokenizer = build_tokenizer("qwen3")
    problems = [row.get("problem") or row.get("question") for *_, rows in DATASETS for row in rows]
    return max(len(tokenizer(template.replace("{problem}", p), add_special_tokens=False).input_ids) for p in problems)


def stack_config(work: Path, s: Scale, gpu_memory_gb: float) -> dict:
    """config/paper.yaml with this check's scale keys, the machine's forced path key and local folders."""
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text(encoding="utf-8"))
    overlay = {
        "results_dir": str(work / "results"),
        "threads": s.threads,
        "data": {"local_dir": str(work / "data" / "hub")},
        "models": {
            "sizes": [SIZE],
            "hub_ids": {SIZE: s.hub_id},
            "local_dir": str(work / "models"),
            "train_gpus": {SIZE: 1},
        },
        "training": {
            "steps": s.steps,
            "group_size": s.group_size,
            "prompts_per_step": s.prompts_per_step,
            "grad_accum_steps": s.grad_accum_steps,
            "max_completion_length": s.completion_tokens,
            "save_steps": s.steps + 1,
            "use_vllm": False,
        },
        "selection": {"validation_problems": 2, "candidates": 2},
        "grid": {"rlvr": [RLVR], "methods": list(METHODS), "seeds": [0]},
        "tracking": {"mlflow_uri": f"sqlite:///{work / 'mlflow.db'}"},
        "plan": {"gpu_memory_gb": gpu_memory_gb, "prompt_tokens": longest_prompt_tokens(paper["prompt"]["template"])},
    }
    return merged(paper, overlay)


def stage_env(work: Path) -> dict:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "HF_HOME": str(work / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "PYTHONUNBUFFERED": "1",
    }


#: How a stage starts: `hara <args>` as the DAG's shell runs it, or `hara <args>` under `accelerate launch` with one
#: process, as `hara train --processes N` relaunches itself (hara.rlvr.launch.relaunch), for the FSDP2 run.
HARA = "import sys; from hara.cli import main; sys.exit(main())"
LAUNCHED_HARA = "import sys; from hara.rlvr.launch import relaunch; sys.exit(relaunch(1, sys.argv[1], sys.argv[2:]))"


def run_stage(name: str, args: list[str], work: Path, timings: dict, entry: str = HARA, must_pass: bool = True) -> int:
    """One stage in a process of its own, timed, its log kept under work/logs; its exit status (a failing stage
    stops the check unless ``must_pass`` is off)."""
    log = work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            [sys.executable, "-c", entry, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=stage_env(work),
            cwd=work,
            check=False,
        )
    timings[name] = round(time.perf_counter() - start, 1)
    print(f"{name}: {timings[name]} s (rc {done.returncode})", flush=True)
    if done.returncode and must_pass:
        raise SystemExit(
            f"stack check: stage {name} failed; its log: {log}\n" + log.read_text(encoding="utf-8")[-3000:]
        )
    return done.returncode


def copy_snapshot(work: Path, config: dict) -> None:
    """What the DAG's download_model rule does, offline from the cache made in work/hf."""
    from hara.models.base import download_snapshot

    download_snapshot(
        config["models"]["hub_ids"][SIZE],
        Path(config["models"]["local_dir"]) / SIZE,
        cache_dir=work / "hf" / "hub",
        local_files_only=True,
    )  # HF_HUB_OFFLINE is read at import, before HF_HOME is set here


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def resolved(config: dict) -> dict:
    """The check's config with the schema's defaults filled, as every `hara` command reads it."""
    from hara.config import validate_config

    return validate_config(config, source="stack check")


def plan_of(config: dict, method: str) -> dict:
    """`hara plan`'s cell for one method: per phase resident + phase (GiB, runtime overhead left out), its peak,
    the generated tokens and the flops of the passes over prompt + completion."""
    from hara import planning

    resolved_config = resolved(config)
    arch = planning.architecture_of(resolved_config, SIZE)
    setup = planning.setup_of(resolved_config, SIZE, RLVR, method)
    mem = planning.training_memory(arch, setup, method, resolved_config["plan"]["gpu_memory_gb"] * GB, 0.0)
    resident = sum(mem.resident.values())
    passes = 3 + setup.checkpointing + setup.old_logps_pass + setup.capture_forward
    return {
        "phase_gib": {p: (resident + sum(mem.phases[p].values())) / GIB for p in PHASES},
        "peak_gib": mem.peak / GIB,
        "rollouts": setup.rollouts,
        "context": setup.context,
        "flops_per_step": setup.rollouts * setup.context * arch.forward_flops_per_token(setup.context) * passes,
        "generation_tokens_per_s": planning.by_size(resolved_config["plan"]["generation_tokens_per_s"], SIZE),
        "planned_tflops": resolved_config["plan"]["peak_tflops"]
        * planning.by_size(resolved_config["plan"]["mfu"], SIZE),
    }


def method_figures(method: str, lines: list[dict], plan: dict, cuda: bool) -> dict:
    """Medians over the steps after the first (which pays warm-up), peaks over all steps, next to the plan."""
    steady = lines[1:] or lines
    fig = {f"step_s_{method}": round(statistics.median(l["time/step_s"] for l in steady), 3)}
    phase_s = {p: statistics.median(l.get(time_key(p), 0.0) for l in steady) for p in PHASES}
    fig.update({f"{p}_s_{method}": round(phase_s[p], 3) for p in PHASES})
    tokens = plan["rollouts"] * statistics.median(l["train/response_length"] for l in steady)
    fig[f"generation_tokens_per_s_{method}"] = round(tokens / phase_s["generation"], 1)
    fig[f"generation_over_plan_{method}"] = round(
        fig[f"generation_tokens_per_s_{method}"] / plan["generation_tokens_per_s"], 3
    )
    compute_s = phase_s["scoring"] + phase_s["training"] + phase_s["optimizer"]
    fig[f"achieved_tflops_{method}"] = round(plan["flops_per_step"] / compute_s / 1e12, 3)
    fig[f"tflops_over_plan_{method}"] = round(fig[f"achieved_tflops_{method}"] / plan["planned_tflops"], 4)
    for p in PHASES:
        fig[f"plan_gib_{p}_{method}"] = round(plan["phase_gib"][p], 2)
        if cuda:
            peak = max(l.get(memory_key(p), 0.0) for l in lines)
            fig[f"peak_gib_{p}_{method}"] = round(peak, 2)
            fig[f"peak_over_plan_{p}_{method}"] = round(peak / plan["phase_gib"][p], 3)
    if cuda:
        peak = max(fig[f"peak_gib_{p}_{method}"] for p in PHASES)
        fig[f"peak_over_plan_{method}"] = round(peak / plan["peak_gib"], 3)
    return fig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--scale", choices=sorted(SCALES), default="paper")
    parser.add_argument("--work", help="working folder (default: a temporary one, removed at the end)")
    parser.add_argument("--out", help="the figures and per-step records (JSON), rewritten as each stage ends")
    parser.add_argument("--seed", type=int, default=0, help="the random model's initialisation")
    parser.add_argument(
        "--methods",
        type=lambda text: [m for m in text.split(",") if m],
        default=list(METHODS),
        help=f"comma-separated methods trained on one process (default {','.join(METHODS)}; empty: none)",
    )
    parser.add_argument(
        "--fsdp-method",
        default="none",
        help="the method of the one-rank FSDP2 run with its save and resume (empty: no such run)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="start no stage past this many seconds (default 480: the check ends within its 9 minutes)",
    )
    return parser.parse_args(argv)


def device_memory_gb(device: str) -> float:
    import torch

    if device == "cpu":
        return 80.0  # the plan's GPU, for a CPU run that only checks the plumbing
    if not torch.cuda.is_available():
        raise SystemExit(
            "stack check: --device cuda but torch sees no CUDA device (torch.cuda.is_available() is "
            "False); run it on the GPU machine, or --device cpu --scale toy"
        )
    return torch.cuda.get_device_properties(0).total_memory / GB


class Progress:
    """The check's figures as they are measured: each printed as ``key=value`` at once and the ``--out`` JSON
    rewritten (a temporary file renamed into place) after every stage, so a run its time limit stops keeps them."""

    def __init__(self, out: str | None, meta: dict, budget_s: float):
        self.out, self.result, self.start, self.budget_s = (
            out,
            {**meta, "figures": {}, "records": {}},
            time.time(),
            budget_s,
        )

    def add(self, figures: dict, records: dict | None = None) -> None:
        for key, value in figures.items():
            print(f"{key}={value}", flush=True)
        self.result["figures"].update(figures)
        self.result["records"].update(records or {})
        if self.out:
            tmp = Path(f"{self.out}.tmp")
            tmp.write_text(json.dumps(self.result, indent=1, default=str), encoding="utf-8")
            tmp.replace(self.out)

    def in_budget(self, stage: str) -> bool:
        """Whether ``stage`` may start; a skipped stage is itself a figure."""
        if time.time() - self.start <= self.budget_s:
            return True
        self.add({f"skipped_{stage}": f"past --budget-s {self.budget_s:g}"})
        return False


def train_args(c: list[str], method: str, results: Path, run: Path) -> list[str]:
    data = str(results / "data")
    return [
        "train",
        *c,
        "--size",
        SIZE,
        "--rlvr",
        RLVR,
        "--method",
        method,
        "--seed",
        "0",
        "--data",
        data,
        "--out",
        str(run),
    ]


def prepare(args: argparse.Namespace, work: Path, progress: Progress) -> tuple[dict, list[str]]:
    """Assets, config, fetch-data, the snapshot copy, data and the Base model: what every training run reads."""
    from tests.hub_assets import build_hub_cache

    s, timings, start = SCALES[args.scale], {}, time.perf_counter()
    build_hub_cache(work / "hf", [s.hub_id], seed=args.seed, arch=s.arch, dtype=s.dtype, device=args.device)
    timings["assets"] = round(time.perf_counter() - start, 1)
    config = stack_config(work, s, device_memory_gb(args.device))
    config_file = work / "config.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    progress.result["config"] = config
    results, c = work / "results", ["--config", str(config_file)]
    run_stage("fetch-data", ["fetch-data", *c], work, timings)
    copy_snapshot(work, config)
    run_stage("data", ["data", *c, "--out", str(results / "data")], work, timings)
    model = ["--size", SIZE, "--data", str(results / "data"), "--out", str(results / "base_model" / SIZE)]
    run_stage("base-model", ["base-model", *c, *model, "--skip-accuracy"], work, timings)
    progress.add({f"wall_s_{name}": value for name, value in timings.items()})
    return config, c


def train_methods(args: argparse.Namespace, work: Path, config: dict, c: list[str], progress: Progress) -> None:
    results, cuda = work / "results", args.device == "cuda"
    for method in args.methods:
        if not progress.in_budget(f"train_{method}"):
            return
        run, timings = results / "train" / method, {}
        run_stage(f"train-{method}", train_args(c, method, results, run), work, timings)
        lines = read_metrics(run)
        figures = method_figures(method, lines, plan_of(config, method), cuda)
        progress.add({**figures, f"wall_s_train_{method}": timings[f"train-{method}"]}, {method: lines})


def final_sha256(final: Path) -> str:
    """One hash over final/'s weight files (names and bytes), to compare a rebuilt final/ with the first."""
    import hashlib

    from hara.hashing import stream_into

    digest = hashlib.sha256()
    for path in sorted(final.glob("*.safetensors")):
        digest.update(path.name.encode() + b"\0")
        stream_into(digest, path)
    return digest.hexdigest()


def fsdp_run(args: argparse.Namespace, work: Path, config: dict, c: list[str], progress: Progress) -> None:
    """The one-rank FSDP2 run, saving its last step; then final/ deleted and the same command again, which must
    finish the run from that checkpoint (rc 0) with the same weights."""
    method, steps = args.fsdp_method, SCALES[args.scale].fsdp_steps
    if not method or not progress.in_budget("fsdp"):
        return
    run, timings = work / "results" / "train" / f"fsdp-{method}", {}
    saves = ["--set", f"training.steps={steps}", "--set", f"training.save_steps={steps}"]
    accelerate_config = resolved(config)["training"]["accelerate_config"]
    command = [accelerate_config, *train_args(c, method, work / "results", run), *saves]
    run_stage("fsdp", command, work, timings, entry=LAUNCHED_HARA)
    lines = read_metrics(run)
    figures = {
        f"fsdp_{k}": v for k, v in method_figures(method, lines, plan_of(config, method), args.device == "cuda").items()
    }
    first = final_sha256(run / "final")
    progress.add({**figures, "wall_s_fsdp": timings["fsdp"]}, {f"fsdp-{method}": lines})
    if not progress.in_budget("fsdp_resume"):
        return
    shutil.rmtree(run / "final")
    rc = run_stage("fsdp-resume", command, work, timings, entry=LAUNCHED_HARA, must_pass=False)
    rebuilt = (run / "final").is_dir()
    progress.add(
        {
            "fsdp_resume_rc": rc,
            "fsdp_resume_final_rebuilt": rebuilt,
            "fsdp_resume_same_weights": rebuilt and final_sha256(run / "final") == first,
            "fsdp_resume_steps_trained": len(read_metrics(run)) - len(lines),
            "wall_s_fsdp_resume": timings["fsdp-resume"],
        }
    )


def check(args: argparse.Namespace, work: Path, progress: Progress) -> None:
    config, c = prepare(args, work, progress)
    train_methods(args, work, config, c, progress)
    fsdp_run(args, work, config, c, progress)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from hara.methods import methods

    unknown = [m for m in [*args.methods, args.fsdp_method] if m and m not in methods()]
    if unknown:
        raise SystemExit(f"stack check: unknown method(s) {', '.join(unknown)} (valid: {', '.join(methods())})")
    progress = Progress(args.out, {"scale": args.scale, "device": args.device}, args.budget_s)
    with tempfile.TemporaryDirectory(prefix="stack_check_") as tmp:
        check(args, Path(args.work) if args.work else Path(tmp), progress)
    return progress.result


if __name__ == "__main__":
    main()

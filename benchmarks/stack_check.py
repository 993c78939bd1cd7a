"""Real-stack check for a lent accelerator: `hara train` itself (TRL, transformers generation in bf16 with the
hidden-state recorder, the paper's config and GRPO preset) on a Qwen3-1.7B-shaped model, a few steps of `none`,
`hara_tok` and one entropy baseline, with each phase's time and peak memory against `hara plan`; then one
`hara evaluate` on a benchmark fixture.

benchmarks/gpu_check.py measures the maths on plain torch; this one runs the stages a cluster job runs, through the
same commands and files, at the paper's shapes but for a few steps:

1. Assets, made on the machine, offline: a random-init Qwen3 of the scale's shapes with the real Qwen3 tokenizer,
   saved (bf16 at paper scale, as the hub's Base snapshots) in the Hugging Face cache layout, and the paper's six
   datasets as fixtures in their own schemas (tests/hub_assets.py, the rehearsal's own).
2. config/paper.yaml with scale keys changed (sizes, steps, batch, lengths, one GPU) and two path keys the machine
   forces: `training.use_vllm: false` and `evaluation.backend: transformers` (no vLLM there); tracking into a local
   sqlite store; `plan.gpu_memory_gb` the device's and `plan.prompt_tokens` the fixtures' longest prompt.
3. `hara fetch-data`, the download rule's `snapshot_download`, `hara data`, `hara base-model`, `hara train` for
   each method (GRPO, seed 0), `hara evaluate` of `none`'s final/ on MATH-500's fixture: subprocesses, as the DAG
   runs them, each timed.
4. Figures from each run's metrics.jsonl (the trainer's ``time/<phase>_s`` and, on CUDA, ``memory/<phase>_peak_gib``:
   hara/rlvr/phases.py) next to `hara plan`'s cell (hara.planning, runtime overhead left out: CUDA's counters do not
   see the context): peak per phase over plan, generation tokens/s (transformers' generate; the plan assumes vLLM's
   plan.generation_tokens_per_s) and the training passes' achieved TFLOP/s against plan.mfu x plan.peak_tflops.

    python benchmarks/stack_check.py --device cuda --scale paper --out $OUT/stack_check.json   # one H200: ~6 min
    python benchmarks/stack_check.py --device cpu --scale toy                                   # a CPU: ~2 min

What a bare GPU machine lacks (TRL, datasets, MLflow, math-verify, lighteval, ...) travels as wheels:
docs/gpu_check.md, "Real-stack check", says how. The last lines are ``key=value`` figures; ``--out`` writes them as
JSON with the per-step records.
"""

from __future__ import annotations

import argparse
import json
import os
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

METHODS = ("none", "hara_tok", "forking_tokens")  # the default, HarA's token level, an entropy baseline
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
    completion_tokens: int  # training.max_completion_length and evaluation.max_new_tokens
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
    """config/paper.yaml with this check's scale keys, the machine's two forced path keys and local folders."""
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
        "evaluation": {
            "max_new_tokens": s.completion_tokens,
            "n": 1,
            "backend": "transformers",
            "benchmarks": {"aime24": {"n": 1}, "amc23": {"n": 1}},
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


def run_stage(name: str, args: list[str], work: Path, timings: dict) -> None:
    """One `hara` command as the DAG runs it (a process of its own), its log kept under work/logs."""
    log = work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from hara.cli import main; sys.exit(main())", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=stage_env(work),
            cwd=work,
            check=False,
        )
    timings[name] = round(time.perf_counter() - start, 1)
    print(f"{name}: {timings[name]} s (rc {done.returncode})", flush=True)
    if done.returncode:
        raise SystemExit(
            f"stack check: `hara {args[0]}` failed; its log: {log}\n" + log.read_text(encoding="utf-8")[-3000:]
        )


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


def plan_of(config: dict, method: str) -> dict:
    """`hara plan`'s cell for one method: per phase resident + phase (GiB, runtime overhead left out), its peak,
    the generated tokens and the flops of the passes over prompt + completion."""
    from hara import planning
    from hara.config import validate_config

    resolved = validate_config(config, source="stack check")
    arch = planning.architecture_of(resolved, SIZE)
    setup = planning.setup_of(resolved, SIZE, RLVR, method)
    mem = planning.training_memory(arch, setup, method, resolved["plan"]["gpu_memory_gb"] * GB, 0.0)
    resident = sum(mem.resident.values())
    passes = 3 + setup.checkpointing + setup.old_logps_pass + setup.capture_forward
    return {
        "phase_gib": {p: (resident + sum(mem.phases[p].values())) / GIB for p in PHASES},
        "peak_gib": mem.peak / GIB,
        "rollouts": setup.rollouts,
        "context": setup.context,
        "flops_per_step": setup.rollouts * setup.context * arch.forward_flops_per_token(setup.context) * passes,
        "generation_tokens_per_s": planning.by_size(resolved["plan"]["generation_tokens_per_s"], SIZE),
        "planned_tflops": resolved["plan"]["peak_tflops"] * resolved["plan"]["mfu"],
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


def evaluate(c: list[str], results: Path, trained: bool, work: Path, timings: dict) -> dict:
    """`hara evaluate` of `none`'s final/ (or, the training part not run, of the Base model: the DAG's evaluate_base
    job) on MATH-500's fixture."""
    checkpoint = results / "train" / "none" / "final" if trained else results / "base_model" / SIZE
    run_stage(
        "evaluate",
        [
            "evaluate",
            *c,
            "--checkpoint",
            str(checkpoint),
            "--benchmark",
            "math500",
            "--out",
            str(results / "eval.json"),
            "--no-mlflow",
        ],
        work,
        timings,
    )
    scores = json.loads((results / "eval.json").read_text(encoding="utf-8"))
    return {
        "evaluate_backend": scores["backend"],
        "evaluate_device": scores["cost"]["device"],
        "evaluate_problems": scores["benchmarks"]["math500"]["n_problems"],
        "evaluate_s": round(scores["benchmarks"]["math500"]["seconds"], 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--scale", choices=sorted(SCALES), default="paper")
    parser.add_argument("--work", help="working folder (default: a temporary one, removed at the end)")
    parser.add_argument("--out", help="write the figures and per-step records here (JSON)")
    parser.add_argument("--seed", type=int, default=0, help="the random model's initialisation")
    parser.add_argument(
        "--part",
        choices=("all", "train", "evaluate"),
        default="all",
        help="train: the three `hara train` runs; evaluate: `hara evaluate` of the Base model. On a "
        "lent machine each part travels with its own wheels (benchmarks/stack_wheels.py)",
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


def check(args: argparse.Namespace, work: Path) -> dict:
    from tests.hub_assets import build_hub_cache

    s, cuda, timings = SCALES[args.scale], args.device == "cuda", {}
    start = time.perf_counter()
    build_hub_cache(work / "hf", [s.hub_id], seed=args.seed, arch=s.arch, dtype=s.dtype, device=args.device)
    timings["assets"] = round(time.perf_counter() - start, 1)
    config = stack_config(work, s, device_memory_gb(args.device))
    config_file = work / "config.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    results, c = work / "results", ["--config", str(config_file)]
    run_stage("fetch-data", ["fetch-data", *c], work, timings)
    copy_snapshot(work, config)
    run_stage("data", ["data", *c, "--out", str(results / "data")], work, timings)
    run_stage(
        "base-model",
        [
            "base-model",
            *c,
            "--size",
            SIZE,
            "--data",
            str(results / "data"),
            "--out",
            str(results / "base_model" / SIZE),
            "--skip-accuracy",
        ],
        work,
        timings,
    )
    figures, records = {}, {}
    for method in METHODS if args.part in ("all", "train") else ():
        run = results / "train" / method
        run_stage(
            f"train-{method}",
            [
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
                str(results / "data"),
                "--out",
                str(run),
            ],
            work,
            timings,
        )
        records[method] = read_metrics(run)
        figures.update(method_figures(method, records[method], plan_of(config, method), cuda))
    if args.part in ("all", "evaluate"):
        figures.update(evaluate(c, results, trained=args.part == "all", work=work, timings=timings))
    figures.update({f"wall_s_{name}": value for name, value in timings.items()})
    return {"scale": args.scale, "device": args.device, "figures": figures, "records": records, "config": config}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stack_check_") as tmp:
        result = check(args, Path(args.work) if args.work else Path(tmp))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    for key, value in result["figures"].items():
        print(f"{key}={value}")
    return result


if __name__ == "__main__":
    main()

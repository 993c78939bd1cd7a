"""`make reproduce`'s stage times, and the warm-up on its configured threads against one thread in this process.

    python benchmarks/bench_reproduce.py [--config config/default.yaml] [--warmup-steps 200] [--repeats 2]
                                         [--workdir DIR | --snakemake-log FILE] [--scores FILE]
                                         [--model DIR [--problems 200]]

Four parts:
- The warm-up (the DAG's first and longest job, which runs alone): ``--warmup-steps`` of the config's warm-up on the
  first 4,000 training problems, with ``--threads`` (default: the config's ``warmup.threads``) and with 1, alternated
  ``--repeats`` times in this process; prints each run and the ratio of the medians. The two thread counts give the
  same losses to about four decimals but not the same weights (another summation order), which is why the thread
  count is a config key, never the machine's core count.
- With ``--workdir`` (a folder where `make reproduce` or snakemake ran; its newest Snakemake log) or
  ``--snakemake-log``: each rule's job count and job seconds (min, max, sum) and the DAG's wall time, from the log's
  start and finish stamps (one-second resolution).
- With ``--scores`` (an evaluation's scores.json): its completions scored against their gold answers by the
  memoised scoring rule (pairs memoised, each gold parsed once) and by the same rule without the memos (the previous
  implementation: both sides parsed on every call), alternated; the scores must be equal.
- With ``--model`` (a model folder, e.g. results/base_model/tiny-s): the evaluation's sampled generation
  (``evaluation`` settings, ``--problems`` training problems x ``evaluation.n`` samples) with transformers' ``sdpa``
  attention (the previous implementation) and with the CPU attention of hara.models.attention, alternated; prints
  tokens/s of each and the ratio. Both must give the same token ids.

Times depend on the machine and its load: compare ratios measured in one process, not seconds across machines.
The last line is machine-readable.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISH = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def job_times(log_text: str) -> dict[str, list[float]]:
    """Seconds of every finished job, by rule, from a Snakemake log: a job starts at the stamp before its
    ``rule NAME:`` block and ends at the stamp before its ``Finished jobid: N`` line."""
    stamp, pending, started, times = None, None, {}, defaultdict(list)
    for line in log_text.splitlines():
        if match := STAMP.match(line):
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y")
        elif match := START.match(line):
            pending = stamp
        elif (match := JOBID.match(line)) and pending is not None:
            started[match.group(1)], pending = pending, None
        elif (match := FINISH.match(line)) and match.group(1) in started:
            times[match.group(2)].append((stamp - started.pop(match.group(1))).total_seconds())
    return dict(times)


def dag_wall_seconds(log_text: str) -> float:
    """From the log's first stamp to its last."""
    stamps = [
        datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y") for m in map(STAMP.match, log_text.splitlines()) if m
    ]
    return (stamps[-1] - stamps[0]).total_seconds() if stamps else 0.0


def newest_log(workdir: Path) -> Path:
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise SystemExit(f"--workdir: no Snakemake log under {workdir / '.snakemake' / 'log'}")
    return logs[-1]


def print_stage_times(log: Path) -> dict[str, float]:
    text = log.read_text(encoding="utf-8")
    times = job_times(text)
    print(f"{'rule':>18} | jobs | each s (min-max) | sum s   ({log})")
    for rule, seconds in sorted(times.items(), key=lambda item: -sum(item[1])):
        print(f"{rule:>18} | {len(seconds):4d} | {min(seconds):6.0f}-{max(seconds):<6.0f}  | {sum(seconds):6.0f}")
    wall = dag_wall_seconds(text)
    print(f"DAG wall {wall:.0f} s, job seconds {sum(map(sum, times.values())):.0f}")
    return {"dag_wall_s": wall, "job_s": sum(map(sum, times.values()))}


def time_warmup(records: list[dict], config: dict, steps: int, threads: int, out: Path) -> tuple[float, float]:
    """(training seconds, final loss) of ``steps`` warm-up steps of the config's recipe on ``threads`` threads."""
    from hara.models.base import warmup_arguments
    from hara.models.warmup import warmup_base_model

    arguments = dict(warmup_arguments(config), steps=steps, threads=threads, progress=False)
    result = warmup_base_model(config["models"]["sizes"][0], records, out, **arguments)
    return result["train_seconds"], result["final_loss"]


def compare_warmup_threads(config: dict, steps: int, repeats: int, new: int) -> dict[str, float]:
    from hara.data.pipeline import build_config_datasets
    from hara.runinfo import set_threads

    records = build_config_datasets(config)["train"][:4000]
    old = 1
    seconds = {new: [], old: []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for threads in (old, new):
                train_s, loss = time_warmup(records, config, steps, threads, Path(tmp) / f"{threads}_{repeat}")
                seconds[threads].append(train_s)
                print(f"warm-up {steps} steps on {threads} thread(s): {train_s:.2f} s, final loss {loss:.4f}")
    set_threads(config["threads"])
    ratio = statistics.median(seconds[old]) / statistics.median(seconds[new])
    print(f"warm-up on {new} threads vs 1 thread: {ratio:.2f}x faster (median of {repeats})")
    return {"warmup_threads": new, "warmup_speedup_vs_1_thread": ratio}


def scored_pairs(scores: Path) -> list[tuple[str, str]]:
    """(boxed answer, gold) of every completion in an evaluation's scores.json that the scoring rule would parse."""
    import json

    from hara.boxed_answer import last_boxed, too_costly

    pairs = []
    for benchmark in json.loads(scores.read_text(encoding="utf-8"))["benchmarks"].values():
        for prediction in benchmark["predictions"]:
            for completion in prediction["completions"]:
                answer = last_boxed(completion)
                if answer and answer.strip() and not too_costly(answer):
                    pairs.append((answer, str(prediction["gold"]).strip()))
    return pairs


def compare_reward_memo(scores: Path, repeats: int) -> dict[str, float]:
    from hara import boxed_answer as reward

    pairs, memoised = scored_pairs(scores), reward._verify_in_process

    def unmemoised(answer: str, gold: str) -> float:  # the previous implementation: both sides parsed every call
        reward._GOLD_PARSES.clear()
        return memoised.__wrapped__(answer, gold)

    seconds = {"plain": [], "memoised": []}
    unmemoised(*pairs[0])  # math-verify's and sympy's first-call set-up, outside both timings
    for _ in range(repeats):
        start = time.perf_counter()
        plain = [unmemoised(answer, gold) for answer, gold in pairs]
        seconds["plain"].append(time.perf_counter() - start)
        reward._clear_memos()
        start = time.perf_counter()
        if [memoised(answer, gold) for answer, gold in pairs] != plain:
            raise SystemExit("the memoised scoring rule disagrees with the plain one")
        seconds["memoised"].append(time.perf_counter() - start)
    ratio = statistics.median(seconds["plain"]) / statistics.median(seconds["memoised"])
    print(
        f"scoring {len(pairs)} answers of {scores}: plain {statistics.median(seconds['plain']):.2f} s, memoised "
        f"{statistics.median(seconds['memoised']):.2f} s ({len(set(pairs))} distinct): {ratio:.2f}x faster"
    )
    return {"reward_pairs": len(pairs), "reward_speedup_vs_plain": ratio}


def compare_generation(config: dict, model_dir: Path, problems: int, repeats: int) -> dict[str, float]:
    from hara.data.format import prompt_format
    from hara.data.pipeline import build_config_datasets
    from hara.models.attention import CPU_ATTENTION
    from hara.models.generate import generate_ids, load_model

    evaluation, form = config["evaluation"], prompt_format(config)
    records = build_config_datasets(config)["train"][:problems]
    prompts = [form.prompt(record["problem"]) for record in records for _ in range(evaluation["n"])]
    model, tokenizer = load_model(model_dir)
    sampling = dict(
        greedy=False,
        temperature=evaluation["temperature"],
        top_p=evaluation["top_p"],
        max_new_tokens=evaluation["max_new_tokens"],
        seed=evaluation["seed"],
        stop=form.stop,
    )
    rates, outputs = {"sdpa": [], CPU_ATTENTION: []}, {}
    for _ in range(repeats):
        for attention, rate in rates.items():
            model.set_attn_implementation(attention)
            start = time.perf_counter()
            outputs[attention] = generate_ids(model, tokenizer, prompts, **sampling)
            seconds = time.perf_counter() - start
            tokens = sum(map(len, outputs[attention]))
            rate.append(tokens / seconds)
            print(
                f"generation, {len(prompts)} completions, {attention}: {tokens} tokens in {seconds:.2f} s, "
                f"{tokens / seconds:,.0f} tokens/s"
            )
    if outputs["sdpa"] != outputs[CPU_ATTENTION]:
        raise SystemExit("the CPU attention generated other tokens than transformers' sdpa")
    new, old = statistics.median(rates[CPU_ATTENTION]), statistics.median(rates["sdpa"])
    print(
        f"generation tokens/s, {CPU_ATTENTION} vs sdpa: {new:,.0f} vs {old:,.0f}, {new / old:.2f}x "
        f"(median of {repeats}, same tokens)"
    )
    return {"generation_tokens_per_s": new, "generation_speedup_vs_sdpa": new / old}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "config" / "default.yaml"))
    parser.add_argument("--warmup-steps", type=int, default=200, help="0: no warm-up comparison")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, help="warm-up threads compared with 1 (default: warmup.threads)")
    logs = parser.add_mutually_exclusive_group()
    logs.add_argument("--workdir", type=Path, help="where `make reproduce` ran (its newest Snakemake log)")
    logs.add_argument("--snakemake-log", type=Path)
    parser.add_argument("--scores", type=Path, help="an evaluation's scores.json, for the scoring-rule ratio")
    parser.add_argument("--model", type=Path, help="a model folder, for the generation tokens/s ratio")
    parser.add_argument("--problems", type=int, default=200, help="problems generated for (x evaluation.n)")
    args = parser.parse_args(argv)
    from hara.config import load_config

    start = time.perf_counter()
    results = {}
    if args.workdir or args.snakemake_log:
        results.update(print_stage_times(args.snakemake_log or newest_log(args.workdir)))
    if args.scores:
        results.update(compare_reward_memo(args.scores, args.repeats))
    config = load_config(args.config)
    if args.model:
        results.update(compare_generation(config, args.model, args.problems, args.repeats))
    if args.warmup_steps > 0:
        threads = args.threads or config["warmup"]["threads"]
        results.update(compare_warmup_threads(config, args.warmup_steps, args.repeats, threads))
    results["bench_s"] = time.perf_counter() - start
    print(
        " ".join(
            f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}" for key, value in results.items()
        )
    )
    return results


if __name__ == "__main__":
    main()

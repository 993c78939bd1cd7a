"""Where the step oracle (hara/data/steps.py) finds a model's mistakes: how much credit step-level assignment can move.

Samples a model on RL prompts at the training temperature and budget, and for each incorrect rollout reports where
its first wrong step starts: the answer step of a direct answer (no steps before it), a worked step (and which), or
nowhere (malformed). The share of an incorrect rollout's tokens *before* its first wrong step is what oracle_steps
takes the penalty off; when mistakes come at the start, step-level credit has little to move.

    python scripts/oracle_locations.py --model results/control/base_model/tiny-s \\
        --prompts results/control/rl_prompts/tiny-s --config config/default.yaml --problems 256
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter


def main() -> None:
    from hara.boxed_answer import math_reward
    from hara.config import load_config
    from hara.data.format import prompt_format
    from hara.data.steps import first_wrong_step
    from hara.models.generate import generate_completions, load_model
    from hara.rlvr.prompts import read_prompts
    from hara.runinfo import set_threads

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="a `hara select-prompts` folder")
    parser.add_argument("--config", required=True)
    parser.add_argument("--problems", type=int, default=256)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = load_config(args.config)
    set_threads(config["threads"])
    records = read_prompts(args.prompts)[: args.problems]
    prompt, training = prompt_format(config), config["training"]
    model, tokenizer = load_model(args.model)
    texts = generate_completions(
        model,
        tokenizer,
        [prompt.prompt(r["problem"]) for r in records for _ in range(args.samples)],
        greedy=False,
        temperature=training["temperature"],
        top_p=training["top_p"],
        max_new_tokens=training["max_completion_length"],
        seed=args.seed,
        stop=prompt.stop,
    )
    kinds, before, steps, by_level = Counter(), [], Counter(), {}
    for index, text in enumerate(texts):
        record = records[index // args.samples]
        if math_reward(text, str(record["answer"])):
            kinds["correct"] += 1
            continue
        check = first_wrong_step(text, str(record["answer"]), record.get("solution"))
        if check.first_wrong is None:
            kinds["incorrect, nothing located"] += 1
            continue
        kind = (
            "direct answer"
            if check.first_wrong == 0 and check.steps[0].answer
            else ("the answer after right steps" if check.steps[check.first_wrong].answer else "a worked step")
        )
        kinds[f"incorrect, first wrong: {kind}"] += 1
        steps[check.first_wrong] += 1
        before.append(check.start / max(1, len(text)))
        by_level.setdefault(f"{record.get('skill')} L{record.get('level')}", []).append(before[-1])
    incorrect = sum(v for k, v in kinds.items() if k.startswith("incorrect"))
    print(
        json.dumps(
            {
                "rollouts": len(texts),
                "pass_rate": kinds["correct"] / max(1, len(texts)),
                "kinds": dict(kinds),
                "first_wrong_step_index": dict(sorted(steps.items())),
                "located_of_incorrect": len(before) / max(1, incorrect),
                "mean_share_before_first_wrong_step": statistics.mean(before) if before else None,
                "median_share_before_first_wrong_step": statistics.median(before) if before else None,
                "mean_share_by_skill_and_level": {
                    k: [len(v), round(statistics.mean(v), 3)] for k, v in sorted(by_level.items())
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

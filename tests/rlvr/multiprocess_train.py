"""Run by tests/rlvr/test_multiprocess.py under ``accelerate launch`` (2 gloo processes on the CPU): one training
run through hara.rlvr.train.train with the parity reward (a random model never answers right), summary on stdout."""

import json
import sys

from hara.config import load_config
from hara.rlvr.train import train


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


if __name__ == "__main__":
    config_path, base, out, mlflow_uri = sys.argv[1:5]
    config = load_config(config_path, overrides=[f"tracking.mlflow_uri={mlflow_uri}", "training.steps=4",
                                                 "training.save_steps=2", "data.train_size=40",
                                                 "training.processes=2"])
    summary = train(config, "tiny-s", "grpo", "hara_tok", 5, out, base_model=base, reward_funcs=[parity_reward])
    print("SUMMARY " + json.dumps(summary), flush=True)

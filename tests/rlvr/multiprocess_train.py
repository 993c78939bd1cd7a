"""Run by tests/rlvr/test_multiprocess.py under ``accelerate launch`` (2 gloo processes on the CPU): one training
run through hara.rlvr.train.train with the parity reward (a random model never answers right), summary on stdout."""

import hashlib
import json
import sys

from transformers import TrainerCallback

import hara.rlvr.session as session_module
from hara.config import load_config
from hara.rlvr.train import train

START_DIGEST: dict[str, str] = {}


class StartWeights(TrainerCallback):
    """sha256 of this rank's weights when training begins (after accelerate's prepare and its broadcast)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        digest = hashlib.sha256()
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
        START_DIGEST["sha256"] = digest.hexdigest()


def build_trainer_recording_start(*args, callbacks=None, **kwargs):
    from transformers.distributed.fsdp import is_fsdp_enabled

    # whether transformers loaded the weights in local rank 0 only (asked while the run's process group exists: the
    # run ends it)
    START_DIGEST["rank_zero_loading"] = is_fsdp_enabled()
    return _build_trainer(*args, callbacks=[*(callbacks or []), StartWeights()], **kwargs)


_build_trainer, session_module.build_trainer = session_module.build_trainer, build_trainer_recording_start


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


if __name__ == "__main__":
    config_path, base, out, mlflow_uri = sys.argv[1:5]
    config = load_config(
        config_path,
        overrides=[
            f"tracking.mlflow_uri={mlflow_uri}",
            "training.steps=4",
            "training.save_steps=2",
            "data.train_size=40",
            "training.processes=2",
        ],
    )
    summary = train(config, "tiny-s", "grpo", "hara_tok", 5, out, base_model=base, reward_funcs=[parity_reward])
    import os

    import torch.distributed as dist

    summary.update(
        start_weights=START_DIGEST.get("sha256"),
        rank=int(os.environ["RANK"]),
        read_weights_from_disk=not START_DIGEST.get("rank_zero_loading") or int(os.environ["LOCAL_RANK"]) == 0,
        group_ended=not dist.is_initialized(),
    )
    print("SUMMARY " + json.dumps(summary), flush=True)

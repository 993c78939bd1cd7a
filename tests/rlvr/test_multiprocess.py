"""Multi-process training through the real launcher: `accelerate launch` with the repository's FSDP config runs two
gloo processes on the CPU (data parallel: accelerate shards with FSDP only on GPUs). Each process generates and reweights whole groups, only rank 0 writes metrics and talks to
MLflow, and a run SIGKILLed after a checkpoint resumes to the same final weights as an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import mlflow
import pytest
import torch
from safetensors.torch import load_file

from hara.rlvr.launch import LAUNCHED, launch_command
from tests.helpers import REPO, SMOKE

SCRIPT = Path(__file__).with_name("multiprocess_train.py")


def command(base: Path, out: Path, tmp: Path) -> list[str]:
    return launch_command(
        2,
        "config/accelerate/fsdp.yaml",
        [str(SCRIPT), str(SMOKE), str(base), str(out), f"sqlite:///{tmp}/mlflow.db"],
        cuda=False,
    )


def environment() -> dict[str, str]:
    return {**os.environ, LAUNCHED: "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (torchrun starts each worker in a session of its own, so killing the
    launcher's process group would leave the workers running; a preempted Slurm job loses all of them)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def launch(base: Path, out: Path, tmp: Path) -> list[dict]:
    done = subprocess.run(
        command(base, out, tmp), capture_output=True, text=True, env=environment(), cwd=REPO, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-15000:]
    return [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]


@pytest.fixture(scope="module")
def uninterrupted(tiny_base, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mp")
    return tmp, launch(tiny_base, tmp / "run", tmp)


def test_two_gloo_processes_train_data_parallel(uninterrupted, tiny_base):
    tmp, summaries = uninterrupted
    assert len(summaries) == 2  # one per process
    assert {s["processes"] for s in summaries} == {2}
    # accelerate 1.15 turns the FSDP config into FSDP only on accelerators; on the CPU the same launch is plain
    # data parallel over gloo (MULTI_CPU), which is what this test can exercise here
    assert {s["distributed_type"] for s in summaries} == {"DistributedType.MULTI_CPU"}
    assert [s["mlflow_run_id"] is not None for s in summaries].count(True) == 1  # rank 0 only
    assert all(s["group_ended"] for s in summaries)  # every rank ends the process group with its run
    final = load_file(tmp / "run" / "final" / "model.safetensors")
    base = load_file(tiny_base / "model.safetensors")
    assert any(not torch.equal(final[k], base[k]) for k in base), "no parameter moved"


def test_only_local_rank_zero_reads_the_weights_and_every_rank_starts_from_them(uninterrupted, tiny_base):
    """fsdp_cpu_ram_efficient_loading: rank 1 never reads the file (one host copy per node); the broadcast gives it
    rank 0's weights before the first step."""
    _, summaries = uninterrupted
    by_rank = {s["rank"]: s for s in summaries}
    assert (by_rank[0]["read_weights_from_disk"], by_rank[1]["read_weights_from_disk"]) == (True, False)
    assert by_rank[0]["start_weights"] == by_rank[1]["start_weights"] is not None


def test_only_rank_zero_logs_and_novelty_ran_on_whole_groups(uninterrupted):
    tmp, _ = uninterrupted
    lines = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3, 4]  # one line per step: no rank wrote twice
    assert all(x["hara/capture_from_generation"] == 1 for x in lines)
    assert sum(x["hara/groups"] for x in lines) > 0, "HarA never reweighted a group"
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    runs = mlflow.search_runs(search_all_experiments=True)
    assert len(runs) == 1
    history = mlflow.MlflowClient().get_metric_history(runs.run_id[0], "train/loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]


def test_sigkilled_multiprocess_run_resumes_to_the_same_weights(uninterrupted, tiny_base):
    tmp, _ = uninterrupted
    out = tmp / "killed"
    process = subprocess.Popen(
        command(tiny_base, out, tmp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment(),
        cwd=REPO,
    )
    checkpoint = out / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 300
    while not checkpoint.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoint.is_file(), "no checkpoint-2 before the kill"
    for pid in process_tree(process.pid):  # the launcher and both workers at once, like a preemption
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()
    assert not (out / "final").exists(), "killed too late: the run had finished"
    summaries = launch(tiny_base, out, tmp)
    assert [s["resumed_from"] for s in summaries] == [str(out / "checkpoints" / "checkpoint-2")] * 2, summaries
    resumed = load_file(out / "final" / "model.safetensors")
    reference = load_file(tmp / "run" / "final" / "model.safetensors")
    for key, value in reference.items():
        torch.testing.assert_close(resumed[key], value, rtol=0, atol=0)

"""Resuming after damage: a truncated, corrupted, half-written or unsafe latest checkpoint is skipped with a warning
and the run resumes from the previous one to the same final weights as an undamaged run; every torch.load of the
resume path uses weights_only=True; a run folder made with another config is refused with the differing keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hara.cli import main
from hara.rlvr.checkpoints import MANIFEST, CheckpointWarning, checkpoint_problem, write_manifest
from tests.helpers import REPO, SMOKE, smoke_train_args

pytestmark = pytest.mark.slow


def train_args(base: Path, out: Path, store: Path, *extra: str) -> list[str]:
    """`hara train` on the smoke config: 4 steps, checkpoints at steps 2 and 4."""
    return [
        *smoke_train_args("hara_tok", 5),
        "--out",
        str(out),
        "--base-model",
        str(base),
        "--set",
        f"tracking.mlflow_uri=sqlite:///{store}/mlflow.db",
        "--set",
        "training.steps=4",
        "--set",
        "training.save_steps=2",
        "--set",
        "data.train_size=20",
        *extra,
    ]


def parity_reward(completions, **kwargs):
    """Deterministic reward that splits a random model's rollouts into both outcomes (math-verify scores them all
    0, the loss would be 0 and no weight would move: every comparison of weights below would hold vacuously)."""
    return [float(sum(map(ord, str(c))) % 2) for c in completions]


@pytest.fixture(autouse=True, scope="module")
def rollouts_with_signal():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("hara.rlvr.rewards.accuracy_reward", parity_reward)
        yield


@pytest.fixture(scope="module")
def finished_run(tiny_base, tmp_path_factory) -> Path:
    """One uninterrupted run: the reference every resumed run must reproduce exactly (and that moved weights)."""
    root = tmp_path_factory.mktemp("reference")
    assert main(train_args(tiny_base, root / "run", root)) == 0
    final, base = load_file(root / "run" / "final" / "model.safetensors"), load_file(tiny_base / "model.safetensors")
    assert any(not torch.equal(final[k], base[k]) for k in base), "training moved no weight"
    return root / "run"


def crashed_copy(finished: Path, target: Path) -> Path:
    """The reference run as it was when killed after its last checkpoint (final/ not yet written)."""
    shutil.copytree(finished, target)
    shutil.rmtree(target / "final")
    return target


class Unsafe:
    """A pickle payload: loading it without weights_only would create the file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def flip_middle_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def plant_unsafe_pickle(file: Path) -> None:
    """Replace a pickle by one that runs code, and re-sign the manifest (an attacker controls both)."""
    torch.save({"payload": Unsafe(str(file.parent.parent.parent / "pwned"))}, file)
    write_manifest(file.parent)


DAMAGE = {
    "truncated_weights": (lambda c: truncate(c / "model.safetensors"), "truncated"),
    "corrupted_optimizer": (lambda c: flip_middle_byte(c / "optimizer.pt"), "does not match its xxh3_128"),
    "half_written": (lambda c: (c / "trainer_state.json").unlink(), "the save did not finish"),
    "unsafe_pickle": (lambda c: plant_unsafe_pickle(c / "rng_state.pth"), "Weights only load failed"),
}


def recording_torch_load(monkeypatch) -> list[dict]:
    """Wrap the real torch.load to record the keyword arguments of every call (HF's resume and ours)."""
    calls, real = [], torch.load

    def load(*args, **kwargs):
        calls.append(dict(kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    return calls


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_latest_checkpoint_falls_back_to_the_previous(finished_run, tiny_base, tmp_path, monkeypatch, damage):
    run = crashed_copy(finished_run, tmp_path / "run")
    hurt, expected = DAMAGE[damage]
    hurt(run / "checkpoints" / "checkpoint-4")
    assert expected in checkpoint_problem(run / "checkpoints" / "checkpoint-4")
    assert checkpoint_problem(run / "checkpoints" / "checkpoint-2") is None
    loads = recording_torch_load(monkeypatch)

    # evaluation.* does not change what training computes: editing it between crash and rerun is allowed
    with pytest.warns(CheckpointWarning, match=f"checkpoint-4: .*{expected}.*falling back"):
        assert main(train_args(tiny_base, run, tmp_path, "--set", "evaluation.n=3")) == 0

    assert json.loads((run / "run_info.json").read_text())["resumed_from"].endswith("checkpoint-2")
    assert (run / "checkpoints" / "corrupt-checkpoint-4").is_dir()  # kept for inspection, out of HF's way
    assert checkpoint_problem(run / "checkpoints" / "checkpoint-4") is None  # saved again by the resumed run
    resumed, reference = (
        load_file(run / "final" / "model.safetensors"),
        load_file(finished_run / "final" / "model.safetensors"),
    )
    for key in reference:
        torch.testing.assert_close(resumed[key], reference[key], rtol=0, atol=0)
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert loads and all(call.get("weights_only") is True for call in loads), loads
    assert not (run / "pwned").exists()


def test_every_checkpoint_has_a_manifest_of_its_files(finished_run):
    for checkpoint in sorted((finished_run / "checkpoints").glob("checkpoint-*")):
        files = json.loads((checkpoint / MANIFEST).read_text())["files"]
        assert {"model.safetensors", "optimizer.pt", "rng_state.pth", "trainer_state.json"} <= set(files)
        assert checkpoint_problem(checkpoint) is None


def test_no_hara_code_calls_torch_load_without_weights_only():
    offenders = [
        f"{path}:{number}"
        for path in sorted((REPO / "hara").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "torch.load(" in line and "weights_only=True" not in line
    ]
    assert offenders == []


def test_changed_config_is_refused_naming_the_keys(finished_run, tiny_base, tmp_path, capsys):
    run = crashed_copy(finished_run, tmp_path / "run")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code = main(
        train_args(tiny_base, run, tmp_path, "--set", "training.lr=0.002", "--set", "hara.hara.barycenter_size=3")
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "hara.hara.barycenter_size, training.lr" in err and "refusing to resume" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing touched
    # a finished run is refused too, rather than reported as finished under a config it never ran
    assert main(train_args(tiny_base, finished_run, tmp_path, "--set", "training.lr=0.002")) == 2


def test_changed_keys_ignore_other_cells_stages_and_storage_places():
    from hara.config import load_config
    from hara.rlvr.checkpoints import changed_keys

    saved = load_config(SMOKE)
    elsewhere = load_config(
        SMOKE,
        overrides=[
            "grid.seeds=[0,1]",
            "evaluation.n=4",
            "analyses.enabled=true",
            "tracking.mlflow_uri=http://127.0.0.1:5000",
            "models.sizes=[tiny-s,tiny-m]",
        ],
    )
    assert changed_keys(saved, elsewhere) == []
    changed = load_config(SMOKE, overrides=["training.lr=0.5", "rlvr.grpo.epsilon_high=0.3", "seed=1"])
    assert changed_keys(saved, changed) == ["rlvr.grpo.epsilon_high", "seed", "training.lr"]
    grown = {**saved, "training": {**saved["training"], "new_knob": 1}}  # a key the saved config did not have yet
    assert changed_keys(saved, grown) == ["training.new_knob"]


def test_a_finished_run_keeps_its_checkpoints_weights_or_nothing_as_configured(finished_run, tiny_base, tmp_path):
    """training.finished_checkpoints: `weights` drops what only a resume reads (optimizer, scheduler, RNG states)
    and keeps evaluable weights that pass their rewritten manifest, marked unresumable; `delete` leaves final/ and
    mlflow_run.json."""
    run = shutil.copytree(finished_run, tmp_path / "run")
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"))
    weights = {c.name: (c / "model.safetensors").read_bytes() for c in checkpoints}
    assert all((c / "optimizer.pt").is_file() for c in checkpoints)  # `keep` (the smoke config): all of it
    assert main(train_args(tiny_base, run, tmp_path, "--set", "training.finished_checkpoints=weights")) == 0
    for checkpoint in checkpoints:
        names = {p.name for p in checkpoint.iterdir()}
        assert not {n for n in names if n.startswith(("optimizer", "scheduler", "rng_state"))}, names
        assert {"model.safetensors", "config.json", "trainer_state.json", MANIFEST} <= names
        assert (checkpoint / "model.safetensors").read_bytes() == weights[checkpoint.name]
        # whole and verified (the manifest is rewritten), but marked: a run never resumes from it
        assert checkpoint_problem(checkpoint).startswith("pruned to its weights")
    assert main(train_args(tiny_base, run, tmp_path, "--set", "training.finished_checkpoints=delete")) == 0
    assert not list((run / "checkpoints").glob("checkpoint-*"))
    assert (run / "checkpoints" / "mlflow_run.json").is_file() and (run / "final" / "model.safetensors").is_file()

"""The TRL / transformers / vLLM seam (hara/rlvr/seam.py): the installed versions are those its workarounds were
written against, and every private TRL method the trainer overrides still exists with the parameters it overrides."""

from __future__ import annotations

import inspect
from importlib import metadata

import pytest
from trl import GRPOTrainer

from hara.rlvr.seam import PINNED, TRL_METRICS, TRL_OVERRIDES
from hara.rlvr.session import trainer_class
from tests.helpers import REPO


def installed(package: str) -> str | None:
    for distribution in (package, f"{package}-cpu"):  # vLLM's CPU build installs the same module
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


@pytest.mark.parametrize("package", sorted(PINNED))
def test_the_installed_version_is_the_one_the_workarounds_were_written_against(package):
    version = installed(package)
    if version is None and package == "vllm":
        pytest.skip("vLLM is not installed (make setup VLLM_CPU=)")
    assert version is not None and version.split("+")[0] == PINNED[package], (
        f"{package} {version}: re-read hara/rlvr/seam.py against it, then update PINNED"
    )


def test_every_private_method_the_trainer_overrides_is_listed_and_keeps_its_parameters():
    trainer = trainer_class(use_vllm=False)
    overridden = {
        name
        for name, value in vars(trainer).items()
        if callable(value) and name.startswith("_") and not name.startswith("__") and hasattr(GRPOTrainer, name)
    }
    assert overridden == set(TRL_OVERRIDES)
    for name, expected in TRL_OVERRIDES.items():
        upstream = tuple(inspect.signature(getattr(GRPOTrainer, name)).parameters)
        assert upstream[: len(expected)] == expected, name
        ours = inspect.signature(getattr(trainer, name)).parameters.values()
        named = tuple(p.name for p in ours if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        forwards = any(p.kind == p.VAR_KEYWORD for p in ours)
        assert named == expected and (forwards or upstream == expected), name


def test_trl_builds_the_private_metrics_the_harness_appends_to_as_pinned():
    """log_train_metric appends to TRL's private per-step metric lists: TRL's constructor must still build them so."""
    assert TRL_METRICS in inspect.getsource(GRPOTrainer.__init__), "re-read hara/rlvr/seam.py's log_train_metric"


def test_no_module_but_the_seam_touches_trl_privates_or_patches_generate():
    """Every private-attribute write into TRL's trainer and every patch of the policy's generate lives in seam.py,
    where the pins above cover it."""
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "hara").rglob("*.py"))
        if path.name != "seam.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "._metrics[" in line or ".generate = " in line or "register_package(" in line
    ]
    assert offenders == []

"""Eight Optuna workers share one sweep study at the same moment, through the harness's own storage (hara.sweeps:
the study's JournalStorage file, or an RDB URL from the study file): every trial, its value and every intermediate
value arrive, and trial numbers are unique. The test prints the counts it expected and found. (The budget and
claiming logic with real training trials is tested in tests/sweeps/test_sweeps.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO
from tests.reliability.servers import run_together

WORKERS, TRIALS, STEPS = 8, 5, 4
pytestmark = pytest.mark.slow

# One worker: wait for the others, open the study the way `hara sweep run` does, then ask / report / tell TRIALS
# trials with values that say which worker and trial wrote them.
WORKER = """
import sys, time
from pathlib import Path
from hara.sweeps.study import load_study
from hara.sweeps.worker import open_storage, open_study
study_file, results = sys.argv[1], sys.argv[2]
index, trials, steps = (int(x) for x in sys.argv[3:6])
spec = load_study(study_file, overrides=[f"results_dir={results}"])
root = Path(results)
(root / f"ready{index}").touch()
while not (root / "go").exists():
    time.sleep(0.01)
study = open_study(spec, open_storage(spec))  # all at once, as `hara sweep run --workers N` starts them
for n in range(trials):
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("writer", [index, n])
    for step in range(steps):
        trial.report(index * 1000 + n * 10 + step, step)
    study.tell(trial, index * 1000 + n)
"""


def write_study_file(folder: Path, storage: str | None) -> Path:
    study = yaml.safe_load((REPO / "sweeps" / "smoke.yaml").read_text(encoding="utf-8"))
    study.update(base_config=str(REPO / "config" / "smoke.yaml"), storage=storage)
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def run_workers(study_file: Path, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    run_together(
        [
            [sys.executable, "-c", WORKER, str(study_file), str(results), str(i), str(TRIALS), str(STEPS)]
            for i in range(WORKERS)
        ],
        results,
    )


def check_study(study_file: Path, results: Path, label: str) -> None:
    from hara.sweeps.study import load_study
    from hara.sweeps.worker import open_storage, open_study

    spec = load_study(study_file, overrides=[f"results_dir={results}"])
    trials = open_study(spec, open_storage(spec)).get_trials(deepcopy=False)
    expected = {(i, n) for i in range(WORKERS) for n in range(TRIALS)}
    found = {tuple(t.user_attrs["writer"]) for t in trials if t.state.name == "COMPLETE"}
    points = sum(len(t.intermediate_values) for t in trials)
    print(
        f"{label}: trials expected {len(expected)} found {len(found)} (complete, distinct writers); intermediate "
        f"values expected {len(expected) * STEPS} found {points}"
    )
    assert found == expected and len(trials) == len(expected)
    assert sorted(t.number for t in trials) == list(range(len(expected)))  # no number given twice
    for t in trials:
        index, n = t.user_attrs["writer"]
        assert t.value == index * 1000 + n
        assert t.intermediate_values == {s: index * 1000 + n * 10 + s for s in range(STEPS)}


@pytest.mark.parametrize("backend", ["journal_file", "sqlite_rdb"])
def test_eight_workers_share_one_study_losing_nothing(tmp_path, backend):
    storage = f"sqlite:///{tmp_path}/optuna.db" if backend == "sqlite_rdb" else None
    study_file = write_study_file(tmp_path, storage)
    run_workers(study_file, tmp_path / "results")
    check_study(study_file, tmp_path / "results", backend)

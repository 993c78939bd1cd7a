"""The one-factor ablation table: runs compared only where exactly one factor differs."""

from __future__ import annotations

import copy
import json

from hara.config import load_config
from hara.report import build_report
from hara.report.ablation import ablation_table, factor_differences, run_factors
from hara.runinfo import dump_config
from tests.helpers import REPO


def write_cell(results, config, method, solved, lr=None, step_cpu_s=1.0):
    """A finished grid cell: resolved config, run info, metrics and an evaluation with per-problem outcomes."""
    cell = f"tiny-s/grpo/{method}/seed0"
    resolved = copy.deepcopy(config)
    if lr is not None:
        resolved["training"]["lr"] = lr
    train = results / "train" / cell
    dump_config(resolved, train / "resolved_config.yaml")
    (train / "run_info.json").write_text(
        json.dumps({"size": "tiny-s", "rlvr": "grpo", "method": method, "train_seed": 0})
    )
    (train / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "time/step_s": 1.0, "time/cpu_s": step_cpu_s}) + "\n" for i in (1, 2))
    )
    fingerprint = {"benchmark_sha256": "x", "n": 1}
    benchmarks = {
        b: {
            "score": solved / 20,
            "metric": "pass@1",
            "eval_fingerprint": fingerprint,
            "predictions": [{"id": f"q{i:02d}", "pass@1": float(i < solved)} for i in range(20)],
        }
        for b in config["data"]["benchmarks"]
    }
    (results / "eval" / cell).mkdir(parents=True)
    (results / "eval" / cell / "scores.json").write_text(json.dumps({"benchmarks": benchmarks}))


def test_a_method_cell_is_compared_on_its_one_factor_and_a_two_factor_one_is_flagged(tmp_path):
    config = load_config(REPO / "config" / "smoke.yaml")
    config["grid"]["methods"] = ["none", "hara_tok", "hara_seq"]
    write_cell(tmp_path, config, "none", 5)
    write_cell(tmp_path, config, "hara_tok", 15, step_cpu_s=1.25)
    write_cell(tmp_path, config, "hara_seq", 5, lr=1e-2)  # another method and another learning rate
    rows = {row[0]: row for row in ablation_table(config, tmp_path).rows}
    tok = rows["tiny-s/grpo/hara_tok/seed0"]
    assert tok[1:3] == ["tiny-s/grpo/none/seed0", "cell.method: none → hara_tok"]
    assert tok[3].startswith("+50.0 [") and tok[3].endswith("better") and tok[4] == "+0.250 s (CPU)"
    seq = rows["tiny-s/grpo/hara_seq/seed0"]
    assert seq[2].startswith("not compared: 2 factors differ (cell.method: none → hara_seq; training.lr: 0.001 → 0.01")
    assert seq[3:] == ["n/a", "n/a"]
    assert "tiny-s/grpo/none/seed0" not in rows  # the baseline has no baseline

    build_report(config, tmp_path, tmp_path / "report", mlflow=False)
    tables = {t["key"]: t for t in json.loads((tmp_path / "report" / "tables.json").read_text())}
    assert tables["ablation"]["rows"] == [list(r) for r in ablation_table(config, tmp_path).rows]


def test_bookkeeping_keys_are_not_factors(tmp_path):
    config = load_config(REPO / "config" / "smoke.yaml")
    write_cell(tmp_path, config, "none", 5)
    base = run_factors(tmp_path / "train" / "tiny-s/grpo/none/seed0")
    renamed = {**base, "cell.method": "hara_tok"}
    assert factor_differences(renamed, base) == ["cell.method: none → hara_tok"]
    assert not any(key.startswith(("tracking.", "resources.", "name")) for key in base)

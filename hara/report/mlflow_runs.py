"""The MLflow UI as the comparison dashboard: `hara report` writes each training run's summary into its MLflow run.

Every training run of the grid (found through the ``mlflow_run.json`` that training wrote into
``<results>/train/<size>/<rlvr>/<method>/seed<k>/``) gets, at step 0:

- ``eval/avg_pass_at_1_pct`` (:data:`AVERAGE`): its pass@1 averaged over the config's benchmarks, in percent rounded
  as the report shows it, when it has them all;
- ``vs_<b>/avg_diff_pts``, ``vs_<b>/avg_ci_low_pts``, ``vs_<b>/avg_ci_high_pts`` and ``vs_<b>/avg_mde_pts``
  (percentage points, rounded as the report shows them) and the tags ``vs_<b>.verdict`` (the verdict after correction
  over the comparison's family) and ``vs_<b>.low_power``: its cell's paired difference from method ``<b>`` on the
  benchmark average with the raw interval and the minimum detectable effect, exactly as in the report's
  comparisons.json (``none`` for every method, ``hara_seq`` for ``hara_tok``). A comparison pairs all seeds of a
  cell, so every seed's run carries the same numbers; the baseline's own runs get ``vs_none.verdict`` = ``baseline``;
- its benchmarks as dataset inputs (the runs table's Dataset column, :func:`hara.evaluation.tracking.benchmark_inputs`);
- a description (``mlflow.note.content``, the run page's "Description"): the cell, links to the report and to the
  tables below, its scores in words. A description someone wrote in the UI is kept.

The experiment gets two saved views of the runs table (the UI's "Views" menu; links in every description):
:data:`VIEW_PER_RUN` and :data:`VIEW_BY_METHOD` (seeds averaged per method), with those columns picked, the training
runs only, best average first; their chart view shows the averaged metrics only. Without them the table shows no
score until the user picks one among ~50 metric keys.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from hara.layout import COMPARISONS, REPORT_HTML, RUN_FILE, run_dir
from hara.report.tables import BASELINE
from hara.results.collect import Cell, Run
from hara.results.files import read_json
from hara.tracking.ui import VIEW_BY_METHOD, VIEW_PER_RUN

__all__ = [
    "AVERAGE",
    "average_pass_at_1",
    "comparison_summary",
    "describe",
    "log_run_summaries",
    "saved_views",
]

AVERAGE = "eval/avg_pass_at_1_pct"  # `eval/avg_pass@1` in percent, spelled as MLflow accepts it
#: The summary's numbers as the report prints them (percent, one decimal): the runs table shows them as they are.
DIGITS = 1
#: comparisons.json's fields (pass@1 fractions) -> the summary metric of each (percentage points).
DIFFERENCE_METRICS = {"difference": "avg_diff_pts", "ci_low": "avg_ci_low_pts", "ci_high": "avg_ci_high_pts"}
BASELINE_VERDICT = "baseline"
NOTE_TAG = "mlflow.note.content"
NOTE_HEADER = "**HarA training run**"  # how a description that hara wrote is told from one a person wrote
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow's saved views are experiment tags under this prefix
REPORT_ARTIFACT = f"report/{REPORT_HTML}"  # where log_report puts the page among the report run's artifacts


def average_pass_at_1(config: Mapping, run: Run) -> float | None:
    """Mean pass@1 over the config's benchmarks; None unless the run was scored on all of them (an average over
    fewer would not be comparable with the other runs')."""
    benchmarks = config["data"]["benchmarks"]
    if not all(name in run.scores for name in benchmarks):
        return None
    return statistics.fmean(run.scores[name] for name in benchmarks)


def of_cell(cell: Cell, comparisons: Iterable[Mapping]) -> list[Mapping]:
    """The comparisons whose A side is the cell's method in its (size, rlvr)."""
    return [
        found
        for found in comparisons
        if (found["size"], found["rlvr"], found["a"]) == (cell.size, cell.rlvr, cell.method)
    ]


def points(value: float) -> float:
    """A pass@1 fraction in percent (points), rounded as the report prints it."""
    return round(100 * value, DIGITS)


def comparison_summary(cell: Cell, comparisons: Iterable[Mapping]) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of the cell's paired differences on the benchmark average, one group per comparison of the
    cell; the baseline's own runs are tagged as the baseline."""
    metrics, tags = {}, {f"vs_{BASELINE}.verdict": BASELINE_VERDICT} if cell.method == BASELINE else {}
    for found in of_cell(cell, comparisons):
        average, prefix = found["average"], f"vs_{found['b']}"
        metrics.update({f"{prefix}/{name}": points(average[key]) for key, name in DIFFERENCE_METRICS.items()})
        metrics[f"{prefix}/avg_mde_pts"] = points(average["corrected"]["mde"])
        tags[f"{prefix}.verdict"] = average["corrected"]["verdict"]
        tags[f"{prefix}.low_power"] = str(average["corrected"]["low_power"]).lower()
        tags[f"{prefix}.interval"] = average["basis"]  # crossed / declared run variance / problems only
    return metrics, tags


def baselines(comparisons: Iterable[Mapping]) -> list[str]:
    """The B sides of the comparisons, the baseline first (the order of the columns)."""
    names = {found["b"] for found in comparisons}
    return sorted(names, key=lambda name: (name != BASELINE, name))


def _signed(value: float) -> str:
    return f"{100 * value:+.{DIGITS}f}"


def _comparison_line(found: Mapping) -> str:
    avg, fixed = found["average"], found["average"]["corrected"]
    power = " (low power: it cannot rule out the effect the paper claims)" if fixed["low_power"] else ""
    return (
        f"**vs {found['b']}**: {_signed(avg['difference'])} [{_signed(avg['ci_low'])}, {_signed(avg['ci_high'])}] "
        f"points (raw 95% interval), **{fixed['verdict']}** after correction over {fixed['family_size']} "
        f"comparisons, minimum detectable effect {100 * fixed['mde']:.{DIGITS}f} points{power}; paired over "
        f"{avg['seeds']} seed(s) x {avg['problems']} problems, the same for every seed of the cell"
        + (
            f"; the interval adds the run variance declared in {avg['run_variance']}."
            if avg.get("run_variance")
            else "."
        )
        + (
            " It covers the problems only (no run variance declared) and decides no claim."
            if avg["basis"] == "problems only"
            else ""
        )
    )


def describe(
    cell: Cell, average: float | None, comparisons: Iterable[Mapping], report_file: Path, links: Mapping[str, str]
) -> str:
    """The run's description (Markdown): which cell, where the report is, its scores in words. ``links``: in-app
    links (:func:`hara.tracking.ui_path`) of the report page (``report``) and of the saved views (other labels)."""
    views = " · ".join(f"[{label}]({link})" for label, link in links.items() if label != "report")
    score = (
        f"**Average pass@1** over the config's benchmarks: {average:.{DIGITS}f}%."
        if average is not None
        else "**Average pass@1**: n/a (not scored on every benchmark of the config)."
    )
    if cell.method == BASELINE:
        score += f" This is the baseline ({BASELINE}) that the other methods are compared with."
    parts = [
        (
            f"{NOTE_HEADER}: size `{cell.size}`, RLVR `{cell.rlvr}`, method `{cell.method}`, seed {cell.seed} "
            f"(`train/{cell.path()}`)."
        ),
        f"**Report**: `{report_file}` ([open in MLflow]({links['report']}))",
        score,
        *map(_comparison_line, of_cell(cell, comparisons)),
        f"**Compare in MLflow**: {views}",
    ]
    return "\n\n".join(parts)


def _view_state(columns: list[str], group_by_method: bool) -> dict:
    """MLflow's runs-table state (the keys its "Save view" writes): the training runs, ``columns`` picked and first,
    best average first, charts filtered to the averaged metrics; grouped by the ``method`` tag (seeds averaged)."""
    widths = {"attributes.`Run Name`": 260, **dict.fromkeys(columns, 170)}  # pixels: room for a full float
    state = {
        "searchFilter": "tags.stage = 'train'",
        "orderByKey": f"metrics.`{AVERAGE}`",
        "orderByAsc": False,
        "selectedColumns": [*columns, "attributes.`Dataset`"],
        "chartsSearchFilter": "avg_",
        "columnOrder": ["attributes.`Run Name`", *columns, "attributes.`Dataset`"],
        "columnWidths": widths,
    }
    if group_by_method:
        state["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "method"}]}
    return state


def saved_views(comparisons: Iterable[Mapping], now_ms: int) -> dict[str, str]:
    """Experiment tags that hold :data:`VIEW_PER_RUN` and :data:`VIEW_BY_METHOD` in the envelope MLflow's UI reads
    (``{"name", "createdAt", "updatedAt", "state": <JSON text>}``)."""
    columns = [f"metrics.`{AVERAGE}`"]
    for name in baselines(comparisons):
        columns += [f"metrics.`vs_{name}/{key}`" for key in (*DIFFERENCE_METRICS.values(), "avg_mde_pts")]
        columns.append(f"tags.`vs_{name}.verdict`")
    return {
        VIEW_TAG_PREFIX + key: json.dumps(
            {"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(_view_state(columns, grouped))}
        )
        for (key, name), grouped in ((VIEW_PER_RUN, False), (VIEW_BY_METHOD, True))
    }


def read_comparisons(out_dir: Path) -> list[dict]:
    """The report's comparisons.json (written by build_report before it logs)."""
    path = out_dir / COMPARISONS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; the run summaries are the report's numbers, build the report first")
    return read_json(path)


def _benchmark_entries(run: Run) -> dict[str, dict]:
    """The run's benchmarks in scores.json's shape, as far as the dataset inputs need them."""
    return {
        name: {"eval_fingerprint": fingerprint, "n_problems": len(run.problems.get(name, {}))}
        for name, fingerprint in run.fingerprints.items()
    }


def _links(experiment_id: str, report_run_id: str) -> dict[str, str]:
    """The description's links: the report page among the report run's artifacts, and the two saved views. The
    report run and the training runs share the config's experiment (both are named after config['name'])."""
    from hara.tracking import ui_path

    return {
        "report": ui_path(experiment_id, f"runs/{report_run_id}/artifacts/{REPORT_ARTIFACT}"),
        "scores per run": ui_path(experiment_id, "runs", f"viewStateShareKey={VIEW_PER_RUN[0]}"),
        "scores by method": ui_path(experiment_id, "runs", f"viewStateShareKey={VIEW_BY_METHOD[0]}"),
    }


def _summarize(
    client, run_id: str, config: Mapping, run: Run, comparisons: list[dict], report_file: Path, report_run_id: str
) -> str:
    """Log one training run's summary metrics, verdict tags, dataset inputs and description; returns its
    experiment's id."""
    from mlflow.entities import Metric, RunTag

    from hara.evaluation.tracking import log_benchmark_inputs

    average, logged = average_pass_at_1(config, run), client.get_run(run_id)
    average = None if average is None else points(average)
    metrics, tags = comparison_summary(run.cell, comparisons)
    metrics.update({AVERAGE: average} if average is not None else {})
    note = logged.data.tags.get(NOTE_TAG, "")
    if not note or note.startswith(NOTE_HEADER):  # a description written by a person is theirs, not replaced
        links = _links(logged.info.experiment_id, report_run_id)
        tags[NOTE_TAG] = describe(run.cell, average, comparisons, report_file, links)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(key, float(value), now, 0) for key, value in metrics.items()],
        tags=[RunTag(key, value) for key, value in tags.items()],
    )
    log_benchmark_inputs(client, run_id, _benchmark_entries(run))
    _log_data_and_models(client, run_id, logged, config, run)
    return logged.info.experiment_id


def _log_data_and_models(client, run_id: str, logged, config: Mapping, run: Run) -> None:
    """The run's training data as dataset inputs, its checkpoint candidates as logged models (mlflow_models)."""
    from hara.report.mlflow_models import data_inputs, log_candidate_models

    results = Path(config["results_dir"])
    inputs = data_inputs(results, run.cell.size)
    if inputs:
        client.log_inputs(run_id, datasets=inputs)
    validation = next((i.dataset.source for i in inputs if i.dataset.name == "validation"), None)
    sha = json.loads(validation)["tags"]["sha256"] if validation else None
    log_candidate_models(client, run_id, logged.info.experiment_id, logged.info.run_name, run, sha)


def log_run_summaries(
    config: Mapping, results: str | Path, runs: Mapping[Cell, Run], out_dir: str | Path, report_run_id: str | None
) -> list[str]:
    """Write the summaries into every training run that has an MLflow run, and the saved views into their
    experiments; returns the run ids. ``report_run_id``: the report's MLflow run (None: the report was not logged
    to MLflow, and nothing is)."""
    if report_run_id is None:
        return []
    from hara.tracking import read_run_file, tracking_client

    out_dir, config = Path(out_dir), {**config, "results_dir": str(results)}  # where the data inputs are read
    comparisons, report_file = read_comparisons(out_dir), (out_dir / REPORT_HTML).resolve()
    clients, experiments, done = {}, set(), []
    for cell, run in runs.items():
        path = run_dir(results, cell) / RUN_FILE
        if not path.is_file():  # a cell not trained (yet), or trained without MLflow
            continue
        reference = read_run_file(path)  # the store of the results folder the file is in (a copy's own)
        uri = reference["tracking_uri"]
        if uri not in clients:
            clients[uri] = tracking_client(uri)
        client = clients[uri]
        experiments.add(
            (uri, _summarize(client, reference["run_id"], config, run, comparisons, report_file, report_run_id))
        )
        done.append(reference["run_id"])
    for uri, experiment_id in sorted(experiments):
        for key, value in saved_views(comparisons, int(time.time() * 1000)).items():
            clients[uri].set_experiment_tag(experiment_id, key, value)
    return done

"""The interpretability study: sampled rollouts of a trained checkpoint, their stages from the configured labeller
(:mod:`hara.analysis.labellers`: the rule-based labeller of the synthetic solutions on the embedded default, a local
LLM with a versioned prompt on the cluster, as in the paper), their hidden states (the trainer's capture, same
layer), the plans of W / GW / FGW barycenters per problem (:mod:`hara.analysis.transport`) and the measures of
:mod:`hara.analysis.mapping`, for every number of sampled rollouts in ``analyses.interpretability.rollouts``.

The output names the labeller, the prompt version and sha256 and the share of segments the LLM labeller left to
the rules (the table's last columns, the note, and ``labels.json`` next to the CSV).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from hara.analysis.claims import STRUCTURE_NOTE
from hara.analysis.labellers import Labeller, Labels, build_labeller
from hara.analysis.mapping import mapping_scores
from hara.analysis.output import PROBLEM_SCORES, AnalysisResult, fmt, pyplot, save_figure
from hara.analysis.registry import get_analysis
from hara.analysis.stages import STAGES
from hara.analysis.transport import (
    STRUCTURE_LABELS,
    first_rollouts,
    problem_plans,
    variant_alphas,
    variant_key,
    variant_label,
)
from hara.analysis.workflow import probe_checkpoint
from hara.knobs import read_knobs
from hara.ot.barycenter import BarycenterConfig
from hara.ot.linearized import support_positions
from hara.weighting.hara import HaraParams

__all__ = ["Rollouts", "interpretability_study", "sample_rollouts", "score_variants"]


class Rollouts:
    """Sampled rollouts: hidden states h (N, T, d), valid-token mask (N, T), stages (N, T) (-1 = unlabelled) and
    problem (N,), rows of one problem consecutive."""

    def __init__(self, h: Tensor, mask: Tensor, stages: Tensor, problem: Tensor) -> None:
        keep = mask.sum(1) >= 2  # a 1-token completion has no position structure
        self.h, self.mask, self.stages, self.problem = h[keep], mask[keep], stages[keep], problem[keep]


@torch.no_grad()
def sample_rollouts(
    model,
    tokenizer,
    problems: list[str],
    rollouts: int,
    *,
    temperature: float,
    max_new_tokens: int,
    layer: int | str,
    seed: int,
    labeller: Labeller,
    prompt=None,
) -> tuple[Rollouts, Labels]:
    """``rollouts`` sampled completions per problem with their hidden states and stage labels (by ``labeller``);
    ``prompt`` is the config's :class:`hara.data.format.PromptFormat` (the training prompt)."""
    from hara.data.format import PromptFormat
    from hara.models.capture import capture_context
    from hara.models.generate import generate_ids

    prompt = prompt or PromptFormat()
    prompts = [prompt.prompt(p) for p in problems for _ in range(rollouts)]
    ids = generate_ids(
        model,
        tokenizer,
        prompts,
        greedy=False,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        stop=prompt.stop,
    )
    batch = tokenizer(prompts, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt")
    width = max(1, max(len(row) for row in ids))
    completion = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), width, dtype=torch.bool)
    stages = torch.full((len(ids), width), -1, dtype=torch.long)
    labels = labeller.label(ids, lambda row: tokenizer.decode(row, skip_special_tokens=True))
    for i, row in enumerate(ids):
        completion[i, : len(row)], mask[i, : len(row)] = torch.tensor(row, dtype=torch.long), True
        stages[i, : len(row)] = torch.tensor(labels.stages[i], dtype=torch.long)
    h, _ = capture_context(
        model,
        batch["input_ids"],
        batch["attention_mask"],
        completion,
        mask.long(),
        layer,
        frozenset({"hidden"}),
        chunk=64,
    )
    problem = torch.arange(len(problems)).repeat_interleave(rollouts)
    return Rollouts(h, mask, stages, problem), labels


def barycenter_config(config: Mapping) -> BarycenterConfig:
    """The barycenter knobs of the config's hara.hara section (the same loop as training)."""
    return read_knobs(HaraParams, config["hara"]["hara"], "hara.hara").novelty.barycenter


def score_variants(
    data: Rollouts,
    alphas: Mapping[str, float],
    counts: list[int],
    cfg: BarycenterConfig,
    smoothing: float,
    structures: tuple[str, ...] = ("position",),
) -> tuple[list[dict], dict[str, Tensor]]:
    """Measures per (structure, variant, number of rollouts) and the support x stage matrix of each variant at the
    largest, keyed by :func:`variant_key`."""
    rows, matrices = [], {}
    for structure in structures:
        for variant, alpha in alphas.items():
            for count in sorted(counts):
                sel = first_rollouts(data.problem, count)
                plans = problem_plans(
                    data.h[sel], data.mask[sel], data.problem[sel], alpha, replace(cfg, structure=structure)
                )
                scores, matrix = mapping_scores(plans, data.stages[sel], data.problem[sel], len(STAGES), smoothing)
                rows.append(
                    {"variant": variant, "structure": structure, "alpha": alpha, "rollouts": count, "scores": scores}
                )
                matrices[variant_key(variant, structure)] = matrix
    return rows, matrices


def interpretability_study(config: Mapping, results: Path, out: Path) -> AnalysisResult:
    """Sample, label, map and score (module docstring); writes the matrices CSV and two figures too."""
    from hara.data.format import prompt_format
    from hara.data.io import read_jsonl
    from hara.models.generate import load_model
    from hara.runinfo import set_threads

    cfg = config["analyses"]["interpretability"]
    set_threads(config["threads"])
    benchmark = cfg["benchmark"] or config["data"]["benchmarks"][0]
    records = read_jsonl(Path(results) / "data" / "benchmarks" / f"{benchmark}.jsonl", ("problem",))
    chosen = random.Random(cfg["seed"]).sample(records, min(cfg["problems"], len(records)))
    labeller = build_labeller(cfg)  # before sampling: a bad labeller config fails at once
    model, tokenizer = load_model(probe_checkpoint(config))
    data, labels = sample_rollouts(
        model,
        tokenizer,
        [r["problem"] for r in chosen],
        max(cfg["rollouts"]),
        temperature=cfg["temperature"],
        max_new_tokens=cfg["max_new_tokens"] or config["training"]["max_completion_length"],
        layer=config["hara"]["hidden_layer"],
        seed=cfg["seed"],
        labeller=labeller,
        prompt=prompt_format(config),
    )
    alphas = variant_alphas(["w", "gw", "fgw"], config["hara"]["hara"]["alpha"])
    structures = tuple(config["analyses"]["structures"])
    scored, matrices = score_variants(
        data, alphas, cfg["rollouts"], barycenter_config(config), cfg["smoothing"], structures
    )
    rows = [
        [
            r["variant"],
            r["structure"],
            f"{r['alpha']:g}",
            str(r["rollouts"]),
            fmt(r["scores"].score),
            fmt(r["scores"].chance),
            fmt(r["scores"].gain),
            fmt(r["scores"].staircase),
            fmt(r["scores"].staircase_chance),
            fmt(r["scores"].sparsity),
            *label_columns(labels),
        ]
        for r in scored
    ]
    header = [
        "variant",
        "structure",
        "alpha",
        "rollouts",
        "likelihood score (nats/token)",
        "chance",
        "score - chance",
        "block-diagonal mass",
        "block-diagonal chance",
        "sparsity",
        *LABEL_HEADER,
    ]
    _write_matrices(matrices, out / "support_stage.csv")
    _write_problem_scores(scored, out / PROBLEM_SCORES)
    (out / "labels.json").write_text(json.dumps(labels.summary(), indent=2) + "\n", encoding="utf-8")
    figures = [_heatmaps(matrices, out / "support_stage.png"), _score_curve(scored, out / "rollouts.png")]
    share = torch.bincount(data.stages[data.stages >= 0], minlength=len(STAGES)).float()
    share = share / share.sum().clamp_min(1)
    note = (
        f"{len(chosen)} problems of {benchmark}, up to {max(cfg['rollouts'])} rollouts each at temperature "
        f"{cfg['temperature']:g} from {probe_checkpoint(config)}; stages by {describe_labels(labels)}; token "
        f"shares "
        + ", ".join(f"{s} {v:.2f}" for s, v in zip(STAGES, share))
        + ". Likelihood score: two-fold held-out (by problem) mean log P(stage | soft support assignment); "
        "block-diagonal mass: share of the support x stage mass on the best in-order staircase. " + STRUCTURE_NOTE
    )
    return AnalysisResult(
        "interpretability",
        "Interpretability: barycenter supports vs reasoning stages",
        get_analysis("interpretability").claim,
        _finding(scored),
        header,
        rows,
        figures,
        note,
    )


def _write_problem_scores(scored: list[dict], path: Path) -> None:
    rows = [
        {
            "variant": r["variant"],
            "structure": r["structure"],
            "rollouts": r["rollouts"],
            "per_problem": {str(k): v for k, v in sorted(r["scores"].per_problem.items())},
        }
        for r in scored
    ]
    path.write_text(json.dumps({"rows": rows}, indent=1) + "\n", encoding="utf-8")


#: Table columns saying which labeller made the stages (the prompt sha256 shortened; in full in the note).
LABEL_HEADER = ["labeller", "prompt version", "prompt sha256", "label fallback fraction"]


def label_columns(labels: Labels) -> list[str]:
    p = labels.provenance
    return [
        p["labeller"],
        p.get("prompt_version", "n/a"),
        p.get("prompt_sha256", "n/a")[:12],
        fmt(labels.fallback_fraction),
    ]


def describe_labels(labels: Labels) -> str:
    """Which labeller made the stages, in words; for the LLM: model, backend, prompt version and sha256, and how
    many segments fell back to the rules and why."""
    p = labels.provenance
    if p["labeller"] != "llm":
        return f"the rule-based labeller ({p['source']})"
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(labels.reasons.items())) or "none"
    return (
        f"the LLM labeller (model {p['model']}, backend {p['backend']}, prompt {p['prompt_version']} sha256 "
        f"{p['prompt_sha256']}); {labels.fallbacks} of {labels.segments} segments "
        f"({fmt(labels.fallback_fraction)}) fell back to the rule-based labels (reasons: {reasons})"
    )


def _finding(scored: list[dict]) -> str:
    top = max(r["rollouts"] for r in scored)
    parts = [
        _structure_finding([r for r in scored if r["structure"] == structure], top, structure)
        for structure in dict.fromkeys(r["structure"] for r in scored)
    ]
    return " ".join(parts)


def _structure_finding(scored: list[dict], top: int, structure: str) -> str:
    """The finding under one structure: scores at the largest rollout count, the best variant, FGW's trend."""
    at_top = {r["variant"]: r["scores"] for r in scored if r["rollouts"] == top}
    fgw = [r["scores"].score for r in sorted(scored, key=lambda r: r["rollouts"]) if r["variant"] == "fgw"]
    monotone = all(b >= a for a, b in itertools.pairwise(fgw))
    ranked = sorted(at_top, key=lambda v: at_top[v].score, reverse=True)
    tie = len(ranked) > 1 and at_top[ranked[0]].score - at_top[ranked[1]].score < 1e-6
    best = "none (tie)" if tie else variant_label(ranked[0], structure)
    parts = ", ".join(
        f"{variant_label(v, structure)} {fmt(s.score)} (chance {fmt(s.chance)}, block-diagonal "
        f"{fmt(s.staircase)} vs {fmt(s.staircase_chance)})"
        for v, s in at_top.items()
    )
    return (
        f"{STRUCTURE_LABELS[structure].capitalize()}, at {top} rollouts per problem: {parts}; highest score: "
        f"{best}. FGW's score vs the number of rollouts is {'monotone non-decreasing' if monotone else 'not monotone'}."
    )


def _write_matrices(matrices: Mapping[str, Tensor], path: Path) -> None:
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["variant", "support", "position", *STAGES])
        for variant, matrix in matrices.items():
            positions = support_positions(matrix.shape[0])
            for j, row in enumerate(matrix.tolist()):
                writer.writerow([variant, j, f"{float(positions[j]):.4f}", *(f"{v:.6f}" for v in row)])


def _heatmaps(matrices: Mapping[str, Tensor], path: Path) -> str:
    """Support x stage mass, supports ordered by position (top = start of the reasoning), one panel per variant."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(matrices), figsize=(3.3 * len(matrices), 4.2))
    labels = {variant_key(v, st): variant_label(v, st) for v in ("w", "gw", "fgw") for st in STRUCTURE_LABELS}
    for ax, (key, matrix) in zip(axes, matrices.items()):
        share = matrix / matrix.sum(1, keepdim=True).clamp_min(1e-12)  # stage distribution of each support
        ax.imshow(share.numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(STAGES)), STAGES, rotation=30, fontsize=8)
        ax.set_ylabel("support j (ordered by position s_j)")
        ax.set_title(labels[key], fontsize=10)
    fig.suptitle("P(stage | support), largest rollout count", fontsize=10)
    return save_figure(fig, path)


def _score_curve(scored: list[dict], path: Path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for variant, structure in dict.fromkeys((r["variant"], r["structure"]) for r in scored):
        pts = sorted(
            (r["rollouts"], r["scores"].score) for r in scored if (r["variant"], r["structure"]) == (variant, structure)
        )
        ax.plot(
            *zip(*pts),
            marker="o",
            linestyle="-" if structure == "position" else "--",
            label=variant_label(variant, structure),
        )
    first = (scored[0]["variant"], scored[0]["structure"])
    chance = sorted((r["rollouts"], r["scores"].chance) for r in scored if (r["variant"], r["structure"]) == first)
    ax.plot(*zip(*chance), linestyle=":", color="grey", label="chance (stage marginal)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sampled rollouts per problem")
    ax.set_ylabel("held-out log-likelihood (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)

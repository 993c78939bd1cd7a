"""Training-dynamics figures: accuracy, entropy and response length vs step, HarA vs the GRPO baseline (PNG)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hara.metric_keys import ACCURACY, ENTROPY, RESPONSE_LENGTH
from hara.report.tables import BASELINE, host_rlvr
from hara.results.collect import Cell, Run
from hara.results.stats import series, smooth, window_of

__all__ = ["PANELS", "dynamics_figure", "write_figures"]

#: (metric key, axis label) of each panel.
PANELS = [
    (ACCURACY, "training accuracy"),
    (ENTROPY, "token entropy"),
    (RESPONSE_LENGTH, "response length (tokens)"),
]


def mean_curve(group: list[Run], key: str) -> tuple[list[int], list[float]]:
    """Seed-mean of a metric over the steps every seed logged (smoothed like the efficiency table)."""
    curves = [dict(zip(*series(run.metrics, key))) for run in group if run.metrics]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    values = [sum(c[s] for c in curves) / len(curves) for s in steps]
    return steps, smooth(values, window_of(len(values))) if values else []


def compared_methods(config: Mapping) -> list[str]:
    """The baseline and every HarA variant of the grid (the figure's lines)."""
    return [m for m in config["grid"]["methods"] if m == BASELINE or m.startswith("hara")]


def dynamics_figure(config: Mapping, runs: Mapping[Cell, Run], size: str, path: Path) -> bool:
    """Write one PNG for ``size``; False (nothing written) when no compared run has metrics."""
    import matplotlib

    matplotlib.use("Agg")  # no display on clusters and CI
    import matplotlib.pyplot as plt

    rlvr = host_rlvr(config)
    groups = {
        m: [r for c, r in runs.items() if (c.size, c.rlvr, c.method) == (size, rlvr, m) and r.metrics]
        for m in compared_methods(config)
    }
    if not any(groups.values()):
        return False
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for ax, (key, label) in zip(axes, PANELS):
        for method, group in groups.items():
            steps, values = mean_curve(group, key)
            if steps:
                ax.plot(
                    steps,
                    values,
                    label=f"{rlvr} + {method}" if method != BASELINE else rlvr,
                    linestyle="--" if method == BASELINE else "-",
                )
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Training dynamics, {size} ({rlvr}; mean over seeds, moving average)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_figures(config: Mapping, runs: Mapping[Cell, Run], out_dir: Path) -> dict[str, Path | None]:
    """One dynamics figure per size: size -> PNG path (None where there was nothing to plot)."""
    figures = {}
    for size in config["models"]["sizes"]:
        path = out_dir / "figures" / f"dynamics_{size}.png"
        figures[size] = path if dynamics_figure(config, runs, size, path) else None
    return figures

"""Benchmark: linearized HarA novelty against POT's exact FGW and against the matrix-product floor.

In one process, with the same thread count for everything, on the same inputs with planted structure (each prompt
has stage prototypes; every rollout walks through the stages of its outcome with jittered boundaries, plus a
rollout-specific detour whose length varies, so rollouts genuinely differ in novelty; 2 outcome groups of 8
rollouts, k = 16), for hidden sizes 256 and 1024, lengths 256, 1024 and 4096 and several seeds it times

* ours: :func:`hara.novelty.compute_novelty` in its default configuration (batched linearized barycenter + token
  and sequence novelty);
* POT: the same call with the exact backend (``ot.gromov.fgw_barycenters`` + one ``fused_gromov_wasserstein`` per
  rollout), up to the length where one run is expected to stay under a minute;
* floor: the matrix products the algorithm cannot avoid, timed alone with the same shapes and counts as our run
  (one cost GEMM per barycenter iteration plus the final one, one barycentric projection per iteration).

Reported: times, ratios, the Spearman rank agreement between our sequence novelty and the exact FGW distance to the
exact barycenter (per outcome group, averaged over groups and seeds), and the fitted exponent of time in n.
The last line is the summary the issue asks for. ``--quick`` runs a reduced grid (one seed, fewer POT points).
``--eps`` instead prints, for every epsilon the sweeps offer down to 0.005, the worst row-marginal L1 error of the
final plans, the Spearman agreement with exact FGW and the time (d = 256, n = 256 and 1024, three seeds).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time

# POT runs on numpy's BLAS, ours on torch: both must get the same thread count. The BLAS default has to be set
# before numpy loads (threadpoolctl, when installed, then applies --threads exactly).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np
import torch
from scipy.stats import spearmanr

from hara.novelty import NoveltyParams, compute_novelty
from hara.ot.barycenter import BarycenterConfig

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # optional: the environment defaults above already give one thread
    threadpool_limits = None

K = 16
ROLLOUTS = 8  # per outcome group


def planted_batch(seed: int, n: int, d: int, stages: int = 5) -> dict[str, torch.Tensor]:
    """One prompt, 2 outcome groups x ROLLOUTS rollouts of n tokens with planted stage structure and detours.

    Hidden states: a large common offset (whitening must remove it) + the prototype of the current stage + a
    rollout-specific detour over a contiguous block of 5%..45% of the tokens (novelty spread) + iid noise.
    """
    g = torch.Generator().manual_seed(seed)
    offset = 10.0 * torch.randn(d, generator=g)
    protos = torch.randn(stages + 2, d, generator=g)
    plans = [list(range(stages)), list(range(stages - 2)) + [stages, stages + 1]]  # correct / incorrect paths
    hidden, rewards = [], []
    for outcome, path in enumerate(plans):
        detours = torch.linspace(0.05, 0.45, ROLLOUTS)[torch.randperm(ROLLOUTS, generator=g)]
        for r in range(ROLLOUTS):
            cuts = torch.sort(torch.rand(len(path) - 1, generator=g) * 0.3 + torch.linspace(0.1, 0.8, len(path) - 1))
            bounds = (cuts.values * n).long().tolist()
            stage = torch.bucketize(torch.arange(n), torch.tensor(bounds), right=True)
            h = protos[torch.tensor(path)[stage]] + 0.5 * torch.randn(n, d, generator=g)
            length = max(1, int(detours[r] * n))
            begin = int(torch.randint(0, n - length + 1, (1,), generator=g))
            h[begin : begin + length] += 1.5 * torch.randn(d, generator=g)
            hidden.append(h + offset)
            rewards.append(1.0 - outcome)
    rewards_t = torch.tensor(rewards)
    return {
        "hidden_states": torch.stack(hidden),
        "completion_mask": torch.ones(2 * ROLLOUTS, n, dtype=torch.bool),
        "group_ids": torch.zeros(2 * ROLLOUTS, dtype=torch.long),
        "rewards": rewards_t,
        "advantages": rewards_t - rewards_t.mean(),
    }


def _best_of(fn, repeats: int) -> tuple[float, object]:
    """Minimum wall time of ``repeats`` calls and the last result."""
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def gemm_floor(batch: dict, info: dict, repeats: int) -> float:
    """Time of the unavoidable GEMMs alone: (I_b + 1) cost products and I_b projections of our run's shapes."""
    h = batch["hidden_states"]
    groups, n, d = 2, h.shape[1], h.shape[2]
    flat = torch.randn(groups, ROLLOUTS * n, d)
    x, plan = torch.randn(groups, d, K), torch.rand(groups, ROLLOUTS * n, K)
    iters = int(info["hara/barycenter_iters"])

    def run() -> None:
        for _ in range(iters + 1):
            torch.bmm(flat, x)
        for _ in range(iters):
            torch.bmm(plan.transpose(1, 2), flat)

    return _best_of(run, repeats)[0]


def spearman_per_group(ours: torch.Tensor, exact: torch.Tensor, rewards: torch.Tensor) -> list[float]:
    """Spearman rho between two sequence-novelty vectors (B,) within each outcome group."""
    out = []
    for outcome in (True, False):
        sel = (rewards > 0.5) == outcome
        out.append(float(spearmanr(ours[sel].numpy(), exact[sel].numpy())[0]))
    return out


def run_point(d: int, n: int, seeds: list[int], pot: bool, repeats: int) -> dict:
    """Median over seeds of ours / floor / POT times, plus Spearman values, at one (d, n)."""
    ours, floor, pot_t, rhos = [], [], [], []
    for seed in seeds:
        batch = planted_batch(seed, n, d)
        t, res = _best_of(lambda batch=batch: compute_novelty(**batch), repeats)
        ours.append(t)
        floor.append(gemm_floor(batch, res.info, repeats))
        if pot:
            start = time.perf_counter()
            exact = compute_novelty(**batch, params=NoveltyParams(backend="exact"))
            pot_t.append(time.perf_counter() - start)
            rhos += spearman_per_group(res.sequence, exact.sequence, batch["rewards"])
    return {
        "d": d,
        "n": n,
        "ours": statistics.median(ours),
        "floor": statistics.median(floor),
        "pot": statistics.median(pot_t) if pot_t else math.nan,
        "rho": statistics.mean(rhos) if rhos else math.nan,
    }


def fit_exponent(rows: list[dict], d: int) -> float:
    """Least-squares slope of log(time) against log(n) at hidden size d."""
    pts = [(math.log(r["n"]), math.log(r["ours"])) for r in rows if r["d"] == d]
    xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    return float(np.polyfit(xs, ys, 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced grid: one seed, fewer POT points")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both methods (default 1)")
    parser.add_argument("--pot-budget", type=float, default=60.0, help="skip POT where one run would exceed this [s]")
    parser.add_argument("--eps", action="store_true", help="convergence and agreement per epsilon instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    blas = threadpool_limits(args.threads) if threadpool_limits else contextlib.nullcontext()
    with blas:
        (run_eps if args.eps else run)(args)


#: The epsilons of the sweeps (sweeps/epsilon.yaml goes down to 0.005) and the default.
EPSILONS = (0.005, 0.01, 0.05)


def run_eps(args: argparse.Namespace) -> None:
    """Per eps_rel and length: worst row-marginal error, Spearman vs exact FGW, time and Sinkhorn iterations."""
    compute_novelty(**planted_batch(99, 64, 32))  # warm-up
    print(f"{'eps_rel':>7} {'n':>5} {'marginal_err':>12} {'spearman':>8} {'min':>6} {'ours_ms':>8} {'iters':>6}")
    for n in (256, 1024):
        batches = [planted_batch(seed, n, 256) for seed in (0, 1, 2)]
        exact = [compute_novelty(**b, params=NoveltyParams(backend="exact")).sequence for b in batches]
        for eps in EPSILONS:
            params = NoveltyParams(barycenter=BarycenterConfig(eps_rel=eps))
            times, errors, rhos, iters = [], [], [], []
            for batch, ref in zip(batches, exact):
                t, res = _best_of(lambda batch=batch, params=params: compute_novelty(**batch, params=params), 3)
                times.append(t)
                errors.append(res.info["hara/sinkhorn_marginal_error"])
                iters.append(res.info["hara/sinkhorn_iters"])
                rhos += spearman_per_group(res.sequence, ref, batch["rewards"])
            print(
                f"{eps:>7g} {n:>5} {max(errors):>12.4f} {statistics.mean(rhos):>8.3f} {min(rhos):>6.3f} "
                f"{1e3 * statistics.median(times):>8.1f} {statistics.median(iters):>6.0f}",
                flush=True,
            )


def run(args: argparse.Namespace) -> None:
    """The grid: every (d, n) point, then the summary line."""
    seeds = [0] if args.quick else [0, 1, 2]
    repeats = 3 if args.quick else 5
    compute_novelty(**planted_batch(99, 64, 32))  # warm-up (allocator, lazy imports)
    rows, pot_estimate = [], {}
    for d in (256, 1024):
        for n in (256, 1024, 4096):
            wanted = d == 256 or n == 1024 or not args.quick
            if not wanted:
                continue
            est = pot_estimate.get(d, 0.0) * (n / 1024) ** 2 if n > 1024 else 0.0
            pot = est <= args.pot_budget and not (args.quick and (d == 1024 or n > 1024))
            row = run_point(d, n, seeds, pot, repeats)
            if n == 1024 and pot:
                pot_estimate[d] = row["pot"]
            rows.append(row)
            print_row(row, header=len(rows) == 1)
    summary(rows)


def print_row(r: dict, header: bool) -> None:
    """One table line; POT columns are '-' where POT was not run."""
    if header:
        print(
            f"{'d':>5} {'n':>5} {'ours_ms':>9} {'floor_ms':>9} {'ours/floor':>10} {'pot_s':>8} "
            f"{'speedup':>8} {'spearman':>8}",
            flush=True,
        )
    pot = "-" if math.isnan(r["pot"]) else f"{r['pot']:.2f}"
    speed = "-" if math.isnan(r["pot"]) else f"{r['pot'] / r['ours']:.1f}"
    rho = "-" if math.isnan(r["rho"]) else f"{r['rho']:.3f}"
    print(
        f"{r['d']:>5} {r['n']:>5} {1e3 * r['ours']:>9.1f} {1e3 * r['floor']:>9.1f} "
        f"{r['ours'] / r['floor']:>10.2f} {pot:>8} {speed:>8} {rho:>8}",
        flush=True,
    )


def summary(rows: list[dict]) -> None:
    """The one-line summary: speed-up and Spearman at d=256, floor ratio at d=1024 (n=1024), exponent at d=256."""
    at = {(r["d"], r["n"]): r for r in rows}
    r256, r1024 = at[(256, 1024)], at[(1024, 1024)]
    rhos = [r["rho"] for r in rows if r["d"] == 256 and not math.isnan(r["rho"])]
    print(
        f"speedup_vs_pot@1024={r256['pot'] / r256['ours']:.1f} spearman_vs_exact={statistics.mean(rhos):.3f} "
        f"length_exponent={fit_exponent(rows, 256):.3f} "
        f"ratio_to_gemm_floor@1024={r1024['ours'] / r1024['floor']:.2f}"
    )


if __name__ == "__main__":
    main()

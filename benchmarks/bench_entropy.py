"""Benchmark: peak memory of the token-entropy capture at the paper's shapes, chunked vs full-vocabulary logits.

The entropy baselines (forking_tokens, gtpo, grpo_s) need the temperature-1 entropy of every completion token. The
former capture kept the (rows, T, V) logits of the whole completion (fp32: 1.9 GB per row at T = 3072,
V = 151936, several such tensors alive at once); :func:`hara.rlvr.trainer.chunked_token_entropies` sends the final
norm's states through the LM head ``chunk`` positions at a time. Each variant runs in a fresh process (spawned by
this one) so that its peak resident memory (``ru_maxrss``) above the setup's is its own; entropies come back to this
process and are compared with the full-logits reference.

Printed: one row per variant (length, chunk, peak MB above the setup, max |H - H_full|), then as the last line the
full variant's peak over the chunked one at the default chunk, the growth of the chunked peak when T doubles, and
the largest entropy difference:

    .venv/bin/python benchmarks/bench_entropy.py                    # T = 3072, V = 151936, 1 row, d = 256
    .venv/bin/python benchmarks/bench_entropy.py --rows 2 --hidden 2048

The hidden size only changes the LM head's matmul (time), not the entropy's memory; 256 keeps the run short.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource

import torch

from hara.models.capture import ENTROPY_CHUNK, chunked_token_entropies


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1, help="completions (micro-batch rows; reduced on a CPU)")
    parser.add_argument("--length", type=int, default=3072, help="completion length T")
    parser.add_argument("--vocab", type=int, default=151936, help="vocabulary V (Qwen3's)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size d")
    parser.add_argument("--chunks", type=int, nargs="+", default=[128, ENTROPY_CHUNK, 512])
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def full_logits_entropies(final_hidden: torch.Tensor, lm_head: torch.nn.Module) -> torch.Tensor:
    """The former capture: the (rows, T, V) logits in fp32, log-softmax, then -sum p log p."""
    logp = torch.log_softmax(lm_head(final_hidden).float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _inputs(args: argparse.Namespace, length: int) -> tuple[torch.Tensor, torch.nn.Module]:
    """Seeded final-norm states (rows, length, d) and an LM head (d -> V), written in place (no temporaries)."""
    gen = torch.Generator().manual_seed(args.seed)
    lm_head = torch.nn.Linear(args.hidden, args.vocab, bias=False)
    with torch.no_grad():
        lm_head.weight.normal_(0.0, 2.0 / args.hidden**0.5, generator=gen)
    return torch.randn(args.rows, length, args.hidden, generator=gen), lm_head


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def _measure(args: argparse.Namespace, length: int, chunk: int | None, queue) -> None:
    """Child process: one variant's entropies and its peak memory above the setup's high-water mark."""
    torch.set_num_threads(1)
    hidden, lm_head = _inputs(args, length)
    with torch.no_grad():
        chunked_token_entropies(hidden[:, :1], lm_head, 1)  # warm the allocator and kernels before the baseline
        before = _peak_mb()
        entropies = (
            full_logits_entropies(hidden, lm_head) if chunk is None else chunked_token_entropies(hidden, lm_head, chunk)
        )
    queue.put((_peak_mb() - before, entropies.numpy()))  # by value: the child exits before the parent reads


def run_variant(args: argparse.Namespace, length: int, chunk: int | None) -> tuple[float, torch.Tensor]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_measure, args=(args, length, chunk, queue))
    child.start()
    peak, entropies = queue.get()
    child.join()
    return peak, torch.from_numpy(entropies)


def main() -> None:
    args = parse_args()
    half = args.length // 2
    print(
        f"rows={args.rows} T={args.length} V={args.vocab} d={args.hidden}; "
        f"full fp32 logits: {args.rows * args.length * args.vocab * 4 / 2**20:.0f} MB per tensor",
        flush=True,
    )
    print(f"{'variant':>8} {'T':>6} {'chunk':>6} {'peak_MB':>9} {'max|dH|':>10}", flush=True)
    full_peak, reference = run_variant(args, args.length, None)
    print(f"{'full':>8} {args.length:>6} {'-':>6} {full_peak:>9.0f} {0.0:>10.2e}", flush=True)
    peaks, worst = {}, 0.0
    for chunk in args.chunks:
        peaks[chunk], entropies = run_variant(args, args.length, chunk)
        diff = float((entropies - reference).abs().max())
        worst = max(worst, diff)
        print(f"{'chunked':>8} {args.length:>6} {chunk:>6} {peaks[chunk]:>9.0f} {diff:>10.2e}", flush=True)
    short_peak, short = run_variant(args, half, ENTROPY_CHUNK)
    worst = max(worst, float((short - reference[:, :half]).abs().max()))
    print(
        f"{'chunked':>8} {half:>6} {ENTROPY_CHUNK:>6} {short_peak:>9.0f} "
        f"{float((short - reference[:, :half]).abs().max()):>10.2e}",
        flush=True,
    )
    default = peaks.get(ENTROPY_CHUNK, next(iter(peaks.values())))
    print(
        f"full_over_chunked_peak@{args.length}={full_peak / max(default, 1.0):.1f} "
        f"chunked_peak_T{args.length}_over_T{half}={default / max(short_peak, 1.0):.2f} "
        f"max_abs_entropy_diff={worst:.2e}"
    )


if __name__ == "__main__":
    main()

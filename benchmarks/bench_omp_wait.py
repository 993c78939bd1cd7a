"""Torch CPU training steps on 2 threads with OpenMP's default (spinning) wait policy and with passive waiting, on a
machine shared with other jobs.

    python benchmarks/bench_omp_wait.py [--threads 2] [--seconds 15] [--repeats 2] [--load 1]

Why: on 2 cores, a 2-thread torch job beside any other busy process spends most of its time with one OpenMP thread
spinning at a barrier while its sibling waits to be scheduled (the warm-up ran at 0.5-1 steps/s against 20 alone,
2026-12-07). ``OMP_WAIT_POLICY=PASSIVE`` makes a waiting thread yield its core. libgomp reads the variable once, when
torch loads it, so each measurement is a fresh process; the two settings alternate ``--repeats`` times, each beside
``--load`` busy single-threaded processes started here (0: whatever else the machine runs). The workload is a
training step of the tiny model's size (115k parameters, a batch of 16 x 64 positions). Prints steps/s of each run
and the ratio of the medians; the wait policy changes scheduling only, never the numbers computed. The last line is
machine-readable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

WORKLOAD = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
optimizer = torch.optim.AdamW(model.parameters())
x = torch.randn(16 * 64, 128)
start, steps = time.perf_counter(), 0
while time.perf_counter() - start < float(sys.argv[2]):
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
print(steps / (time.perf_counter() - start))
"""
BUSY = "while True: pass"


def run(policy: str | None, threads: int, seconds: float) -> float:
    """steps/s of one fresh process under ``policy`` (None: OpenMP's default)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, str(threads), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--load", type=int, default=1, help="busy processes started beside the measurement")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    rates: dict[str, list[float]] = {"default": [], "PASSIVE": []}
    try:
        for _ in range(args.repeats):
            for label, policy in (("default", None), ("PASSIVE", "PASSIVE")):
                rate = run(policy, args.threads, args.seconds)
                rates[label].append(rate)
                print(f"{label:8s} {rate:8.1f} steps/s")
    finally:
        for process in busy:
            process.kill()
    ratio = statistics.median(rates["PASSIVE"]) / statistics.median(rates["default"])
    print(f"passive / default: {ratio:.2f}x")
    print(json.dumps({"threads": args.threads, "load": args.load, "steps_per_s": rates, "ratio": ratio}))


if __name__ == "__main__":
    main()

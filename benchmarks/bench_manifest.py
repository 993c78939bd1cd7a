"""Checkpoint manifest cost: writing hara.rlvr.checkpoints' manifest of a checkpoint-like folder with xxh3-128 (what
it records) against sha256 (what it recorded before), in the same process on the same files. Rank 0 writes one at
every save while the other ranks wait: 131 GB for an 8B FSDP checkpoint (docs/plan.md).

    .venv/bin/python benchmarks/bench_manifest.py [--gib 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from hara.hashing import file_sha256, file_xxh3


def seconds(checksum, files: list[Path], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for file in files:
            checksum(file)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="checkpoint size (4 shards)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hara-bench-manifest-") as folder:
        shard = int(args.gib * 2**30 / 4)
        files = []
        for index in range(4):
            path = Path(folder) / f"model-{index:05d}.safetensors"
            path.write_bytes(os.urandom(shard))
            files.append(path)
        sha, xxh = seconds(file_sha256, files), seconds(file_xxh3, files)
    gib = 4 * shard / 2**30
    print(f"sha256_gib_per_s={gib / sha:.2f}")
    print(f"xxh3_gib_per_s={gib / xxh:.2f}")
    print(f"speedup={sha / xxh:.2f}")
    print(f"8b_checkpoint_131gb_s: sha256={131e9 / 2**30 / (gib / sha):.0f} xxh3={131e9 / 2**30 / (gib / xxh):.0f}")


if __name__ == "__main__":
    main()

"""Summarise pip's --report of the gpu extra's dry run: the versions that decide whether a cluster node can run it.

    python scripts/gpu_resolution.py .venv/gpu-resolution.json

Fails (exit 1) unless vllm, a CUDA build of torch and numpy are in the resolved set and agree with pyproject's pins.
"""

import json
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def resolved(report_path: str) -> dict[str, str]:
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    return {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in report["install"]
    }


def pinned() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["gpu"]
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in (r.split("==") for r in requirements)}


def main(report_path: str) -> int:
    versions, pins = resolved(report_path), pinned()
    problems = [
        f"{name}: resolved {versions.get(name)}, pinned {pins[name]}"
        for name in ("vllm", "torch", "numpy", "transformers")
        if versions.get(name) != pins[name]
    ]
    cuda = versions.get("nvidia-cuda-runtime") or versions.get("nvidia-cuda-runtime-cu12")
    if cuda is None:
        problems.append("no nvidia-cuda-runtime in the resolved set: torch is not a CUDA build")
    if problems:
        print("gpu extra: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(
        f"gpu extra resolves: {len(versions)} packages, vllm {versions['vllm']}, torch {versions['torch']}, "
        f"CUDA runtime {cuda}, numpy {versions['numpy']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

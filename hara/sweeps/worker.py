"""A sweep worker: claim a trial, train and evaluate it in-process, record it; repeat until the budget is spent.

Many workers (local processes or Slurm jobs) share one study through an Optuna storage that is safe across
processes: a JournalStorage file in results/sweeps/<name>/ by default, or an RDB URL. Three rules keep the study
exact:

- Claiming is serialised by a file lock (``study.lock``): under it a worker fails stale trials and asks
  :func:`hara.sweeps.design.next_claim` what comes next: a search trial while finished (complete + pruned) and
  running ones are below the budget, with every parameter sampled inside the lock by a sampler seeded with
  ``sampler.seed + trial number``; then the re-evaluation of the best trials on fresh seeds (workers wait for the
  running search trials first); or, in a sensitivity study, the next (value, seed) not yet complete or running.
  N workers therefore finish exactly the planned trials, never the same one twice, and never draw the same random
  stream.
- Every trial records its worker (host, pid, process start time). A worker that dies (SIGKILL, preemption, node
  loss) leaves a RUNNING trial; the next claim by any worker marks it FAIL with the reason (same host: the process
  is gone; other host: its heartbeat file went stale) and closes its MLflow run, so it is never lost silently.
- A trial that raises is told FAIL with its one-line error (full traceback in the trial folder) and the worker goes
  on; workers stop once ``max_failed_trials`` trials failed, so a broken study does not loop forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import shutil
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from hara.layout import CHECKPOINTS_DIR, FINAL_DIR, base_model_dir
from hara.sweeps.study import (
    StudySpec,
    distributions,
    make_pruner,
    make_sampler,
    trial_config,
)

__all__ = ["WorkerIdentity", "open_study", "run_worker", "trial_dir"]


def process_start_time(pid: int) -> str | None:
    """Start time of a live process (clock ticks since boot, from /proc): None if it is gone or a zombie. With the
    pid it identifies a process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass(frozen=True)
class WorkerIdentity:
    host: str
    pid: int
    start: str

    @classmethod
    def current(cls) -> WorkerIdentity:
        return cls(socket.gethostname(), os.getpid(), process_start_time(os.getpid()) or "")

    @property
    def key(self) -> str:
        return f"{self.host}-{self.pid}-{self.start}"

    def as_dict(self) -> dict:
        return {"host": self.host, "pid": self.pid, "start": self.start}


def worker_alive(worker: dict, heartbeat_dir: Path, grace: float) -> bool:
    """Same host: the very process is still running. Other host: its heartbeat file was touched within ``grace``."""
    identity = WorkerIdentity(worker["host"], int(worker["pid"]), worker["start"])
    if identity.host == socket.gethostname():
        return process_start_time(identity.pid) == identity.start
    beat = heartbeat_dir / f"{identity.key}.alive"
    return beat.is_file() and time.time() - beat.stat().st_mtime < grace


class Heartbeat:
    """Touches workers/<host>-<pid>-<start>.alive every ``interval`` seconds from a daemon thread."""

    def __init__(self, folder: Path, identity: WorkerIdentity, interval: float) -> None:
        self.path, self.interval, self.stop_event = folder / f"{identity.key}.alive", interval, threading.Event()
        folder.mkdir(parents=True, exist_ok=True)
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while True:
            self.path.touch()
            if self.stop_event.wait(self.interval):
                return

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join()
        self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def study_lock(spec: StudySpec):
    """Exclusive lock of the study folder (fcntl: released by the kernel when a holder dies, even by SIGKILL)."""
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    with open(spec.study_dir / "study.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_storage(spec: StudySpec):
    """The study's storage: a JournalStorage file in the study folder, or the RDB URL of the study file."""
    import optuna

    if spec.fields["storage"]:
        with study_lock(spec):  # the first workers to open a fresh database would all create its tables at once
            return optuna.storages.RDBStorage(spec.fields["storage"])
    from optuna.storages.journal import JournalFileBackend

    spec.study_dir.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(spec.study_dir / "journal.log")))


def open_study(spec: StudySpec, storage: Any = None):
    """Create or load the study (under the study lock: two first workers must not both create it)."""
    import optuna

    storage = storage or open_storage(spec)  # before the lock: opening an RDB storage takes it itself
    with study_lock(spec):
        return optuna.create_study(
            study_name=spec.fields["name"],
            storage=storage,
            direction=spec.fields["objective"]["direction"],
            load_if_exists=True,
            sampler=make_sampler(spec, 0),
            pruner=make_pruner(spec),
        )


def trial_dir(spec: StudySpec, number: int) -> Path:
    return spec.study_dir / "trials" / f"trial{number:04d}"


def one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


class Worker:
    """One worker process's view of the study."""

    def __init__(self, spec: StudySpec, base_model: str | Path | None = None) -> None:
        from hara.sweeps.mlflow_runs import TrialRunCallback

        self.spec, self.identity, self.config = spec, WorkerIdentity.current(), spec.base_config
        self.base_model = Path(base_model or base_model_dir(self.config["results_dir"], spec.fields["size"]))
        if not (self.base_model / "config.json").is_file():  # before the study or any folder is created
            raise FileNotFoundError(
                f"base model {self.base_model} not found (run `hara base-model --size "
                f"{spec.fields['size']}` with the same config, or pass --base-model)"
            )
        self.storage = open_storage(spec)
        self.study = open_study(spec, self.storage)
        self.callback = TrialRunCallback(spec, lambda number: trial_dir(spec, number))
        self.study_id = self.storage.get_study_id_from_name(spec.fields["name"])
        self.data_dir = spec.study_dir / "data"
        self.prompts_dir = None
        self.parent = None

    def fail_stale_trials(self) -> list[int]:
        """Mark RUNNING trials of dead workers FAIL (with the reason) and close their MLflow runs."""
        from optuna.trial import TrialState

        failed = []
        heartbeat = self.spec.fields["heartbeat"]
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker = trial.user_attrs.get("worker")
            if worker is None or worker_alive(worker, self.spec.study_dir / "workers", heartbeat["grace"]):
                continue
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
            self.storage.set_trial_user_attr(
                trial_id,
                "fail_reason",
                (
                    f"worker {worker['host']} pid {worker['pid']} died while the trial was running "
                    "(killed or preempted); the trial was marked FAIL by a later claim"
                ),
            )
            frozen = self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            self.callback(self.study, frozen)
            failed.append(trial.number)
        return failed

    def claim(self):
        """Under the study lock: fail stale trials, then take what :func:`~hara.sweeps.design.next_claim` says
        (running trials count: they will finish or, if their worker dies, be failed and replaced). Returns
        (trial, claim) with the trial None unless the claim runs one."""
        from hara.sweeps.design import Claim, next_claim
        from hara.sweeps.mlflow_runs import parent_run
        from hara.sweeps.objective import PROMPTS, write_trial_prompts, write_validation_split

        with study_lock(self.spec):
            self.fail_stale_trials()
            trials = self.study.get_trials(deepcopy=False)
            failed = sum(t.state.name == "FAIL" for t in trials)
            if failed >= self.spec.max_failed:
                return None, Claim("stop", reason=f"{failed} failed trials reached max_failed_trials")
            claim = next_claim(self.spec, trials)
            if claim.action in ("wait", "stop"):
                return None, claim
            self.parent = self.parent or parent_run(self.spec, self.config)
            write_validation_split(
                self.config,
                self.spec.fields["validation"]["size"],
                self.spec.fields["validation"]["seed"],
                self.data_dir,
            )
            self.prompts_dir = write_trial_prompts(
                self.config, self.base_model, self.data_dir, self.spec.study_dir / PROMPTS
            )
            self.study.sampler = make_sampler(self.spec, len(trials))
            if claim.action == "run":  # the planned trial carries its role and seeds from the queue
                self.study.enqueue_trial(claim.params, user_attrs=claim.user_attrs, skip_if_exists=False)
            trial = self.study.ask(fixed_distributions=distributions(self.spec))
            if claim.action == "ask":
                for key, value in claim.user_attrs.items():
                    trial.set_user_attr(key, value)
            trial.set_user_attr("worker", self.identity.as_dict())
            return trial, claim

    def execute(self, trial) -> Any:
        """Train + evaluate one trial; tell its outcome (COMPLETE, PRUNED or FAIL) and close its MLflow run."""
        import optuna
        from optuna.trial import TrialState

        from hara.sweeps.design import SEARCH, role_of, seeds_of
        from hara.sweeps.mlflow_runs import child_run, run_params
        from hara.sweeps.objective import TrialRun, run_trial

        folder = trial_dir(self.spec, trial.number)
        try:
            run = child_run(self.spec, self.config, self.parent, trial, folder)
            config = trial_config(self.spec, trial.params)
            run.log_params(run_params(self.spec, config))
            where = TrialRun(folder, self.data_dir, self.base_model, run, self.prompts_dir)
            value = run_trial(
                self.spec,
                trial,
                config,
                where,
                seeds_of(trial, self.spec),
                on_value=lambda v, step: run.log_metrics({"sweep/intermediate": v}, step=step),
                prune=role_of(trial) == SEARCH,
            )
            frozen = self.study.tell(trial, value)
        except optuna.TrialPruned:
            frozen = self.study.tell(trial, state=TrialState.PRUNED)
        except BaseException as error:  # a SystemExit (SIGTERM) or ^C also fails the trial, then stops the worker
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            trial.set_user_attr("fail_reason", one_line(error))
            frozen = self.study.tell(trial, state=TrialState.FAIL)
            self.callback(self.study, frozen)
            if not isinstance(error, Exception):
                raise
            return frozen
        finally:
            self.cleanup(folder)
        self.callback(self.study, frozen)
        return frozen

    def cleanup(self, folder: Path) -> None:
        """Drop the trial's weights unless the study keeps them (a sweep of 8B models would fill any disk)."""
        if not self.spec.fields["keep_checkpoints"]:
            for name in (CHECKPOINTS_DIR, FINAL_DIR, f"{FINAL_DIR}.partial"):
                shutil.rmtree(folder / name, ignore_errors=True)
        gc.collect()  # the next trial builds a new policy and trainer in this process
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def stop_on_sigterm():
    """Slurm preempts with SIGTERM: turn it into SystemExit so the running trial is told FAIL before exiting."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_worker(spec: StudySpec, max_trials: int | None = None, base_model: str | Path | None = None) -> dict:
    """Run trials until the budget is spent (or ``max_trials`` by this worker); returns what this worker did."""
    worker = Worker(spec, base_model)
    done: dict[int, str] = {}
    reason = f"max_trials ({max_trials}) reached"
    heartbeat = Heartbeat(spec.study_dir / "workers", worker.identity, spec.fields["heartbeat"]["interval"])
    with stop_on_sigterm(), heartbeat:
        while max_trials is None or len(done) < max_trials:
            trial, claim = worker.claim()
            if claim.action == "wait":  # other workers' running trials decide what comes next
                time.sleep(spec.fields["heartbeat"]["interval"])
                continue
            if trial is None:
                reason = claim.reason
                break
            frozen = worker.execute(trial)
            done[frozen.number] = frozen.state.name
    return {"study": spec.fields["name"], "worker": worker.identity.as_dict(), "trials": done, "stopped": reason}

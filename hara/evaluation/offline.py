"""Running lighteval 0.13 offline with only our tasks.

lighteval's ``Registry`` always imports every built-in task module before it looks at custom tasks, and one of them
(``lighteval/tasks/tasks/tiny_benchmarks.py``) downloads a pickle from GitHub at import: offline, building a
``Registry`` raises ``requests.ConnectionError`` (checked on a machine without network). Its ``Pipeline`` builds that
registry itself and downloads every task's dataset with ``datasets.load_dataset``. So:

- :class:`LocalRegistry` is a ``Registry`` whose task table is exactly our task configs (its ``__init__`` skips
  ``load_all_task_configs``); the rest of the class (task specs, cache task hashes) is lighteval's own code;
- :class:`LocalPipeline` is lighteval's ``Pipeline`` with one method replaced: tasks come from that registry and
  their datasets are set from our records in memory instead of being downloaded. Model calls, metric computation,
  aggregation, standard errors and the prediction cache are lighteval's.

What keeps it offline is that no download path is ever called (tests/evaluation/test_eval_cache.py runs an
evaluation with every socket connection refused and checks that no built-in task module was imported).
:func:`offline_environment` also sets the Hugging Face offline switches during the run, as a second guard for code
that reads them at call time (huggingface_hub and datasets read theirs at import, so they are no guarantee).
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Iterator

import torch
from lighteval.logging.evaluation_tracker import EvaluationTracker
from lighteval.models.abstract_model import LightevalModel
from lighteval.tasks.lighteval_task import LightevalTask, LightevalTaskConfig
from lighteval.tasks.registry import Registry

from hara.evaluation.tasks import SPLIT, EvalTask

# lighteval.pipeline imports lighteval's transformers model module, which calls torch.set_grad_enabled(False) at
# import time: autograd would be off for the rest of the process (a training step in the same process would
# silently compute no gradients). The context manager restores the caller's mode after the import.
with torch.set_grad_enabled(torch.is_grad_enabled()):
    from lighteval.pipeline import ParallelismManager, Pipeline, PipelineParameters

__all__ = ["LocalPipeline", "LocalRegistry", "offline_environment", "run_pipeline"]

OFFLINE_VARIABLES = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@contextlib.contextmanager
def offline_environment() -> Iterator[None]:
    """Set the Hugging Face offline variables for the duration of an evaluation, then restore them."""
    before = {key: os.environ.get(key) for key in OFFLINE_VARIABLES}
    os.environ.update(OFFLINE_VARIABLES)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class LocalRegistry(Registry):
    """A lighteval registry holding only the given task configs (no built-in task module is imported)."""

    def __init__(self, configs: list[LightevalTaskConfig]):  # no super().__init__(): it imports the built-ins
        self.tasks_list = [f"{config.name}|0" for config in configs]
        self._load_multilingual = False
        self._custom_tasks = None
        self._task_registry = {config.name: config for config in configs}
        self.task_to_configs = self._update_task_configs()


class LocalPipeline(Pipeline):
    """lighteval's Pipeline over in-memory tasks (see the module docstring)."""

    def __init__(self, tasks: list[EvalTask], model: LightevalModel, tracker: EvaluationTracker):
        self._eval_tasks = tasks  # read by _init_tasks_and_requests, which Pipeline.__init__ calls
        # Scores must come from the text as generated: math_reward is applied to raw completions in training too.
        parameters = PipelineParameters(launcher_type=ParallelismManager.NONE, remove_reasoning_tags=False)
        super().__init__(
            tasks=",".join(f"{t.name}|0" for t in tasks),
            pipeline_parameters=parameters,
            evaluation_tracker=tracker,
            model=model,
        )

    def _init_tasks_and_requests(self, tasks: str) -> None:
        """Pipeline's version, with our registry and in-memory datasets instead of downloads."""
        self.registry = LocalRegistry([task.config for task in self._eval_tasks])
        self.tasks_dict: dict[str, LightevalTask] = self.registry.load_tasks()
        records = {task.name: task.records for task in self._eval_tasks}
        for task in self.tasks_dict.values():
            # Copies: lighteval writes bookkeeping keys (__index, __few_shots) into every row.
            task.dataset = {SPLIT: [dict(record) for record in records[task.name]]}
        self.documents_dict = {task.full_name: task.get_docs(None) for task in self.tasks_dict.values()}
        self.sampling_docs = collections.defaultdict(list)
        for docs in self.documents_dict.values():
            for doc in docs:
                for sampling in doc.sampling_methods:
                    self.sampling_docs[sampling].append(doc)
        self.evaluation_tracker.task_config_logger.log(self.tasks_dict)


def run_pipeline(tasks: list[EvalTask], model: LightevalModel, output_dir: str) -> EvaluationTracker:
    """Evaluate ``model`` on ``tasks`` offline; returns the tracker holding aggregated metrics and details."""
    with offline_environment():
        tracker = EvaluationTracker(output_dir=output_dir, save_details=False)
        pipeline = LocalPipeline(tasks, model, tracker)
        pipeline.evaluate()
    return tracker

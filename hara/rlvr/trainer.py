"""TRL adapter: a GRPOTrainer whose group advantages (B,) are replaced by a registry method's token advantages (B, T).

The HarA hook is one method, :meth:`HaraGRPOTrainer._reweight_advantages`, called right after TRL has generated,
scored and normalised a generation batch (``_generate_and_score_completions``). It

1. takes each rollout's outcome reward (the correctness reward function's column, captured in
   ``_calculate_rewards``) and its prompt group (consecutive blocks of ``num_generations`` rows: TRL's RepeatSampler
   keeps a prompt's rollouts together in a generation batch; checked on the prompt texts every step),
2. takes what the method captures (its ``MethodSpec.captures``, hara/methods.py): one decoder layer's output (forward
   hook; never all layers' hidden states) and, if needed, the token entropies at temperature 1. By default
   (``hara.capture: generation``) both are recorded by forward hooks while TRL's transformers ``generate`` samples the
   batch (:class:`GenerationRecorder`), so no pass is added; under vLLM or continuous batching, which cannot be hooked,
   they ride on TRL's own no-grad log-prob pass when it runs (vLLM's importance-sampling correction,
   :class:`PassRecorder`); otherwise, and with ``hara.capture: forward``, one extra no-grad forward over prompt +
   completion computes them. Entropies never hold (rows, T, V) logits (:func:`chunked_token_entropies`),
3. calls :func:`hara.weighting.apply_weighting` and stores the (B, T) result in ``output["advantages"]``; TRL's
   ``_compute_loss`` accepts (B, T) advantages.

Alignment: hidden state and entropy at completion position t are those of the position that *predicts* token t
(prompt position P-1+t), the same positions whose log-probs enter the loss.

Cost (benchmarks/bench_step.py, tiny-s default config, 8 prompts x 8 rollouts, 1 thread): the extra forward cost
about 0.10 s of a ~0.9 s step (~15%); recording during generation leaves the HarA hook at ~0.01 s per step.

DAPO dynamic sampling (see :mod:`hara.rlvr.presets`): groups whose outcome (accuracy) rewards are all equal, as in
DAPO (the overlong term does not count), are removed from the loss
mask through TRL's per-token ``tool_mask`` (a loss-only mask, attention is untouched) and ``num_items_in_batch`` is
recounted, since DAPO's token mean divides by it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from hara.groups import group_max, group_min, prompt_index
from hara.methods import get_method
from hara.models.capture import ENTROPY_CHUNK, FINAL_NORM, GenerationRecorder, PassRecorder, capture_context
from hara.rlvr.phases import StepPhases, StepPhasesCallback, probe_for
from hara.rlvr.seam import (
    allow_indexed_cpu_locations,
    log_train_metric,
    stop_strings_for_generate,
    without_stop_padding,
)
from hara.weighting import WeightingContext, apply_weighting

__all__ = [
    "HOST_ADVANTAGES",
    "HOST_WEIGHTING",
    "HaraGRPOTrainer",
    "equal_reward_groups",
    "gradient_moved",
    "group_ids_of",
]

LOGGER = logging.getLogger(__name__)


allow_indexed_cpu_locations()

#: The batch key carrying the host algorithm's advantages (B,) next to the method's token advantages, for the oracle's
#: gradient diagnostic: a (B,) tensor rides along TRL's split and shuffle of the generation batch into micro-batches.
HOST_ADVANTAGES = "hara_host_advantages"

#: TRL loss_type -> the host token weighting hara.weighting normalises against (bnpo is a token mean like DAPO).
HOST_WEIGHTING: dict[str, str] = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "dapo", "bnpo": "dapo"}


def group_ids_of(prompts: list[Any], num_generations: int, offset: int = 0) -> Tensor:
    """Prompt-group id (B,) of a generation batch laid out as consecutive blocks of ``num_generations`` rollouts.

    Raises AssertionError if a block mixes prompts or the batch is not whole groups: novelty must never be computed
    over a partial or mixed group.
    """
    batch = len(prompts)
    assert batch % num_generations == 0, f"generation batch of {batch} is not whole groups of {num_generations}"
    for start in range(0, batch, num_generations):
        block = prompts[start : start + num_generations]
        assert all(p == block[0] for p in block), f"rows {start}..{start + num_generations - 1} mix prompts"
    return torch.arange(batch) // num_generations + offset


def equal_reward_groups(rewards: Tensor, group_ids: Tensor, atol: float = 1e-6) -> Tensor:
    """Rows (B,) bool whose group's rewards are all equal (DAPO's dynamic sampling drops these groups)."""
    index, size = prompt_index(group_ids)
    values, index = rewards.float().cpu(), index.cpu()
    hi, lo = group_max(values, index, size), group_min(values, index, size)
    return ((hi - lo) <= atol)[index].to(rewards.device)


class HaraGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with a registry advantage transform, DAPO-style dynamic sampling and HarA diagnostics.

    Extra arguments: method (a name of the method registry, hara/methods.py), method_params (its knobs, the config's
    flat mapping, read into the method's params dataclass here: an unknown knob fails before training),
    hidden_layer (where the hidden states are captured: FINAL_NORM or a decoder block, see hidden_module),
    dynamic_sampling (mask all-equal-reward groups out of the loss), outcome_reward (index of the correctness reward among ``reward_funcs``; its values
    decide correct / incorrect for the method), stop (the config's prompt.stop: rollouts end at the first of these
    strings; GRPOConfig.generation_kwargs carries them to vLLM or to transformers' ``generate``), entropy_chunk
    (completion positions per LM-head chunk when the extra forward computes entropies).
    """

    def __init__(
        self,
        *args: Any,
        method: str = "none",
        method_params: dict[str, Any] | None = None,
        hidden_layer: int | str = FINAL_NORM,
        dynamic_sampling: bool = False,
        outcome_reward: int = 0,
        capture: str = "generation",
        stop: tuple[str, ...] = (),
        entropy_chunk: int = ENTROPY_CHUNK,
        **kwargs: Any,
    ) -> None:
        spec = get_method(method)  # an UnknownNameError (a ValueError) listing the valid names
        spec.load_weighting()  # a registered method without a transform fails here, not at the first step
        typed_params = spec.read_params(method_params or {})  # so does an unknown knob
        if capture not in ("generation", "forward"):
            raise ValueError(f"capture must be 'generation' or 'forward', not {capture!r}")
        super().__init__(*args, **kwargs)
        self.method, self.method_params = method, typed_params
        self.needs = spec.captures  # what the hooks capture for the method (hara/methods.py), read once
        self.reads_steps = "steps" in spec.needs  # the step oracle's answer, from the problems
        self.hidden_layer, self.dynamic_sampling, self.outcome_reward = hidden_layer, dynamic_sampling, outcome_reward
        self.capture, self.stop, self.entropy_chunk = capture, tuple(stop), entropy_chunk
        self._rewards_per_func: Tensor | None = None
        self._recorded: tuple[int, tuple[Tensor | None, Tensor | None]] | None = None  # (rows, a recorder's result)
        self._record_logprob_pass = False
        self._loss_logps: list[Tensor] | None = None  # the loss pass's log-probs while the gradient diagnostic runs
        self.last_advantages: dict[str, Tensor] = {}  # the latest step's (B,) and (B, T) advantages, for tests
        self._warned_unconverged = False
        # time and peak device memory of each phase of hara plan: time/<phase>_s, memory/<phase>_peak_gib (CUDA)
        self.phases = StepPhases(probe_for(self.accelerator.device))
        self.add_callback(StepPhasesCallback(self.phases, self._log_train_metric))

    def _log_train_metric(self, key: str, value: float) -> None:
        log_train_metric(self, key, value)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards (B_global, F), kept so the hook can read each rollout's outcome reward."""
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        needs = self.needs if self.model.training else frozenset()
        self._record_logprob_pass = bool(needs) and self._records_logprob_pass()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._record_logprob_pass = False
        if self.model.training:  # evaluation batches keep TRL's advantages
            start = time.perf_counter()
            self._reweight_advantages(output, inputs)
            self._log_train_metric("hara/step_overhead_s", time.perf_counter() - start)
            self.phases.end("scoring")
        return output

    def _records_during_generation(self) -> bool:
        """Hooks can see the generation only when TRL runs transformers' ``generate`` in this process."""
        return (
            self.capture == "generation"
            and not self.use_vllm
            and self.rollout_func is None
            and not self.use_transformers_continuous_batching
        )

    def _records_logprob_pass(self) -> bool:
        """Where generation cannot be hooked (vLLM), TRL's own no-grad pass over prompt + completion for the old
        log-probs (run under vLLM's importance-sampling correction, or when generation and optimisation steps are
        misaligned) carries the hooks instead of an extra forward."""
        return self.capture == "generation" and not self._records_during_generation()

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's log-prob pass; the no-grad one inside ``_generate_and_score_completions`` also records the
        captured layer (and entropies through the LM head in chunks) at the positions that predict the completion."""
        if not (self._record_logprob_pass and not torch.is_grad_enabled()):
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            if self._loss_logps is not None and torch.is_grad_enabled():
                self._loss_logps.append(result[0].detach())
            return result
        recorder = PassRecorder(
            self.accelerator.unwrap_model(model), self.hidden_layer, self.needs, logits_to_keep, self.entropy_chunk
        )
        with recorder:
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        self._recorded = (input_ids.shape[0], recorder.result())
        self._record_logprob_pass = False  # one pass per generation batch
        return result

    def _compute_loss(self, model, inputs):
        """TRL's loss; for the oracle's controls also the share of the gradient the method moved (see
        :func:`gradient_moved`), from this micro-batch's own log-probs (no extra pass)."""
        host = inputs.get(HOST_ADVANTAGES)
        self._loss_logps = [] if host is not None else None
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            logps, self._loss_logps = self._loss_logps, None
        if logps:
            mask = inputs["completion_mask"].bool()
            for key, value in gradient_moved(host, inputs["advantages"], mask, logps[0]).items():
                self._log_train_metric(key, value)
        return loss

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's generation, recording hidden states / entropies on the way when the method needs them, and
        stopping at the configured stop strings."""
        needs = self.needs if self.model.training else frozenset()
        self._recorded = None
        record = bool(needs) and self._records_during_generation()
        recorder = GenerationRecorder(self.accelerator.unwrap_model(self.model), self.hidden_layer, needs)
        self.phases.start()
        with self._stop_strings_for_generate(), recorder if record else contextlib.nullcontext():
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        if self.model.training:
            self.phases.end("generation")
        if record:
            self._recorded = (len(prompt_ids), recorder.result())
        return self._without_stop_padding(completion_ids), logprobs

    def _stop_strings_for_generate(self) -> contextlib.AbstractContextManager:
        """The stop strings reach transformers' ``generate`` (hara.rlvr.seam.stop_strings_for_generate)."""
        if not self.stop or self.use_vllm:
            return contextlib.nullcontext()
        return stop_strings_for_generate(self.accelerator.unwrap_model(self.model), self.processing_class)

    def _without_stop_padding(self, completion_ids: list[list[int]]) -> list[list[int]]:
        """No padding after a stop string enters the loss (hara.rlvr.seam.without_stop_padding)."""
        pad = self.processing_class.pad_token_id
        if not self.stop or self.use_vllm or pad in self.eos_token_ids:
            return completion_ids
        return without_stop_padding(completion_ids, pad)

    def _recorded_context(self, batch: int, length: int) -> tuple[Tensor, Tensor] | None:
        """The generation's recording cut to the (batch, length) completion tensor, or None if it does not fit
        (no recording, or a batch that TRL assembled otherwise)."""
        recorded, self._recorded = self._recorded, None
        if recorded is None or recorded[0] != batch:
            return None
        hidden, entropies = recorded[1]
        if any(x is not None and x.shape[1] < length for x in (hidden, entropies)):
            return None
        return tuple(None if x is None else x[:, :length] for x in (hidden, entropies))

    def _capture(self, output: dict[str, Any], needs: frozenset[str]) -> tuple[Tensor | None, Tensor | None]:
        """Hidden states / entropies of the completion positions: from the generation when recorded, else from one
        extra no-grad forward over prompt + completion."""
        mask = output["completion_mask"]
        if not needs:  # nothing to capture, so no capture_from_generation to log either
            return None, None
        recorded = self._recorded_context(*mask.shape)
        self._log_train_metric(
            "hara/capture_from_generation", float(recorded is not None and self._records_during_generation())
        )
        self._log_train_metric(
            "hara/capture_from_logprob_pass", float(recorded is not None and not self._records_during_generation())
        )
        if recorded is not None:
            return recorded
        # as in TRL's own no-grad passes: checkpointing off (it only warns under no_grad), under the accelerator's
        # autocast (bf16 matmuls on a GPU, as TRL's logprob pass); dropout is off (GRPOConfig.disable_dropout)
        with (
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
            self.accelerator.autocast(),
        ):
            return capture_context(
                self.accelerator.unwrap_model(self.model),
                output["prompt_ids"],
                output["prompt_mask"],
                output["completion_ids"],
                mask,
                self.hidden_layer,
                needs,
                chunk=self.args.per_device_train_batch_size,
                entropy_chunk=self.entropy_chunk,
            )

    def _local_rewards(self, batch: int) -> Tensor:
        """This process's outcome (correctness) rewards (B,); TRL gathers rewards across processes."""
        rows = slice(self.accelerator.process_index * batch, (self.accelerator.process_index + 1) * batch)
        return self._rewards_per_func[rows, self.outcome_reward].nan_to_num(0.0)

    def _wrong_spans(self, output: dict[str, Any], inputs: list[dict[str, Any]], outcome: Tensor) -> Tensor:
        """The step oracle's answer (3, B) for the "steps" need: for each incorrect rollout the completion tokens
        [start, end) of its first wrong step and its index in the chain (hara/data/steps.py), -1 for correct
        rollouts and where none is found."""
        from hara.data.steps import WrongSpan, first_wrong_span
        from hara.methods import NEED_SOURCES

        foreign = sorted({str(row.get("source")) for row in inputs} - set(NEED_SOURCES["steps"]))
        if foreign:
            raise ValueError(
                f"method {self.method!r} needs the synthetic world's reference steps; training problems "
                f"from source {foreign[0]!r} have none (set data.source: synthetic)"
            )
        lengths = output["completion_mask"].sum(-1).tolist()
        # the outcome reward is 0/1 (hara.boxed_answer.math_reward); one host read
        incorrect = (outcome <= 0.5).tolist()
        spans = [WrongSpan()] * len(inputs)
        for row, (record, ids) in enumerate(zip(inputs, output["completion_ids"].tolist())):
            if incorrect[row]:
                pieces = self.processing_class.batch_decode(
                    [[token] for token in ids[: int(lengths[row])]], skip_special_tokens=True
                )
                spans[row] = first_wrong_span(pieces, record["answer"], record["solution"] or None)
        return (
            torch.tensor([[span.start, span.end, span.step] for span in spans], device=outcome.device).reshape(-1, 3).T
        )

    def _reweight_advantages(self, output: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
        """The HarA hook: replace ``output["advantages"]`` (B,) with the method's token advantages (B, T)."""
        advantages, mask = output["advantages"], output["completion_mask"]
        batch = advantages.shape[0]
        group_ids = group_ids_of(
            [x["prompt"] for x in inputs], self.num_generations, offset=self.accelerator.process_index * batch
        )
        group_ids = group_ids.to(advantages.device)
        outcome = self._local_rewards(batch)
        if self.dynamic_sampling:  # DAPO filters on accuracy (all right / all wrong), not on shaped rewards
            self._mask_equal_reward_groups(output, outcome, group_ids)
        needs = self.needs
        start = time.perf_counter()
        hidden, entropies = self._capture(output, needs)
        capture_s = time.perf_counter() - start
        starts, ends, steps = self._wrong_spans(output, inputs, outcome) if self.reads_steps else (None,) * 3
        context = WeightingContext(
            hidden_states=hidden,
            token_entropies=entropies,
            error_starts=starts,
            error_ends=ends,
            error_steps=steps,
            loss_type=HOST_WEIGHTING[self.loss_type],
            params=self.method_params,
        )
        token_adv, info = apply_weighting(self.method, advantages, mask, group_ids, outcome, context)
        output["advantages"] = token_adv.to(advantages.dtype)
        if self.reads_steps:
            output[HOST_ADVANTAGES] = advantages.detach().float()
        self.last_advantages = {
            "sequence": advantages.detach().clone(),
            "token": output["advantages"].detach(),
            "mask": mask.detach(),
            "outcome": outcome.detach(),
        }
        for key, value in {**info, "hara/capture_s": capture_s}.items():
            self._log_train_metric(key, float(value))
        self._warn_once_if_unconverged(info)

    def _warn_once_if_unconverged(self, info: dict[str, float]) -> None:
        """One warning per run when a transport plan missed its marginal tolerance (the metrics say every step)."""
        rows = info.get("hara/sinkhorn_unconverged", 0.0)
        if rows and not self._warned_unconverged:
            self._warned_unconverged = True
            LOGGER.warning(
                "step %d: %d transport plan(s) did not reach hara.hara.marginal_tol (worst row-marginal "
                "error %.3g); raise hara.hara.final_max_iter or eps_rel (metrics "
                "hara/sinkhorn_unconverged, hara/sinkhorn_marginal_error; warned once per run)",
                self.state.global_step,
                int(rows),
                info.get("hara/sinkhorn_marginal_error", float("nan")),
            )

    def _mask_equal_reward_groups(self, output: dict[str, Any], rewards: Tensor, group_ids: Tensor) -> None:
        """DAPO dynamic sampling without refill: drop all-equal-accuracy groups from the loss mask and the token
        count (their accuracy carries no signal; a length-penalty-only advantage goes with them, as in DAPO where
        the group is discarded); log the fraction of groups dropped."""
        drop = equal_reward_groups(rewards, group_ids)
        keep = (~drop).to(output["completion_mask"].dtype)[:, None]
        loss_mask = output.get("tool_mask", torch.ones_like(output["completion_mask"])) * keep
        output["tool_mask"] = loss_mask
        output["num_items_in_batch"] = self.accelerator.gather((output["completion_mask"] * loss_mask).sum()).sum()
        self._log_train_metric("train/dynamic_sampling_dropped", float(drop.float().mean()))


def gradient_moved(host: Tensor, token: Tensor, mask: Tensor, logps: Tensor) -> dict[str, float]:
    """How much of the policy gradient a method moved away from the host's advantages, per micro-batch.

    A token's log-prob gradient on its own logit is 1 - p(token), so a token that the policy copies with p near 1
    carries almost none: the advantage a method moves there moves almost no gradient. ``oracle/gradient_moved`` is
    sum |token - host| (1 - p) / sum |host| (1 - p) over the completion tokens (it can exceed 1 where a method gives
    credit that the host did not give: oracle_process in groups with no outcome signal); ``oracle/token_moved`` is
    the share of tokens whose advantage changed, for contrast."""
    host_tokens = host.float()[:, None].expand_as(token)
    weight = (1.0 - logps.float().exp()).clamp_min(0.0) * mask
    delta = (token.float() - host_tokens).abs()
    base = float((host_tokens.abs() * weight).sum())
    moved = float((delta * weight).sum())
    changed = (delta > 1e-6 * host_tokens.abs().clamp_min(1e-6)) & mask
    return {
        "oracle/gradient_moved": moved / base if base > 0 else 0.0,
        "oracle/token_moved": float(changed.sum()) / max(float(mask.sum()), 1.0),
    }

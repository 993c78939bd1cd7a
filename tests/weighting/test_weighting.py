"""Advantage transforms: registry, HarA invariants (signs, masks, mass), formulas, edge cases, baselines."""

import dataclasses
import math

import pytest
import torch

from hara.methods import METHODS, methods, register_method
from hara.novelty import NoveltyResult, OutcomeGroups
from hara.weighting import (
    HOST_TOKEN_WEIGHTS,
    ReweightParams,
    WeightingContext,
    apply_weighting,
    get_weighting,
    group_weights,
    host_token_weights,
    novelty_weights,
)
from tests.helpers import fresh_registry

HARA = ["hara_tok", "hara_seq", "hara_hier"]
LOSSES = sorted(HOST_TOKEN_WEIGHTS)
NO_EARLY_STOP = {"barycenter_size": 6, "barycenter_tol": 0.0, "sinkhorn_tol": 0.0}


def _batch(seed: int = 0, prompts: int = 2, per_prompt: int = 6, T: int = 12, d: int = 8, binary: bool = True):
    """Random rollouts with varying lengths; GRPO advantages of 0/1 (or graded) rewards per prompt."""
    g = torch.Generator().manual_seed(seed)
    B = prompts * per_prompt
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = torch.tensor([1.0, 0.0] * (B // 2))
    if not binary:
        rewards = rewards * (0.6 + 0.4 * torch.rand(B, generator=g))
    group_ids = torch.arange(prompts).repeat_interleave(per_prompt)
    r = rewards.view(prompts, per_prompt)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    ctx = WeightingContext(
        hidden_states=torch.randn(B, T, d, generator=g), token_entropies=torch.rand(B, T, generator=g) * 2.0
    )
    return adv, mask, group_ids, rewards, ctx


def _outcome_mass(token_adv, mask, group_ids, rewards, loss_type):
    """Advantage mass per (prompt, outcome) under the host loss's own token weighting."""
    omega = host_token_weights(mask, loss_type)
    per_row = (token_adv * omega).sum(1)
    key = group_ids * 2 + (rewards > 0.5).long()
    return torch.zeros(int(key.max()) + 1, dtype=torch.float64).index_add_(0, key, per_row.double())


# ------------------------------------------------------------------------------------------------- registry


def test_registry_has_every_method():
    assert set(methods()) >= {
        "none",
        "hara_tok",
        "hara_seq",
        "hara_hier",
        "hara_exact_tok",
        "hara_exact_seq",
        "forking_tokens",
        "gtpo",
        "grpo_s",
        "position",
        "shear",
    }


def test_registering_a_conflicting_name_raises_and_reregistering_is_idempotent(monkeypatch):
    """Transforms are registered with their method (its spec names the function): one registry to conflict in."""
    fresh_registry(monkeypatch, METHODS)
    spec = METHODS.get("none")
    assert register_method(spec) is spec and get_weighting("none") is get_weighting("none")
    with pytest.raises(ValueError, match="already registered"):
        register_method(dataclasses.replace(spec, weighting="tests.method_plugin:flip_late"))


def test_unknown_names_and_parameters_are_named_in_the_error():
    adv, mask, gid, rew, ctx = _batch()
    with pytest.raises(KeyError, match="hara_magic"):
        get_weighting("hara_magic")
    with pytest.raises(ValueError, match="barycentre_size"):
        apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, params={"barycentre_size": 8}))
    with pytest.raises(ValueError, match="backend"):  # fixed by the registry entry, not a knob
        apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, params={"backend": "exact"}))
    with pytest.raises(ValueError, match="formula"):
        apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, params={"formula": "E9"}))
    with pytest.raises(ValueError, match="loss_type"):
        apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, loss_type="ppo"))


@pytest.mark.parametrize(
    "name,missing",
    [
        ("hara_tok", "hidden_states"),
        ("shear", "hidden_states"),
        ("gtpo", "token_entropies"),
        ("forking_tokens", "token_entropies"),
    ],
)
def test_missing_context_inputs_are_named(name, missing):
    adv, mask, gid, rew, ctx = _batch()
    with pytest.raises(ValueError, match=missing):
        apply_weighting(name, adv, mask, gid, rew, dataclasses.replace(ctx, **{missing: None}))


def test_none_is_the_host_algorithm():
    adv, mask, gid, rew, ctx = _batch()
    out, info = apply_weighting("none", adv, mask, gid, rew, ctx)
    assert torch.equal(out, adv[:, None] * mask) and info == {}


def test_host_token_weights():
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    assert torch.allclose(host_token_weights(mask, "grpo").sum(1), torch.ones(2))
    assert torch.equal(host_token_weights(mask, "grpo")[1], torch.tensor([0.5, 0.5, 0, 0, 0]))
    for loss in ("dr_grpo", "dapo"):
        assert torch.equal(host_token_weights(mask, loss), mask.float())


# ------------------------------------------------------------------------------------------------- HarA invariants


@pytest.mark.parametrize("loss_type", LOSSES)
@pytest.mark.parametrize("method", HARA)
@pytest.mark.parametrize("formula", ["mean_ratio", "affine_z", "softmax"])
def test_hara_weights_keep_signs_masks_and_outcome_mass(method, loss_type, formula):
    for seed in (0, 1):
        adv, mask, gid, rew, ctx = _batch(seed)
        ctx = dataclasses.replace(ctx, loss_type=loss_type, params={"formula": formula})
        out, info = apply_weighting(method, adv, mask, gid, rew, ctx)
        assert torch.isfinite(out).all()
        assert torch.equal(out[~mask], torch.zeros(int((~mask).sum())))
        w = out / adv[:, None]
        assert (w[mask] >= 0).all()
        assert float(w[mask].std()) > 1e-3  # something was actually reweighted
        torch.testing.assert_close(
            _outcome_mass(out, mask, gid, rew, loss_type),
            _outcome_mass(adv[:, None] * mask, mask, gid, rew, loss_type),
            atol=1e-5,
            rtol=1e-5,
        )
        assert info["hara/groups"] == 4.0 and info["hara/nan_fallbacks"] == 0.0


@pytest.mark.parametrize("loss_type", LOSSES)
def test_mass_is_kept_with_graded_rewards_and_explore_mode(loss_type):
    adv, mask, gid, rew, ctx = _batch(2, binary=False)
    ctx = dataclasses.replace(ctx, loss_type=loss_type, params={"sign_mode": "explore"})
    out, _ = apply_weighting("hara_tok", adv, mask, gid, rew, ctx)
    torch.testing.assert_close(
        _outcome_mass(out, mask, gid, rew, loss_type),
        _outcome_mass(adv[:, None] * mask, mask, gid, rew, loss_type),
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize("method", ["hara_exact_tok", "hara_exact_seq"])
def test_exact_variants_keep_the_same_invariants(method):
    adv, mask, gid, rew, ctx = _batch(3, prompts=1, per_prompt=4, T=7, d=3)
    ctx = dataclasses.replace(ctx, params={"barycenter_size": 4, "exact_max_iter": 5})
    out, info = apply_weighting(method, adv, mask, gid, rew, ctx)
    assert torch.isfinite(out).all() and (out / adv[:, None])[mask].min() >= 0
    torch.testing.assert_close(
        _outcome_mass(out, mask, gid, rew, "grpo"),
        _outcome_mass(adv[:, None] * mask, mask, gid, rew, "grpo"),
        atol=1e-5,
        rtol=1e-5,
    )
    assert info["hara/sinkhorn_iters"] == 0.0  # POT's solver, not ours


def test_uniform_novelty_gives_exactly_the_input_advantages():
    adv, mask, gid, rew, ctx = _batch(4)
    h = ctx.hidden_states.clone()
    h[:] = h[0]  # every rollout identical -> constant novelty within each group
    mask = mask.clone()
    mask[:] = mask[0]
    for method in HARA:
        out, info = apply_weighting(method, adv, mask, gid, rew, dataclasses.replace(ctx, hidden_states=h))
        assert torch.equal(out, adv[:, None] * mask)
        assert info["hara/groups"] == 4.0
    g = torch.Generator().manual_seed(4)
    x = 0.1 + 1e-7 * torch.rand(3, 7, generator=g)  # zero spread up to rounding: fp32 x / mean(x) is not 1
    for formula in ("mean_ratio", "affine_z", "softmax"):
        w, clipped = group_weights(
            x, torch.rand(3, 7, generator=g), torch.tensor([0, 0, 1]), 2, ReweightParams(formula=formula)
        )
        assert torch.equal(w, torch.ones(3, 7)) and not clipped.any()


def _fake_novelty(token: torch.Tensor, sequence: torch.Tensor, index: torch.Tensor, correct: list[bool]):
    G = len(correct)
    groups = OutcomeGroups(
        index, torch.tensor(correct), torch.zeros(G, dtype=torch.long), torch.zeros(index.numel(), dtype=torch.long), 1
    )
    return NoveltyResult(token, sequence, groups, torch.ones(G, dtype=torch.bool), None, {})


def test_sequence_level_equals_token_level_with_constant_token_novelty():
    g = torch.Generator().manual_seed(5)
    seq = torch.rand(6, generator=g) + 0.1
    index = torch.tensor([0, 0, 0, 1, 1, 1])
    mask = torch.arange(9)[None, :] < torch.tensor([9, 4, 6, 9, 3, 7])[:, None]
    omega = host_token_weights(mask, "grpo")
    nov = _fake_novelty(seq[:, None] * mask, seq, index, [True, False])
    for formula in ("mean_ratio", "affine_z", "softmax"):
        p = ReweightParams(formula=formula)
        w_tok = novelty_weights(nov, omega, "token", p)[0]
        w_seq = novelty_weights(nov, omega, "sequence", p)[0]
        torch.testing.assert_close(w_tok[mask], w_seq[mask], atol=1e-6, rtol=1e-6)
        assert float(w_seq[mask].std()) > 1e-3


def test_hierarchical_weights_are_the_product_of_both_levels():
    g = torch.Generator().manual_seed(6)
    token = torch.rand(4, 6, generator=g) + 0.1
    seq = token.mean(1)
    index = torch.tensor([0, 0, 0, 0])
    omega = torch.ones(4, 6)
    nov = _fake_novelty(token, seq, index, [True])
    p = ReweightParams()
    w_h = novelty_weights(nov, omega, "hierarchical", p)[0]
    w_seq = novelty_weights(nov, omega, "sequence", p)[0]
    w_within, _ = group_weights(token, omega, torch.arange(4), 4, p)
    torch.testing.assert_close(w_h, w_seq * w_within)
    torch.testing.assert_close(w_h.mean(1), w_seq[:, 0])  # each rollout's token weights average to 1


def test_mean_ratio_clips_and_renormalises():
    x = torch.tensor([[0.05] + [1.0] * 8 + [12.0]])  # x / mean = 0.025, 0.5 (x8), 6.0
    w, clipped = group_weights(x, torch.ones(1, 10), torch.tensor([0]), 1, ReweightParams(renorm_iters=3))
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    assert clipped.tolist() == [[True] + [False] * 8 + [True]]
    assert float(w.min()) >= 0.2 * 0.9 and float(w.max()) <= 5.0 * 1.1
    unclipped = group_weights(
        x, torch.ones(1, 10), torch.tensor([0]), 1, ReweightParams(clip_min=0.0, clip_max=1e9, max_weight=1e9)
    )[0]
    torch.testing.assert_close(unclipped, x / x.mean())


def test_affine_z_and_softmax_formulas():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    one = torch.ones(1, 4)
    w = group_weights(x, one, torch.tensor([0]), 1, ReweightParams(formula="affine_z", beta=0.0))[0]
    assert torch.allclose(w, one)
    w = group_weights(x, one, torch.tensor([0]), 1, ReweightParams(formula="affine_z"))[0]
    z = (x - x.mean()) / x.std(unbiased=False)
    torch.testing.assert_close(w, 1 + 0.5 * z)  # no clipping needed at beta = 0.5
    w = group_weights(x, one, torch.tensor([0]), 1, ReweightParams(formula="softmax"))[0]
    ref = torch.exp(x / x.std(unbiased=False))
    torch.testing.assert_close(w, ref / ref.mean())


def test_explore_mode_inverts_only_incorrect_groups():
    token = torch.tensor([[1.0] * 4, [2.0] * 4, [1.0] * 4, [2.0] * 4])
    nov = _fake_novelty(token, token[:, 0], torch.tensor([0, 0, 1, 1]), [True, False])
    omega = torch.ones(4, 4)
    mag = novelty_weights(nov, omega, "sequence", ReweightParams())[0][:, 0]
    exp = novelty_weights(nov, omega, "sequence", ReweightParams(sign_mode="explore"))[0][:, 0]
    assert mag[1] > mag[0] and mag[3] > mag[2]
    assert exp[1] > exp[0] and exp[3] < exp[2]  # typical wrong reasoning now weighs more
    torch.testing.assert_close(exp[:2], mag[:2])


# ------------------------------------------------------------------------------------------------- edge cases


def test_zero_advantage_prompts_do_no_ot_work_and_keep_their_advantages():
    adv, mask, gid, rew, ctx = _batch(7)
    rew = torch.ones_like(rew)  # every rollout correct -> GRPO advantages are all zero
    adv = torch.zeros_like(adv)
    out, info = apply_weighting("hara_tok", adv, mask, gid, rew, ctx)
    assert torch.equal(out, torch.zeros_like(out))
    assert info["hara/groups"] == 0.0 and info["hara/sinkhorn_iters"] == 0.0


def test_singletons_short_and_empty_completions_get_weight_one_while_others_are_reweighted():
    adv, mask, gid, rew, ctx = _batch(8, prompts=1, per_prompt=8)
    rew = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # correct: 3 rollouts, incorrect: 5
    adv = rew - rew.mean()
    mask = mask.clone()
    mask[1, 1:] = False  # n = 1
    mask[2, :] = False  # empty -> the correct group has a single usable rollout
    mask[3, 2:] = False  # n = 2 still counts
    out, info = apply_weighting("hara_tok", adv, mask, gid, rew, ctx)
    for r in (0, 1, 2):
        assert torch.equal(out[r], adv[r] * mask[r])
    w = out[3:] / adv[3:, None]
    assert float(w[mask[3:]].std()) > 1e-3
    assert info["hara/groups"] == 1.0 and info["hara/rollouts_reweighted"] == 5.0


def test_identical_rollouts_get_weight_one():
    adv, mask, gid, rew, ctx = _batch(9, prompts=1)
    h = ctx.hidden_states.clone()
    h[:] = h[0]
    mask = mask.clone()
    mask[:] = mask[0]
    out, _ = apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, hidden_states=h))
    assert torch.equal(out, adv[:, None] * mask)


def test_nan_in_one_group_falls_back_to_weight_one_and_is_counted():
    adv, mask, gid, rew, ctx = _batch(10)
    h = ctx.hidden_states.clone()
    h[0, 0, 0] = float("nan")  # a valid token of prompt 0, correct group
    h[~mask] = float("inf")  # padding garbage must not matter
    out, info = apply_weighting("hara_tok", adv, mask, gid, rew, dataclasses.replace(ctx, hidden_states=h))
    assert torch.isfinite(out).all()
    assert info["hara/nan_fallbacks"] == 1.0
    broken = (gid == 0) & (rew > 0.5)
    assert torch.equal(out[broken], adv[broken][:, None] * mask[broken])
    w = out[~broken] / adv[~broken][:, None]
    assert float(w[mask[~broken]].std()) > 1e-3


def test_nan_weights_from_novelty_fall_back_per_group():
    token = torch.tensor([[1.0, 2.0], [4.0, float("nan")], [1.0, 2.0], [2.0, 5.0]])
    nov = _fake_novelty(token, token.nansum(1), torch.tensor([0, 0, 1, 1]), [True, False])
    w, _, fallback = novelty_weights(nov, torch.ones(4, 2), "token", ReweightParams())
    assert fallback.tolist() == [True, False]
    assert torch.equal(w[:2], torch.ones(2, 2)) and torch.isfinite(w).all() and float(w[2:].std()) > 0.1


def test_padding_never_enters_the_weights():
    adv, mask, gid, rew, ctx = _batch(11)
    ref, _ = apply_weighting("hara_hier", adv, mask, gid, rew, ctx)
    h = torch.where(mask[..., None], ctx.hidden_states, 1e5)
    out, _ = apply_weighting("hara_hier", adv, mask, gid, rew, dataclasses.replace(ctx, hidden_states=h))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


def test_batched_call_equals_a_per_prompt_loop():
    adv, mask, gid, rew, ctx = _batch(12, prompts=3)
    ctx = dataclasses.replace(ctx, params=NO_EARLY_STOP)
    batched, _ = apply_weighting("hara_tok", adv, mask, gid, rew, ctx)
    for q in range(3):
        rows = gid == q
        single, _ = apply_weighting(
            "hara_tok",
            adv[rows],
            mask[rows],
            gid[rows],
            rew[rows],
            dataclasses.replace(ctx, hidden_states=ctx.hidden_states[rows]),
        )
        torch.testing.assert_close(batched[rows], single, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------------- baselines


def test_forking_tokens_keep_the_top_entropy_fifth():
    adv, mask, gid, rew, ctx = _batch(13)
    out, info = apply_weighting("forking_tokens", adv, mask, gid, rew, ctx)
    kept = (out != 0) & mask
    n = int(mask.sum())
    assert int(kept.sum()) == math.ceil(0.2 * n)
    ent = ctx.token_entropies
    assert float(ent[kept].min()) >= float(ent[mask & ~kept].max())
    assert torch.equal(out[kept], (adv[:, None] * mask)[kept])
    assert info["forking/kept_fraction"] == pytest.approx(math.ceil(0.2 * n) / n)


def test_gtpo_favours_high_entropy_in_correct_and_punishes_confident_errors():
    adv, mask, gid, rew, ctx = _batch(14, prompts=1)
    mask = torch.ones_like(mask)
    ent = torch.ones_like(ctx.token_entropies)
    ent[0, 3], ent[1, 3] = 3.0, 0.1  # a hard token in a correct rollout, a confident token in a wrong one
    out, _ = apply_weighting("gtpo", adv, mask, gid, rew, dataclasses.replace(ctx, token_entropies=ent))
    correct = rew > 0.5
    assert (out[correct] > 0).all() and (out[~correct] < 0).all()
    assert out[0, 3] > out[0, 2] and out[1, 3] < out[1, 2]
    uniform = dataclasses.replace(ctx, token_entropies=torch.ones_like(ent))
    flat, _ = apply_weighting("gtpo", adv, mask, gid, rew, uniform)
    assert torch.allclose(flat, flat[:, :1].expand_as(flat))  # uniform entropy: one advantage per rollout
    dead, _ = apply_weighting("gtpo", torch.zeros_like(adv), mask, gid, torch.ones_like(rew), ctx)
    assert torch.equal(dead, torch.zeros_like(dead))


def test_grpo_s_without_entropy_term_is_grpo():
    adv, mask, gid, rew, ctx = _batch(15)
    out, _ = apply_weighting("grpo_s", adv, mask, gid, rew, dataclasses.replace(ctx, params={"alpha2": 0.0}))
    r = torch.where(rew > 0.5, rew, -1.0).view(2, 6)
    grpo = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-8)).flatten()
    torch.testing.assert_close(out, grpo[:, None] * mask, atol=1e-5, rtol=1e-5)
    shaped, _ = apply_weighting("grpo_s", adv, mask, gid, rew, ctx)
    assert not torch.allclose(shaped, out)


def test_position_weights_average_one_per_rollout():
    adv, mask, gid, rew, ctx = _batch(16)
    mask = mask.clone()
    mask[0, 1:] = False  # n = 1 -> w = 1
    out, _ = apply_weighting("position", adv, mask, gid, rew, ctx)
    w = out / adv[:, None]
    torch.testing.assert_close((w * mask).sum(1) / mask.sum(1), torch.ones(12))
    assert float(w[0, 0]) == pytest.approx(1.0)
    n = int(mask[1].sum())
    assert float(w[1, n - 1]) == pytest.approx(2.0 / 1.5) and float(w[1, 0]) == pytest.approx(1.0 / 1.5)


def test_shear_weights_spans_by_distance_to_the_opposite_outcome():
    g = torch.Generator().manual_seed(17)
    T, d = 40, 6
    base = torch.randn(T, d, generator=g)
    h = torch.stack([base + 0.01 * torch.randn(T, d, generator=g) for _ in range(4)])
    h[1, 20:] += 5.0  # rollout 1 (correct) departs from the wrong rollouts in its second half
    rew = torch.tensor([1.0, 1.0, 0.0, 0.0])
    mask = torch.ones(4, T, dtype=torch.bool)
    ctx = WeightingContext(hidden_states=h, params={"span_width": 10, "span_stride": 5})
    out, _ = apply_weighting("shear", rew - 0.5, mask, torch.zeros(4, dtype=torch.long), rew, ctx)
    w = out / (rew - 0.5)[:, None]
    assert (w >= 0).all() and torch.isfinite(w).all()
    assert float(w[1, 30:].mean()) > 10.0 * float(w[0, 30:].mean())
    assert float(w[1, 30:].mean()) > 10.0 * float(w[1, :10].mean())
    ctx2 = dataclasses.replace(ctx, hidden_states=h[:2])
    one_sided, _ = apply_weighting("shear", torch.ones(2), mask[:2], torch.zeros(2, dtype=torch.long), rew[:2], ctx2)
    assert torch.equal(one_sided, torch.ones(2, T))  # no opposite outcome: w = 1


def test_shear_handles_outcomes_whose_longest_completions_differ_below_the_span_width():
    """Both outcomes' spans are padded to one width: with every correct completion 8 tokens long and every wrong one
    3 (both below span_width), the span batches were 8 and 3 wide and the pairwise cost failed to reshape."""
    g = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1] * 8, [1] * 8, [1] * 3 + [0] * 5, [1] * 3 + [0] * 5], dtype=torch.bool)
    rew = torch.tensor([1.0, 1.0, 0.0, 0.0])
    ctx = WeightingContext(hidden_states=torch.randn(4, 8, 3, generator=g), params={"span_width": 10})
    out, _ = apply_weighting("shear", rew - 0.5, mask, torch.zeros(4, dtype=torch.long), rew, ctx)
    w = out / (rew - 0.5)[:, None]
    assert torch.isfinite(w).all() and (w[mask] > 0).all() and (w[~mask] == 0).all()
    # Each span is one whole completion here: a rollout's weight is its distance to the nearest opposite one.
    assert torch.allclose(w[0, :8], w[0, :1].expand(8)) and torch.allclose(w[2, :3], w[2, :1].expand(3))


# ------------------------------------------------------------------------------------------------- mixed signs, caps


def test_a_mixed_sign_outcome_group_keeps_its_advantage_mass():
    """The issue's minimal case: the most novel rollout of a correct group carries DAPO's overlong penalty."""
    adv = torch.tensor([1.0, 1.0, -0.5])
    x = torch.tensor([[1.0, 2.0], [1.0, 1.0], [3.0, 3.0]])
    omega = adv.abs()[:, None].expand(3, 2)
    w, _ = group_weights(x, omega, torch.tensor([0, 0, 0]), 1, ReweightParams(), negative=adv < 0)
    assert float((adv[:, None] * w).sum()) == pytest.approx(3.0, abs=1e-5)  # was 1.25
    for subset in (adv > 0, adv < 0):
        assert float((omega * w)[subset].sum()) == pytest.approx(float(omega[subset].sum()), abs=1e-5)


@pytest.mark.parametrize("method", HARA)
@pytest.mark.parametrize("loss", LOSSES)
def test_hara_keeps_each_sign_subsets_mass_under_overlong_shaping(method, loss):
    adv, mask, group_ids, rewards, ctx = _batch(seed=3, per_prompt=8)
    adv = adv.clone()
    adv[[0, 2, 8]] = -0.3  # correct rollouts (even rows) whose length penalty made their advantage negative
    ctx = dataclasses.replace(ctx, loss_type=loss, params=dict(NO_EARLY_STOP))
    token_adv, _ = apply_weighting(method, adv, mask, group_ids, rewards, ctx)
    omega = host_token_weights(mask, loss)
    for sign in (adv > 0, adv < 0):
        key = (group_ids * 2 + (rewards > 0.5).long())[sign]
        new = torch.zeros(4, dtype=torch.float64).index_add_(0, key, (token_adv * omega)[sign].sum(1).double())
        old = torch.zeros(4, dtype=torch.float64).index_add_(
            0, key, (adv[:, None] * mask * omega)[sign].sum(1).double()
        )
        torch.testing.assert_close(new, old, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("formula", ["mean_ratio", "affine_z", "softmax"])
def test_no_weight_exceeds_the_cap_and_the_mass_is_kept(formula):
    x = torch.tensor([[0.0] * 9 + [10.0]])  # softmax alone gives the last token ~7.6
    omega = torch.ones(1, 10)
    w, _flags = group_weights(x, omega, torch.tensor([0]), 1, ReweightParams(formula=formula))
    assert float(w.max()) <= 5.0 + 1e-6 and float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    w3, flags3 = group_weights(x, omega, torch.tensor([0]), 1, ReweightParams(formula=formula, max_weight=3.0))
    assert float(w3.max()) <= 3.0 + 1e-6 and float(w3.mean()) == pytest.approx(1.0, abs=1e-6)
    assert bool(flags3[0, -1])


def test_capped_tokens_are_counted():
    adv, mask, group_ids, rewards, ctx = _batch(seed=4)
    ctx = dataclasses.replace(ctx, params={**NO_EARLY_STOP, "formula": "softmax", "max_weight": 1.5})
    _, info = apply_weighting("hara_tok", adv, mask, group_ids, rewards, ctx)
    assert info["hara/w_capped_tokens"] >= 1.0 and info["hara/w_max"] <= 1.5 + 1e-5


def test_explore_mode_keeps_a_token_with_novelty_near_zero_from_taking_the_group():
    x = torch.tensor([[1e-9, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    w, _ = group_weights(
        x, torch.ones(2, 4), torch.tensor([0, 0]), 1, ReweightParams(), invert=torch.tensor([True, True])
    )
    assert float(w[0, 0]) <= 5.0 and float(w[:, 1:].min()) > 0.5  # was 5.0 and 0.2: every other token clipped
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)

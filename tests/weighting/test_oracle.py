"""The step oracle's controls: the synthetic world's step checker (hara/data/steps.py) on hand-written rollouts and on
every skill's reference solutions, and the oracle transforms (hara/weighting/oracle.py): where each mode puts an
incorrect rollout's advantage, and which mass it keeps."""

from __future__ import annotations

import re

import pytest
import torch

from hara.config import ConfigError, validate_config
from hara.data.format import format_completion
from hara.data.steps import WrongSpan, evaluate, first_wrong_span, first_wrong_step
from hara.data.synthetic import generate_problems
from hara.weighting import WeightingContext, apply_weighting, host_token_weights

REFERENCE = "3 * 4 = 12. 12 + 5 = 17."


@pytest.mark.parametrize(
    "completion,wrong",
    [
        (" 3 * 4 = 12. 12 + 5 = 17. The answer is \\boxed{17}.", None),  # right
        (" 3 * 4 = 13. 13 + 5 = 18. The answer is \\boxed{18}.", 0),  # false arithmetic at step 0
        (" 3 * 4 = 12. 12 + 5 = 18. The answer is \\boxed{18}.", 1),  # false arithmetic at step 1
        (" 3 * 4 = 12. 12 + 6 = 18. The answer is \\boxed{18}.", 1),  # right arithmetic off the reference's track
        (" 3 * 4 = 12. 12 + 5 = 17. The answer is \\boxed{71}.", 2),  # only the boxed answer is wrong
        (" 3 * 4 = 12. 12 + 5 = 17. The answer is \\boxed{17", 2),  # box never closed
        (" The answer is \\boxed{9}.", 0),  # no steps: the answer is the first wrong step
        (" 3 * 4 = 12. So far so good", None),  # cut off before an answer: nothing wrong to point at
        ("", None),  # empty
        (" @@ == ?? )(", None),  # malformed
        (" 7 / 0 = 3. The answer is \\boxed{17}.", 0),  # no value: wrong
    ],
)
def test_the_first_wrong_step_of_hand_written_rollouts(completion, wrong):
    check = first_wrong_step(completion, "17", REFERENCE)
    assert check.first_wrong == wrong, check
    if wrong is not None:
        assert completion[check.start :].startswith(check.steps[wrong].text)


def test_without_a_reference_only_false_arithmetic_and_the_answer_are_wrong():
    assert first_wrong_step(" 3 * 4 = 12. 12 + 6 = 18. The answer is \\boxed{18}.", "17").first_wrong == 2
    assert first_wrong_step(" 3 * 4 = 12. 12 + 6 = 19.", "17").first_wrong == 1


@pytest.mark.parametrize(
    "part,value",
    [
        ("(3 + 4) * 2", 14),
        ("7/4", 1.75),
        ("(12 - 5)(12 + 5)", 119),
        ("2^10", 1024),
        ("-3 * (-2)", 6),
        ("x + 1", None),
        ("25% of 200", None),
        ("9^9^9", None),
        ("", None),
    ],
)
def test_arithmetic_parts_are_evaluated_exactly_and_anything_else_is_not(part, value):
    assert evaluate(part) == value


def test_every_skills_reference_solution_checks_right_and_a_changed_result_is_found_where_it_is():
    records, perturbed = generate_problems(2000, 5), 0
    for record in records:
        completion = format_completion(record["solution"], record["answer"])
        assert first_wrong_step(completion, record["answer"], record["solution"]).first_wrong is None, record
        steps = first_wrong_step(completion, record["answer"], record["solution"]).steps
        checked = [k for k, step in enumerate(steps) if step.ok and not step.answer and "=" in step.text]
        if not checked:
            continue
        k = checked[0]
        text = steps[k].text
        last = list(re.finditer(r"\d+", text))[-1]
        wrong_text = text[: last.start()] + str(int(last.group()) + 1) + text[last.end() :]
        changed = completion.replace(text, wrong_text, 1)
        found = first_wrong_step(changed, record["answer"], record["solution"]).first_wrong
        # the changed result is wrong arithmetic unless it was only restated there ("x = 5"), which then reads
        # off the reference's track: either way the oracle points at step k
        assert found == k, (record, changed)
        perturbed += 1
    assert perturbed > 1000


def test_the_tokens_of_the_first_wrong_step():
    pieces = [
        " 3",
        " *",
        " 4",
        " =",
        " 12.",
        " 12",
        " +",
        " 6",
        " =",
        " 18.",
        " The",
        " answer",
        " is",
        " \\boxed{18}.",
    ]
    # a wrong worked step runs to the next step's start: the answer template is not part of it
    assert first_wrong_span(pieces, "17", REFERENCE) == WrongSpan(5, 10, 1)
    # a wrong answer step after right steps: its token holding the boxed value
    right = [" 3 * 4 = 12.", " 12 + 5 = 17.", " The answer is ", "\\boxed{", "71", "}."]
    assert first_wrong_span(right, "17", REFERENCE) == WrongSpan(4, 5, 2)
    assert first_wrong_span([" 3 * 4 = 12."], "17", REFERENCE) == WrongSpan()
    assert first_wrong_span([], "17", REFERENCE) == WrongSpan()


def _batch():
    """Two prompts of four rollouts: rollouts 1-3 and 5-7 incorrect, starting to go wrong at tokens 2, 5, -1 (not
    located) and 0, 3, 6; padding on two rows."""
    mask = torch.ones(8, 8, dtype=torch.bool)
    mask[2, 6:] = False
    mask[6, 7:] = False
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    advantages = (rewards - 0.25) / 0.5
    starts = torch.tensor([-1, 2, 5, -1, -1, 0, 3, 6])
    return advantages, mask, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), rewards, starts


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("prefix_share", [0.0, 0.3])
def test_oracle_steps_moves_the_penalty_behind_the_wrong_step_and_keeps_each_groups_mass(loss_type, prefix_share):
    advantages, mask, groups, rewards, starts = _batch()
    context = WeightingContext(error_starts=starts, loss_type=loss_type, params={"prefix_share": prefix_share})
    token, info = apply_weighting("oracle_steps", advantages, mask, groups, rewards, context)
    plain = advantages[:, None] * mask
    assert torch.equal(token[rewards > 0.5], plain[rewards > 0.5])  # correct rollouts keep the host's advantage
    for row, start in enumerate(starts.tolist()):
        if start > 0 and rewards[row] == 0:
            before, after = token[row, :start], token[row, start:][mask[row, start:]]
            ratio = before / plain[row, :start]
            assert torch.allclose(ratio, ratio[0]) and torch.all(after < plain[row, start:][mask[row, start:]])
            if prefix_share == 0.0:
                assert torch.all(before == 0)
    omega = host_token_weights(mask, loss_type)
    for prompt in (0, 1):
        wrong = (groups == prompt) & (rewards == 0)
        assert torch.allclose((omega * token)[wrong].sum(), (omega * plain)[wrong].sum(), rtol=1e-5)
    assert info["oracle/located_fraction"] == pytest.approx(5 / 6)
    assert torch.all(token * advantages[:, None] >= 0)  # no sign flips


def test_oracle_steps_caps_the_weight_of_a_late_mistake():
    advantages, mask, groups, rewards, starts = _batch()
    starts = torch.tensor([-1, 7, 7, 7, -1, 7, 7, 7])  # every mistake on the last token: the cap binds
    context = WeightingContext(error_starts=starts, params={"max_weight": 2.0})
    token, info = apply_weighting("oracle_steps", advantages, mask, groups, rewards, context)
    ratio = token / (advantages[:, None] * mask).where(mask, torch.ones(()))
    assert ratio[mask].max() <= 2.0 + 1e-5 and info["oracle/capped_tokens"] > 0


# the wrong step's end (one past its last token) and its index in the chain, for the rows of _batch()
ENDS = torch.tensor([-1, 4, 6, -1, -1, 2, 5, 8])
STEPS = torch.tensor([-1, 1, 2, -1, -1, 0, 1, 3])


def _run(method, loss_type="grpo", batch=None, **params):
    advantages, mask, groups, rewards, starts = batch or _batch()
    context = WeightingContext(
        error_starts=starts, error_ends=ENDS, error_steps=STEPS, loss_type=loss_type, params=params
    )
    token, info = apply_weighting(method, advantages, mask, groups, rewards, context)
    return token, info, advantages[:, None] * mask, mask


def _span_map(starts, ends, length=8):
    """(B, T) bool masks of the tokens before and inside each row's wrong step (rows with start -1: none)."""
    positions = torch.arange(length)[None, :]
    located = starts[:, None] >= 0
    before = located & (positions < starts[:, None])
    inside = located & (positions >= starts[:, None]) & (positions < ends[:, None])
    return before, inside


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("method,placed", [("oracle_step", "inside"), ("oracle_reversed", "before")])
def test_the_span_modes_put_each_rollouts_own_penalty_on_their_span_only(method, placed, loss_type):
    token, info, plain, mask = _run(method, loss_type, span_max_weight=100.0)
    _, _, _, rewards, starts = _batch()
    before, inside = _span_map(starts, ENDS)
    span = {"inside": inside, "before": before}[placed]
    kept = (rewards > 0.5) | (starts < 0)
    assert torch.equal(token[kept], plain[kept])  # correct and unlocated rollouts keep the host's advantage
    moved = ~kept
    assert torch.all(token[moved][~span[moved]] == 0)  # nothing off the span
    assert torch.all(token[moved][span[moved] & mask[moved]] < 0)  # the whole span penalised
    omega = host_token_weights(mask, loss_type)
    for row in moved.nonzero().flatten().tolist():
        expected = (omega * plain)[row].sum() if span[row].any() else torch.tensor(0.0)
        assert torch.allclose((omega * token)[row].sum(), expected, atol=1e-6), row  # each rollout keeps its mass
    # the sabotage drops the penalty of the rollout wrong from its first step (row 5): nothing right to blame
    assert info["oracle/mass_kept"] == pytest.approx(1.0 if placed == "inside" else 4 / 5, abs=0.05)


def test_the_span_modes_cap_a_short_spans_weight_and_say_how_much_mass_is_left():
    token, info, plain, mask = _run("oracle_step", span_max_weight=2.0)
    ratio = token / plain.where(mask, torch.ones(()))
    assert ratio[mask].max() <= 2.0 + 1e-5 and info["oracle/capped_tokens"] > 0 and info["oracle/mass_kept"] < 1.0


def test_the_process_mode_rewards_the_right_steps_penalises_the_wrong_one_and_credits_groups_without_signal():
    advantages, mask, groups, rewards, starts = _batch()
    rewards[4] = 0.0  # prompt 1: every rollout wrong, so the host's advantage there is 0
    advantages = torch.where(groups == 1, torch.zeros(()), advantages)
    token, info, plain, _ = _run("oracle_process", batch=(advantages, mask, groups, rewards, starts), process_scale=0.5)
    before, inside = _span_map(starts, ENDS)
    size = torch.where(advantages != 0, advantages.abs(), torch.full_like(advantages, 0.5))
    located = (rewards <= 0.5) & (starts >= 0)
    expected = torch.where(located[:, None], size[:, None] * (before.float() - inside.float()), plain) * mask
    assert torch.allclose(token, expected)
    assert token[5, 0:2].eq(-0.5).all() and token[7, :6].eq(0.5).all()  # the silent group gets step credit
    assert info["oracle/silent_rollouts_credited"] == 3.0


def test_the_oracle_logs_where_the_mistakes_are_and_how_many_groups_carry_no_signal():
    _, info, _, _ = _run("oracle_step")
    histogram = [info[f"oracle/first_wrong_step_{k}"] for k in range(10)]
    assert histogram[:4] == pytest.approx([1 / 5, 2 / 5, 1 / 5, 1 / 5]) and sum(histogram) == pytest.approx(1.0)
    assert info["oracle/no_signal_groups"] == 0.0
    advantages, mask, groups, rewards, starts = _batch()
    rewards[4] = 0.0
    _, info, _, _ = _run("oracle_step", batch=(advantages, mask, groups, rewards, starts))
    assert info["oracle/no_signal_groups"] == 0.5


def test_the_gradient_share_counts_what_a_token_can_still_learn_not_the_tokens():
    from hara.rlvr.trainer import gradient_moved

    host, mask = torch.tensor([-1.0]), torch.ones(1, 2, dtype=torch.bool)
    # the advantage moved onto a copied token (p = 1) moves half the tokens but none of the gradient
    copied = gradient_moved(host, torch.tensor([[-3.0, -1.0]]), mask, torch.log(torch.tensor([[1.0, 0.5]])))
    assert copied == {"oracle/gradient_moved": 0.0, "oracle/token_moved": 0.5}
    # half of each token's advantage moved: half of the gradient
    half = gradient_moved(host, torch.tensor([[-1.5, -0.5]]), mask, torch.log(torch.tensor([[0.9, 0.1]])))
    assert half["oracle/gradient_moved"] == pytest.approx(0.5) and half["oracle/token_moved"] == 1.0


def test_oracle_steps_is_refused_for_problems_from_the_hub():
    with pytest.raises(
        ConfigError,
        match="grid.methods\\[1\\]: oracle_steps needs steps that only data.source synthetic supplies, not 'hub'",
    ):
        validate_config({"data": {"source": "hub", "local_dir": "."}, "grid": {"methods": ["none", "oracle_steps"]}})


def test_the_oracle_locations_script_accounts_for_every_rollout(tiny_base, tmp_path):
    """scripts/oracle_locations.py (docs/analyses.md: how much credit the oracle can move in a world), on a random
    tiny model: every sampled rollout is counted once, right or wrong."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in generate_problems(4, 1)))
    out = subprocess.run(
        [
            sys.executable,
            "scripts/oracle_locations.py",
            "--model",
            str(tiny_base),
            "--prompts",
            str(prompts),
            "--config",
            "config/smoke.yaml",
            "--problems",
            "4",
            "--samples",
            "2",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    found = json.loads(out.stdout[out.stdout.index("{") :])
    assert found["rollouts"] == 8 and sum(found["kinds"].values()) == 8

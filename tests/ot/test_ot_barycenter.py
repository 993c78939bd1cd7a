"""Batched linearized barycenter loop: init, batching, padding, invariances, whitening, solvers, leave-one-out."""

import dataclasses

import numpy as np
import pytest
import torch

from hara.ot.barycenter import BarycenterConfig, GroupedStates, init_support, linearized_barycenter
from hara.ot.linearized import token_positions

# no early stop anywhere: results are then independent of which other groups share the batch
EXACT_LOOP = BarycenterConfig(barycenter_size=6, barycenter_tol=0.0, sinkhorn_tol=0.0, sinkhorn_max_iter=30)


def _rows(seed: int, lengths: list[int], groups: list[int], d: int = 5, T: int = 14):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(len(lengths), T, d, generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    return h, mask, torch.tensor(groups)


def test_init_support_bins_by_position_and_interpolates_empty_bins():
    h = torch.tensor([[[0.0], [3.0], [9.0]], [[2.0], [5.0], [-1.0]]])  # two rows of 2 valid tokens
    mask = torch.tensor([[True, True, False], [True, True, False]])
    x = init_support(h, mask, token_positions(mask), torch.tensor([0, 0]), 1, 4)
    # p = 0 -> bin 0 (mean of 0 and 2), p = 1 -> bin 3 (mean of 3 and 5); bins 1, 2 interpolated
    assert torch.allclose(x[0, :, 0], torch.tensor([1.0, 2.0, 3.0, 4.0]))


def test_init_support_copies_the_only_neighbour_at_the_ends():
    h = torch.arange(8.0).reshape(1, 8, 1)
    mask = torch.zeros(1, 8, dtype=torch.bool)
    mask[0, :3] = True
    p = torch.tensor([[0.25, 0.5, 0.75] + [0.0] * 5])  # bins 1, 2, 3; bins 0 and 4 empty
    x = init_support(h, mask, p, torch.tensor([0]), 1, 5)
    assert torch.allclose(x[0, :, 0], torch.tensor([0.0, 0.0, 1.0, 2.0, 2.0]))


def test_batched_groups_equal_a_per_group_loop():
    h, mask, group = _rows(0, [14, 9, 12, 5, 7, 14, 3], [0, 0, 1, 1, 1, 2, 2])
    batched = linearized_barycenter(GroupedStates(h, mask, group, 3), EXACT_LOOP)
    for g in range(3):
        rows = group == g
        single = linearized_barycenter(
            GroupedStates(h[rows], mask[rows], torch.zeros(int(rows.sum()), dtype=torch.long), 1), EXACT_LOOP
        )
        torch.testing.assert_close(batched.support[g], single.support[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batched.plan[rows], single.plan, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(batched.cost[rows], single.cost, atol=1e-5, rtol=1e-5)


def test_padding_content_is_never_used():
    h, mask, group = _rows(1, [14, 6, 10, 8], [0, 0, 1, 1])
    ref = linearized_barycenter(GroupedStates(h, mask, group, 2))
    noisy = torch.where(mask[..., None], h, 1e4 * torch.randn_like(h))
    out = linearized_barycenter(GroupedStates(noisy, mask, group, 2))
    torch.testing.assert_close(out.support, ref.support, atol=1e-4, rtol=1e-4)
    valid = mask[..., None].expand_as(out.plan)
    torch.testing.assert_close(out.plan[valid], ref.plan[valid], atol=1e-6, rtol=1e-4)
    assert torch.equal(out.plan[~valid], torch.zeros_like(out.plan[~valid]))


def test_rollout_order_does_not_matter():
    h, mask, group = _rows(2, [14, 6, 10, 8, 12], [0, 0, 0, 1, 1])
    perm = torch.tensor([4, 2, 0, 3, 1])
    ref = linearized_barycenter(GroupedStates(h, mask, group, 2), EXACT_LOOP)
    out = linearized_barycenter(GroupedStates(h[perm], mask[perm], group[perm], 2), EXACT_LOOP)
    torch.testing.assert_close(out.support, ref.support, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.plan, ref.plan[perm], atol=1e-6, rtol=1e-5)


def test_shift_and_scale_equal_explicit_whitening():
    h, mask, group = _rows(3, [14, 11, 9, 13], [0, 0, 1, 1])
    shift, scale = torch.randn(2, 5) + 3.0, torch.tensor([0.7, 1.9])
    white = (h - shift[group][:, None]) * scale[group][:, None, None]
    ref = linearized_barycenter(GroupedStates(white, mask, group, 2), EXACT_LOOP)
    out = linearized_barycenter(GroupedStates(h, mask, group, 2, shift=shift, scale=scale), EXACT_LOOP)
    torch.testing.assert_close(out.support, ref.support, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.cost, ref.cost, atol=1e-4, rtol=1e-4)


def test_marginals_info_and_the_projection_fixed_point():
    h, mask, group = _rows(4, [14, 12, 10], [0, 0, 0])
    cfg = dataclasses.replace(EXACT_LOOP, barycenter_iters=30, sinkhorn_max_iter=200, barycenter_tol=1e-7)
    res = linearized_barycenter(GroupedStates(h, mask, group, 1), cfg)
    a = mask.float() / mask.sum(1, keepdim=True)
    assert res.info["sinkhorn_marginal_error"] == pytest.approx(
        float((res.plan.sum(-1) - a).abs().sum(-1).max()), abs=1e-6
    )
    torch.testing.assert_close(res.plan.sum(1), torch.full((3, 6), 1 / 6), atol=1e-6, rtol=0)
    proj = torch.einsum("rtj,rtd->jd", res.plan, h) / res.plan.sum((0, 1))[:, None]
    torch.testing.assert_close(proj, res.support[0], atol=1e-4, rtol=1e-4)  # converged: X is its own projection
    assert set(res.info) == {
        "barycenter_iters",
        "sinkhorn_iters",
        "sinkhorn_marginal_error",
        "sinkhorn_unconverged",
        "solver_fallbacks",
        "time_s",
    }
    assert (res.order_reversing_mass >= 0).all()


def test_scaling_and_log_solvers_reach_the_same_result():
    h, mask, group = _rows(5, [14, 8, 11, 13], [0, 0, 1, 1])
    cfg = dataclasses.replace(EXACT_LOOP, sinkhorn_max_iter=300, sinkhorn_tol=1e-6, marginal_tol=1e-6)
    log_res = linearized_barycenter(GroupedStates(h, mask, group, 2), dataclasses.replace(cfg, solver="log"))
    scal_res = linearized_barycenter(GroupedStates(h, mask, group, 2), cfg)
    torch.testing.assert_close(scal_res.plan, log_res.plan, atol=1e-5, rtol=1e-3)
    torch.testing.assert_close(scal_res.support, log_res.support, atol=1e-4, rtol=1e-4)


def test_eps_is_relative_so_a_global_feature_scale_does_not_change_the_plans():
    h, mask, group = _rows(6, [14, 9, 12], [0, 0, 0])
    cfg = dataclasses.replace(EXACT_LOOP, alpha=0.0)
    ref = linearized_barycenter(GroupedStates(h, mask, group, 1), cfg)
    out = linearized_barycenter(GroupedStates(10.0 * h, mask, group, 1), cfg)
    torch.testing.assert_close(out.plan, ref.plan, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.eps, 100.0 * ref.eps, rtol=1e-4, atol=0)


def test_leave_one_out_puts_every_rollout_farther_from_its_barycenter():
    h, mask, group = _rows(7, [14, 14, 13, 12, 14, 11], [0, 0, 0, 1, 1, 1])
    plain = linearized_barycenter(GroupedStates(h, mask, group, 2), EXACT_LOOP)
    loo = linearized_barycenter(GroupedStates(h, mask, group, 2), dataclasses.replace(EXACT_LOOP, leave_one_out=True))
    n_plain = (plain.plan * plain.cost).sum((1, 2))
    n_loo = (loo.plan * loo.cost).sum((1, 2))
    assert (n_loo > n_plain).all()


def test_invalid_config_is_rejected():
    with pytest.raises(ValueError, match="alpha"):
        BarycenterConfig(alpha=1.5)
    with pytest.raises(ValueError, match="solver"):
        BarycenterConfig(solver="newton")
    with pytest.raises(ValueError, match="barycenter_size"):
        BarycenterConfig(barycenter_size=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_matches_cpu():
    h, mask, group = _rows(8, [14, 9, 12, 5], [0, 0, 1, 1])
    cpu = linearized_barycenter(GroupedStates(h, mask, group, 2), EXACT_LOOP)
    gpu = linearized_barycenter(GroupedStates(h.cuda(), mask.cuda(), group.cuda(), 2), EXACT_LOOP)
    np.testing.assert_allclose(gpu.plan.cpu().numpy(), cpu.plan.numpy(), atol=1e-5)


def test_fp64_input_is_solved_in_fp64():
    h, mask, group = _rows(7, [14, 9, 12, 10], [0, 0, 1, 1])
    ref = linearized_barycenter(GroupedStates(h, mask, group, 2), EXACT_LOOP)
    out = linearized_barycenter(GroupedStates(h.double(), mask, group, 2), EXACT_LOOP)
    assert out.plan.dtype == out.support.dtype == torch.float64
    torch.testing.assert_close(out.plan.float(), ref.plan, atol=1e-5, rtol=1e-4)


def _planted(seed: int, n: int = 128, d: int = 32, rollouts: int = 6):
    """One outcome group of rollouts through shared stages with detours of different lengths (the benchmark's
    kind of input, smaller)."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(4, d, generator=g)
    stage = torch.arange(n) * 4 // n
    h = protos[stage].expand(rollouts, n, d) + 0.5 * torch.randn(rollouts, n, d, generator=g)
    for r in range(rollouts):
        length = int(n * (0.05 + 0.4 * r / rollouts))
        h[r, n // 4 : n // 4 + length] += 1.5 * torch.randn(d, generator=g)
    return h, torch.ones(rollouts, n, dtype=torch.bool), torch.zeros(rollouts, dtype=torch.long)


@pytest.mark.parametrize("eps_rel", [0.005, 0.01, 0.05])
def test_final_plans_converge_at_every_swept_epsilon(eps_rel):
    """The sweeps go down to eps_rel 0.005; there the fixed 20-iteration cap left row-marginal errors of ~0.3."""
    h, mask, group = _planted(0)
    res = linearized_barycenter(GroupedStates(h, mask, group, 1), BarycenterConfig(eps_rel=eps_rel))
    a = mask.float() / mask.sum(1, keepdim=True)
    error = float((res.plan.sum(-1) - a).abs().sum(-1).max())
    assert error < 1e-2 and res.info["sinkhorn_marginal_error"] == pytest.approx(error, abs=1e-6)
    assert res.info["sinkhorn_unconverged"] == 0.0


def test_an_unconverged_plan_is_counted():
    h, mask, group = _planted(1)
    res = linearized_barycenter(
        GroupedStates(h, mask, group, 1), BarycenterConfig(eps_rel=0.005, final_max_iter=1, sinkhorn_max_iter=1)
    )
    errors = (res.plan.sum(-1) - mask.float() / mask.sum(1, keepdim=True)).abs().sum(-1)
    assert res.info["sinkhorn_unconverged"] == float((errors >= 5e-3).sum()) >= 1.0
    assert res.info["sinkhorn_marginal_error"] == pytest.approx(float(errors.max()), abs=1e-6)


def test_sinkhorn_budgets_grow_as_epsilon_shrinks():
    assert BarycenterConfig(eps_rel=0.05).budget(20) == 20 and BarycenterConfig(eps_rel=0.5).budget(20) == 20
    assert BarycenterConfig(eps_rel=0.005).budget(20) == 200


def test_a_group_that_settled_does_not_wait_for_the_others():
    """Groups stop on their own: a group's barycenter does not depend on which other groups share the batch."""
    h, mask, group = _planted(2)
    hard = _planted(3)[0] * torch.linspace(0.2, 3.0, 128)[None, :, None]  # slower to settle
    cfg = BarycenterConfig(barycenter_iters=30, barycenter_tol=1e-3)
    alone = linearized_barycenter(GroupedStates(h, mask, group, 1), cfg)
    both = linearized_barycenter(
        GroupedStates(torch.cat([h, hard]), torch.cat([mask, mask]), torch.cat([group, group + 1]), 2), cfg
    )
    torch.testing.assert_close(both.support[0], alone.support[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(both.plan[:6], alone.plan, atol=1e-7, rtol=0)

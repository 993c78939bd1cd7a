"""Anchor-guided linearized FGW cost: closed form, the error identity against POT and the gap bounds."""

import numpy as np
import ot
import pytest
import torch

from hara.ot.diagnostics import order_reversing_mass
from hara.ot.linearized import (
    anchor_plan,
    lifted_points,
    linearized_cost,
    position_cost,
    support_positions,
    token_log_weights,
    token_positions,
)


def _grid(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n)


def _structure(p: np.ndarray) -> np.ndarray:
    return np.abs(p[:, None] - p[None, :])


def _random_plan(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    plan = rng.random((n, k)) * (rng.random((n, k)) < 0.6)
    return plan / plan.sum()


def test_cost_is_the_squared_distance_between_lifted_points():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    x = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    p, s = token_positions(mask).double(), support_positions(4, dtype=torch.float64)
    for alpha in (0.0, 0.3, 0.5, 1.0):
        cost = linearized_cost(h, x, position_cost(p, s, alpha), alpha)
        lift_h, lift_x = lifted_points(h, p, alpha), lifted_points(x, s.expand(3, 4), alpha)
        np.testing.assert_allclose(cost.numpy(), torch.cdist(lift_h, lift_x).square().numpy(), atol=1e-10)


def test_whitening_inside_the_expansion_equals_explicit_whitening():
    g = torch.Generator().manual_seed(1)
    shift = 1e3 * torch.randn(2, 16, generator=g)  # large common component, as in LLM hidden states
    scale = torch.tensor([0.5, 2.0])
    h = shift[:, None, :] + torch.randn(2, 9, 16, generator=g)
    x = torch.randn(2, 4, 16, generator=g)
    pos = position_cost(token_positions(torch.ones(2, 9, dtype=torch.bool)), support_positions(4), 0.5)
    ours = linearized_cost(h, x, pos, 0.5, shift, scale)
    white = (h.double() - shift.double()[:, None]) * scale.double()[:, None, None]
    ref = linearized_cost(white, x.double(), pos.double(), 0.5)
    np.testing.assert_allclose(ours.double().numpy(), ref.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n,k", [(6, 4), (9, 16), (2, 2)])
def test_anchor_plan_linearizes_the_quadratic_term_to_the_position_cost(n, k):
    p, s = _grid(n), _grid(k)
    anchor = anchor_plan(n, k).numpy()
    const_c, h1, h2 = ot.gromov.init_matrix(_structure(p), _structure(s), anchor.sum(1), anchor.sum(0))
    local = ot.gromov.tensor_product(const_c, h1, h2, anchor)  # L(A)[t,j] = sum (C - C_B)^2 A[t',j']
    np.testing.assert_allclose(local, (p[:, None] - s[None]) ** 2, atol=1e-12)
    assert ot.gromov.gwloss(const_c, h1, h2, anchor) == pytest.approx(0.0, abs=1e-12)  # Q(A) = 0


@pytest.mark.parametrize("seed", range(5))
def test_error_identity_against_pot_gwloss_for_any_plan(seed):
    """Q(T) = 2<T,P> - 2 (pbar - sbar)^2 - R(T) for 1-D structures and any plan of mass 1."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 12)), int(rng.integers(2, 8))
    p, s, plan = _grid(n), _grid(k), _random_plan(rng, n, k)
    const_c, h1, h2 = ot.gromov.init_matrix(_structure(p), _structure(s), plan.sum(1), plan.sum(0))
    q = ot.gromov.gwloss(const_c, h1, h2, plan)
    pbar, sbar = plan.sum(1) @ p, plan.sum(0) @ s
    r = float(order_reversing_mass(torch.from_numpy(plan), torch.from_numpy(p), torch.from_numpy(s)))
    assert r >= 0.0
    assert q == pytest.approx(2 * (plan * (p[:, None] - s[None]) ** 2).sum() - 2 * (pbar - sbar) ** 2 - r, abs=1e-12)


def _fgw_parts(seed: int, n: int, k: int, alpha: float):
    rng = np.random.default_rng(seed)
    h, x = rng.normal(size=(n, 3)), rng.normal(size=(k, 3))
    p, s = _grid(n), _grid(k)
    m = ot.dist(h, x)
    lin = (1 - alpha) * m + 2 * alpha * (p[:, None] - s[None]) ** 2
    return m, lin, p, s, ot.unif(n), ot.unif(k)


def _fgw_value(plan, m, p, s, a, q, alpha):
    const_c, h1, h2 = ot.gromov.init_matrix(_structure(p), _structure(s), a, q)
    return (1 - alpha) * (plan * m).sum() + alpha * ot.gromov.gwloss(const_c, h1, h2, plan)


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.9])
@pytest.mark.parametrize("seed", range(3))
def test_f_equals_f_lin_minus_alpha_r_on_feasible_plans(seed, alpha):
    m, lin, p, s, a, q = _fgw_parts(seed, 10, 5, alpha)
    rng = np.random.default_rng(100 + seed)
    plan = ot.bregman.sinkhorn_log(a, q, rng.random((10, 5)), 0.1, stopThr=1e-14, numItermax=10000)
    r = float(order_reversing_mass(torch.from_numpy(plan), torch.from_numpy(p), torch.from_numpy(s)))
    assert _fgw_value(plan, m, p, s, a, q, alpha) == pytest.approx((plan * lin).sum() - alpha * r, abs=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_linearization_gap_is_bounded_by_order_reversing_mass(seed):
    """alpha R(T_lin) <= min F_lin - min F <= alpha R(T_F), with POT's FGW plan (started at T_lin) for min F."""
    alpha = 0.5
    m, lin, p, s, a, q = _fgw_parts(seed, 12, 6, alpha)
    t_lin = ot.emd(a, q, lin)
    t_fgw = ot.gromov.fused_gromov_wasserstein(m, _structure(p), _structure(s), a, q, alpha=alpha, G0=t_lin)
    min_lin = (t_lin * lin).sum()
    f_best = min(_fgw_value(t_fgw, m, p, s, a, q, alpha), _fgw_value(t_lin, m, p, s, a, q, alpha))
    r_lin, r_fgw = (
        float(order_reversing_mass(torch.from_numpy(t), torch.from_numpy(p), torch.from_numpy(s)))
        for t in (t_lin, t_fgw)
    )
    gap = min_lin - f_best
    assert gap >= alpha * r_lin - 1e-10 >= -1e-10
    assert min_lin - _fgw_value(t_fgw, m, p, s, a, q, alpha) <= alpha * r_fgw + 1e-10


def test_positions_and_log_weights_use_valid_tokens_only():
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    p = token_positions(mask)
    assert torch.allclose(p[0], torch.tensor([0, 0, 1 / 3, 0, 2 / 3, 1, 0]))
    assert torch.equal(p[1], torch.zeros(7))  # n = 1
    log_a = token_log_weights(mask)
    assert torch.allclose(log_a[0].exp(), mask[0].float() / 4)
    assert torch.equal(log_a[1].exp(), mask[1].float())
    assert torch.allclose(log_a[2].exp(), torch.full((7,), 1 / 7))  # empty row: harmless uniform dummy

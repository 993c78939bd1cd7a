"""Order-reversing mass R(T) in O(n k) against the O(n^2 k^2) definition, and marginal errors."""

import numpy as np
import pytest
import torch

from hara.ot.diagnostics import marginal_errors, order_reversing_mass


def _brute_force(plan: np.ndarray, p: np.ndarray, s: np.ndarray) -> float:
    """R(T) = 4 sum T[t,j] T[t',j'] [(p_t - p_t')(s_j - s_j')]_- (definition)."""
    prod = (p[:, None, None, None] - p[None, None, :, None]) * (s[None, :, None, None] - s[None, None, None, :])
    return 4.0 * float(np.einsum("tj,uk,tjuk->", plan, plan, np.maximum(-prod, 0.0)))


@pytest.mark.parametrize("seed", range(6))
def test_prefix_sums_match_the_definition(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 15)), int(rng.integers(2, 10))
    plan = rng.random((n, k))
    plan /= plan.sum()
    p, s = np.sort(rng.random(n)), np.linspace(0, 1, k)
    ours = float(order_reversing_mass(torch.from_numpy(plan), torch.from_numpy(p), torch.from_numpy(s)))
    assert ours == pytest.approx(_brute_force(plan, p, s), rel=1e-10, abs=1e-14)


def test_padding_rows_without_mass_do_not_count_and_batches_work():
    rng = np.random.default_rng(7)
    plans, ps = [], []
    for n in (5, 8):
        plan = np.zeros((8, 4))
        plan[:n] = rng.random((n, 4))
        plans.append(plan / plan.sum())
        ps.append(np.concatenate([np.linspace(0, 1, n), np.zeros(8 - n)]))  # padding positions are 0
    s = np.linspace(0, 1, 4)
    ours = order_reversing_mass(torch.tensor(np.stack(plans)), torch.tensor(np.stack(ps)), torch.tensor(s))
    for i, n in enumerate((5, 8)):
        assert float(ours[i]) == pytest.approx(_brute_force(plans[i][:n], ps[i][:n], s), rel=1e-10)


def test_monotone_plans_have_zero_mass_and_reversed_ones_do_not():
    n = 6
    p = s = torch.linspace(0, 1, n, dtype=torch.float64)
    diag = torch.eye(n, dtype=torch.float64) / n
    assert float(order_reversing_mass(diag, p, s)) == pytest.approx(0.0, abs=1e-15)
    anti = diag.flip(1)
    expected = _brute_force(anti.numpy(), p.numpy(), s.numpy())
    assert expected > 0.1
    assert float(order_reversing_mass(anti, p, s)) == pytest.approx(expected, rel=1e-12)


def test_fp32_is_accurate_enough_for_logging():
    g = torch.Generator().manual_seed(3)
    plan = torch.rand(2048, 16, generator=g)
    plan /= plan.sum()
    p, s = torch.linspace(0, 1, 2048), torch.linspace(0, 1, 16)
    ref = order_reversing_mass(plan.double(), p.double(), s.double())
    assert float(order_reversing_mass(plan, p, s)) == pytest.approx(float(ref), rel=1e-3)


def test_marginal_errors():
    plan = torch.tensor([[0.2, 0.1], [0.3, 0.4]])
    rows, cols = marginal_errors(plan, torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]))
    assert float(rows) == pytest.approx(0.4)
    assert float(cols) == pytest.approx(0.0, abs=1e-7)

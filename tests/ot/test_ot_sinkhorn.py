"""Sinkhorn solvers against POT's log-domain Sinkhorn, with padding, batching, warm starts and underflow."""

import numpy as np
import ot
import pytest
import torch

from hara.ot.sinkhorn import SOLVERS, sinkhorn_log, sinkhorn_scaling


def _problem(seed: int, n: int = 12, k: int = 5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(n, generator=g, dtype=dtype) + 0.1
    b = torch.rand(k, generator=g, dtype=dtype) + 0.1
    return a / a.sum(), b / b.sum(), torch.rand(n, k, generator=g, dtype=dtype)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plan_matches_pot_sinkhorn_log(solver, seed):
    a, b, cost = _problem(seed)
    ref = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), cost.numpy(), 0.05, numItermax=20000, stopThr=1e-13)
    res = SOLVERS[solver](a.log(), b.log(), cost, 0.05, max_iter=20000, tol=1e-12)
    np.testing.assert_allclose(res.plan.numpy(), ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(res.plan.sum(0).numpy(), b.numpy(), atol=1e-12)
    assert float(res.marginal_error) < 1e-11


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_fp32_plan_matches_pot(solver):
    a, b, cost = _problem(3, n=40, k=16)
    ref = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), cost.numpy(), 0.02, numItermax=20000, stopThr=1e-13)
    res = SOLVERS[solver](a.log().float(), b.log().float(), cost.float(), 0.02, max_iter=5000, tol=1e-6)
    assert res.plan.dtype == torch.float32
    # entries are ~1/(n k) = 1.6e-3: agreement to 1e-4 of that scale
    np.testing.assert_allclose(res.plan.double().numpy(), ref, rtol=0, atol=2e-7)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_padding_rows_get_no_mass_and_leave_the_plan_unchanged(solver):
    a, b, cost = _problem(4, n=10)
    garbage = 1e3 * torch.rand(4, cost.shape[1], dtype=cost.dtype)
    log_a = torch.cat([a.log(), torch.full((4,), float("-inf"), dtype=a.dtype)])
    res = SOLVERS[solver](log_a, b.log(), torch.cat([cost, garbage]), 0.05, max_iter=20000, tol=1e-12)
    ref = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), cost.numpy(), 0.05, numItermax=20000, stopThr=1e-13)
    assert torch.equal(res.plan[10:], torch.zeros_like(res.plan[10:]))
    np.testing.assert_allclose(res.plan[:10].numpy(), ref, atol=1e-10)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_batched_equals_loop(solver):
    probs = [_problem(s) for s in range(3)]
    eps = torch.tensor([0.03, 0.05, 0.1], dtype=torch.float64)
    log_a = torch.stack([p[0].log() for p in probs])
    log_b = torch.stack([p[1].log() for p in probs])
    batched = SOLVERS[solver](log_a, log_b, torch.stack([p[2] for p in probs]), eps, max_iter=20000, tol=1e-12)
    for i, (a, b, cost) in enumerate(probs):
        single = SOLVERS[solver](a.log(), b.log(), cost, float(eps[i]), max_iter=20000, tol=1e-12)
        np.testing.assert_allclose(batched.plan[i].numpy(), single.plan.numpy(), atol=1e-12)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_warm_start_from_the_fixed_point_stops_at_the_first_check(solver):
    a, b, cost = _problem(5)
    first = SOLVERS[solver](a.log(), b.log(), cost, 0.05, max_iter=20000, tol=1e-11)
    again = SOLVERS[solver](
        a.log(), b.log(), cost, 0.05, f=first.f, g=first.g, max_iter=20000, tol=1e-10, check_every=5, absorb_every=5
    )
    assert again.iterations == 5
    np.testing.assert_allclose(again.plan.numpy(), first.plan.numpy(), atol=1e-12)


def test_error_is_checked_only_every_few_iterations():
    a, b, cost = _problem(6)
    log_res = sinkhorn_log(a.log(), b.log(), cost, 0.05, max_iter=1000, tol=1e9, check_every=7)
    assert log_res.iterations == 7  # a huge tol is met at the first check, not before
    scal = sinkhorn_scaling(a.log(), b.log(), cost, 0.05, max_iter=1000, tol=1e9, check_every=7, absorb_every=7)
    assert scal.iterations == 1 + 7  # one cold-start log-domain iteration, then one checked cycle
    capped = sinkhorn_scaling(a.log(), b.log(), cost, 0.05, max_iter=20, tol=0.0)
    assert capped.iterations == 20


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_tiny_eps_underflow_stays_finite_and_agrees(solver):
    a, b, cost = _problem(7, n=30, k=8, dtype=torch.float32)
    cost = 10.0 * cost  # cost / eps up to 200: plain exp(-C/eps) underflows to 0 in fp32 for many entries
    res = SOLVERS[solver](a.log(), b.log(), cost, 0.05, max_iter=5000, tol=1e-5)
    ref = sinkhorn_log(a.double().log(), b.double().log(), cost.double(), 0.05, max_iter=5000, tol=1e-10)
    assert bool((torch.exp(-cost / 0.05) == 0).any())
    assert torch.isfinite(res.plan).all()
    assert float(res.marginal_error) < 1e-4
    np.testing.assert_allclose(res.plan.double().numpy(), ref.plan.numpy(), atol=1e-4)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_reported_error_is_the_row_marginal_error(solver):
    a, b, cost = _problem(8)
    res = SOLVERS[solver](a.log(), b.log(), cost, 0.05, max_iter=3, tol=0.0)
    expected = (res.plan.sum(1) - a).abs().sum()
    assert float(res.marginal_error) == pytest.approx(float(expected), rel=1e-9)
    assert float(res.marginal_error) > 1e-8  # three iterations are not converged


def _flushing() -> bool:
    """Whether fp32 denormals are flushed right now (half of a denormal is then 0)."""
    return bool(torch.tensor([1e-39], dtype=torch.float32).mul(0.5).item() == 0.0)


def test_flush_denormals_gives_the_caller_its_own_setting_back():
    from hara.ot.sinkhorn import flush_denormals

    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        with flush_denormals():
            assert _flushing()
        assert _flushing()  # the caller had it on: it stays on
        torch.set_flush_denormal(False)
        with flush_denormals():
            with flush_denormals():  # nested: the inner exit leaves the outer block flushing
                pass
            assert _flushing()
        assert not _flushing()
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_every_solver_runs_with_denormals_flushed(solver, monkeypatch):
    """Any caller of a solver (the barycenter, SHEAR's span transport) gets flushing without asking for it."""
    import hara.ot.sinkhorn as sk

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush denormals")
    seen, update = [], sk._log_update_f
    monkeypatch.setattr(sk, "_log_update_f", lambda *args: seen.append(_flushing()) or update(*args))
    a, b, cost = _problem(9, dtype=torch.float32)
    SOLVERS[solver](a.log(), b.log(), cost, 0.05, max_iter=5)
    assert seen and all(seen)
    assert not _flushing()


def test_the_scaling_solver_says_when_it_fell_back_to_the_log_domain(monkeypatch):
    import hara.ot.sinkhorn as sk

    a, b, cost = _problem(10, dtype=torch.float32)
    assert not sinkhorn_scaling(a.log(), b.log(), cost, 0.05, max_iter=50).fallback

    def overflowing(a2, b2, kernel, iters, want_error):
        u, v, error = cycle(a2, b2, kernel, iters, want_error)
        return torch.full_like(u, float("inf")), v, error

    cycle = sk._scaling_cycle
    monkeypatch.setattr(sk, "_scaling_cycle", overflowing)
    res = sinkhorn_scaling(a.log(), b.log(), cost, 0.05, max_iter=50)
    ref = sinkhorn_log(a.log(), b.log(), cost, 0.05, max_iter=50)
    assert res.fallback and torch.equal(res.plan, ref.plan)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_each_batch_element_stops_on_its_own(solver):
    """An element that has converged keeps its potentials while a harder one iterates on: its plan is the one it
    gets when solved alone, whatever shares the batch."""
    a, b, easy = _problem(11, dtype=torch.float32)
    hard = 30.0 * _problem(12, dtype=torch.float32)[2]  # large cost / eps: many more iterations
    alone = SOLVERS[solver](a.log(), b.log(), easy, 0.05, max_iter=5000, tol=1e-3)
    both = SOLVERS[solver](
        a.log().expand(2, -1), b.log().expand(2, -1), torch.stack([easy, hard]), 0.05, max_iter=5000, tol=1e-3
    )
    assert both.iterations > alone.iterations
    torch.testing.assert_close(both.plan[0], alone.plan, atol=1e-7, rtol=0)
    assert float(both.marginal_error.max()) < 1e-3


def test_an_unknown_solver_is_named():
    from hara.ot.sinkhorn import sinkhorn_solve

    a, b, cost = _problem(11)
    with pytest.raises(ValueError, match="solver must be one of \\['log', 'scaling'\\], got 'newton'"):
        sinkhorn_solve(a.log(), b.log(), cost, 0.05, solver="newton")

"""Legendre inversion (mean -> natural parameters) over the whole interior of the moment space."""
import numpy as np
import pytest
from scipy.special import digamma

import infogeo as ig
from infogeo.budget import Budget, BudgetExceededError
from infogeo.statistical.legendre import newton_legendre


def test_beta_mean_parameters_from_the_issue_are_attained():
    M = ig.load_manifold("beta", chart="mean")
    eta = np.array([-1.29, -0.44])        # e^-1.29 + e^-0.44 < 1: inside the moment space
    a, b = M.to_chart(eta, "natural")
    # independent check of the moment map: E log x = digamma(a) - digamma(a + b)
    np.testing.assert_allclose([digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)], eta, atol=1e-12)


@pytest.mark.parametrize("name", ["beta", "gamma", "dirichlet", "von_mises"])
def test_inversion_recovers_random_interior_points(name):
    F = ig.load_manifold(name)
    Fm = F.in_chart("mean")
    rng = np.random.default_rng(7)
    for scale in (0.3, 1.0, 3.0):
        for _ in range(5):
            theta = np.asarray(F.to_chart(F.random_point(rng), "natural"), dtype=float)
            theta = theta * scale if F.in_natural_domain(theta * scale) else theta
            eta = np.asarray(F.in_chart("natural").to_chart(theta, "mean"), dtype=float)
            got = np.asarray(Fm.to_chart(eta, "natural"), dtype=float)
            np.testing.assert_allclose(got, theta, rtol=1e-8, atol=1e-10)


def test_beta_near_the_boundary_of_the_moment_space():
    F = ig.load_manifold("beta", chart="natural")
    for theta in ([0.02, 300.0], [50.0, 0.05], [1e-2, 1e-2], [400.0, 500.0], [1e-3, 1e3]):
        eta = np.asarray(F.to_chart(np.array(theta), "mean"), dtype=float)
        got = np.asarray(F.in_chart("mean").to_chart(eta, "natural"), dtype=float)
        np.testing.assert_allclose(got, theta, rtol=1e-7)


def test_unattained_mean_parameters_raise():
    M = ig.load_manifold("beta", chart="mean")
    with pytest.raises(ValueError, match="not attained"):
        M.to_chart(np.array([-0.1, -0.1]), "natural")   # e^-0.1 + e^-0.1 > 1: outside


def test_legendre_budget():
    F = ig.load_manifold("gamma")
    psi = F.log_partition
    eta = np.asarray(F.to_chart(F.random_point(np.random.default_rng(1)), "mean"), dtype=float)
    start = np.array([1.0, -1.0])
    with pytest.raises(BudgetExceededError, match="Legendre inversion .*eta = .*try:"):
        newton_legendre(psi, eta, start, F.in_natural_domain, budget=Budget(max_iter=1, max_time=10))
    theta = newton_legendre(psi, eta, [np.zeros(2), start], F.in_natural_domain)   # (0, 0) is outside: skipped
    np.testing.assert_allclose(F.in_chart("natural").to_chart(theta, "mean"), eta, atol=1e-11)


def _poissons(k):
    """k independent Poisson counts as a generic family: psi = sum exp(theta), eta = exp(theta)."""
    from scipy.special import gammaln
    B = ig.backend
    return ig.ExponentialFamily(
        sufficient_statistics=lambda x: np.asarray(x, float).reshape(-1, k),
        log_partition=lambda th: B.sum(B.exp(th)), dim=k,
        log_base_measure=lambda x: -gammaln(np.asarray(x, float).reshape(-1, k) + 1).sum(-1))


@pytest.mark.parametrize("eta", [[1e-10], [1e-20], [1e-3], [1.0], [1e8], [1e-12, 1e5], [3e-9, 2e-15]])
def test_small_mean_parameters_are_inverted_to_full_relative_accuracy(eta):
    """The moment error was measured against 1 + |eta|, so a Poisson mean of 1e-10 stopped at
    theta = -23.025389 (exact log 1e-10 = -23.025851); found by an independent QA sweep."""
    eta = np.array(eta)
    P = _poissons(len(eta)).in_chart("mean")
    theta = np.asarray(P.to_chart(eta, "natural"))
    np.testing.assert_allclose(theta, np.log(eta), rtol=1e-14, atol=0)
    # the mean-chart Fisher is diag(1 / eta)
    np.testing.assert_allclose(np.diag(np.asarray(P.fisher(eta))), 1.0 / eta, rtol=1e-12, atol=0)


def test_fit_refuses_data_whose_mean_statistics_lie_on_the_boundary():
    """A Poisson sample of all zeros has no MLE (eta = 0): fit returned theta = -30.5, where
    exp(theta) matched 0 to the absolute tolerance (found by an independent QA sweep)."""
    P = _poissons(1)
    with pytest.raises(ValueError, match="does not exist"):
        P.fit(np.zeros(3))
    with pytest.raises(ValueError, match="boundary"):
        P.in_chart("mean").point(np.array([0.0]))
    theta = np.asarray(P.fit(np.array([0.0, 0.0, 1.0])))     # one count: the MLE is log(1/3)
    np.testing.assert_allclose(theta, [np.log(1 / 3)], rtol=1e-14)

"""The exponential-family identities (Amari & Nagaoka 2000, Ch. 2-3), for every family in every chart."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.geometry.vectors import Covector
from infogeo.statistical import ExponentialFamily

from .conftest import points


def _np(a):
    return B.to_numpy(a)


def test_fisher_closed_form_equals_autodiff_of_psi(family, chart):
    M = family.in_chart(chart)
    for x in points(M, 2):
        closed = _np(M.fisher(x))
        auto = _np(M._fisher_autodiff(x))                 # J^T hess(psi) J, all autodiff
        np.testing.assert_allclose(closed, auto, rtol=1e-9, atol=1e-10)


def test_fisher_natural_is_hessian_of_psi(family):
    M = family.in_chart("natural")
    for th in points(M, 2):
        np.testing.assert_allclose(_np(M.fisher(th)), _np(B.hessian(M.log_partition, th)), rtol=1e-9, atol=1e-12)
        v = np.arange(1.0, M.dim + 1)
        np.testing.assert_allclose(_np(M.fisher_natural_vp(th, v)), _np(M.fisher(th)) @ v, rtol=1e-9, atol=1e-12)


def test_moments_are_gradient_of_psi(family):
    M = family.in_chart("natural")
    for th in points(M, 2):
        np.testing.assert_allclose(_np(M.moments(th)), _np(B.grad(M.log_partition, th)), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(M.to_mean(th)), _np(B.grad(M.log_partition, th)), rtol=1e-10, atol=1e-12)


def test_fisher_is_hessian_of_kl_at_the_diagonal(family, chart):
    M = family.in_chart(chart)
    x = points(M, 1, seed=3)[0]
    H = _np(B.hessian(lambda u: M.kl(u, x), x))          # grad^2_u KL(p_u || p_x) at u = x
    np.testing.assert_allclose(H, _np(M.fisher(x)), rtol=1e-7, atol=1e-9)


def test_fisher_is_covariance_of_the_score(family, chart):
    """Monte Carlo (loose): E[score score^T] ~ F, and E[score] ~ 0."""
    M = family.in_chart(chart)
    x = points(M, 1, seed=5)[0]
    s = _np(M.score(x, M.sample(x, 40000, rng=1)))
    F = _np(M.fisher(x))
    scale = np.sqrt(np.outer(np.diag(F), np.diag(F)))
    assert np.all(np.abs(s.mean(0)) <= 0.05 * np.sqrt(np.diag(F)))
    assert np.all(np.abs(s.T @ s / len(s) - F) <= 0.1 * scale)


def test_score_is_gradient_of_log_likelihood(family, chart):
    M = family.in_chart(chart)
    x = points(M, 1, seed=7)[0]
    data = M.sample(x, 3, rng=2)
    auto = np.stack([_np(B.grad(lambda z: M.log_prob(z, data[i:i + 1])[0], x)) for i in range(3)])
    np.testing.assert_allclose(_np(M.score(x, data)), auto, rtol=1e-8, atol=1e-10)


def test_kl_closed_form_equals_bregman_of_psi(family):
    p, q = points(family, 2, seed=11)
    closed = float(_np(family.kl(p, q)))
    bregman = float(_np(ExponentialFamily.kl(family, p, q)))
    assert closed > 0
    assert closed == pytest.approx(bregman, rel=1e-9, abs=1e-12)
    assert float(_np(family.kl(p, p))) == pytest.approx(0.0, abs=1e-12)


def test_kl_matches_monte_carlo_log_ratio(family):
    p, q = points(family, 2, seed=13)
    x = family.sample(p, 40000, rng=3)
    mc = np.mean(_np(family.log_prob(p, x)) - _np(family.log_prob(q, x)))
    kl = float(_np(family.kl(p, q)))
    assert abs(mc - kl) < 0.05 * max(kl, 0.2)


def test_charts_round_trip(family, chart):
    for x in points(family, 2, seed=17):
        y = family.to_chart(x, chart)
        family.in_chart(chart).check_point(y)
        np.testing.assert_allclose(_np(family.from_chart(y, chart)), _np(x), rtol=1e-10, atol=1e-12)
        # KL and distance do not depend on the chart
    p, q = points(family, 2, seed=19)
    M = family.in_chart(chart)
    pc, qc = family.to_chart(p, chart), family.to_chart(q, chart)
    assert float(_np(M.kl(pc, qc))) == pytest.approx(float(_np(family.kl(p, q))), rel=1e-9)


def test_vectors_push_forward_covectors_pull_back(family, chart):
    """w(J v) == (J^T w)(v), and the metric transforms as J^T G J."""
    x = points(family, 1, seed=23)[0]
    rng = np.random.default_rng(0)
    v = family.vector(x, B.array(rng.standard_normal(family.dim)))
    Jv = family.push_forward(v, chart)
    assert Jv.chart == chart
    w = Covector(Jv.base, B.array(rng.standard_normal(family.dim)), chart)
    assert float(_np(family.pull_back(w, x)(v))) == pytest.approx(float(_np(w(Jv))), rel=1e-10)
    J = _np(family.chart_jacobian(x, chart))
    G_other = _np(family.in_chart(chart).fisher(family.to_chart(x, chart)))
    np.testing.assert_allclose(J.T @ G_other @ J, _np(family.fisher(x)), rtol=1e-8, atol=1e-10)
    # the inner product of two vectors is chart-independent
    u = family.vector(x, B.array(rng.standard_normal(family.dim)))
    other = family.in_chart(chart).metric
    assert float(_np(other.inner(Jv, family.push_forward(u, chart)))) == pytest.approx(
        float(_np(family.metric.inner(v, u))), rel=1e-8)
    with pytest.raises(TypeError):
        family.push_forward(w, chart)


def _cost(M):
    """A smooth cost written in the mean chart: a function of the distribution, not of a chart."""
    def J_mean(eta):
        return B.sum(B.sin(eta)) + 0.5 * B.sum(eta * eta)
    return J_mean


@pytest.mark.parametrize("first,second", [("natural", "mean"), ("mean", "natural")])
def test_natural_gradient_is_euclidean_gradient_in_the_dual_chart(family, first, second):
    """Legendre duality: F_theta^{-1} grad_theta J = grad_eta J, and F_eta^{-1} grad_eta J = grad_theta J."""
    J_mean = _cost(family)
    A, D = family.in_chart(first), family.in_chart(second)
    x = points(A, 1, seed=29)[0]

    def J_A(z):
        return J_mean(A.to_chart(z, "mean"))

    def J_D(z):
        return J_mean(D.to_chart(z, "mean"))

    natural_grad = _np(A.gradient(J_A, x).components)
    euclid_dual = _np(B.grad(J_D, A.to_chart(x, second)))
    np.testing.assert_allclose(natural_grad, euclid_dual, rtol=1e-8, atol=1e-10)


def test_natural_gradient_step_is_chart_invariant_to_first_order(family, chart):
    """One natural-gradient step in two charts: the end points agree up to O(alpha^2)."""
    J_mean = _cost(family)
    M = family
    x = points(M, 1, seed=31)[0]
    C = family.in_chart(chart)
    xc = M.to_chart(x, chart)
    errs = []
    for alpha in (1e-2, 5e-3):
        step_M = M.retract(x, -alpha * M.gradient(lambda z: J_mean(M.to_mean(z)), x))
        step_C = C.retract(xc, -alpha * C.gradient(lambda z: J_mean(C.to_mean(z)), xc))
        errs.append(np.linalg.norm(_np(M.to_chart(step_M, chart)) - _np(step_C)))
    if errs[0] < 1e-13:     # affine chart change: exact (natural gradient is invariant under affine reparametrisation)
        assert errs[1] < 1e-13
    else:
        assert errs[1] / errs[0] == pytest.approx(0.25, rel=0.1)


def test_affine_chart_changes_give_identical_natural_gradient_steps():
    """Fixed-covariance Gaussian (theta = Sigma^{-1} mu) and independence model (mu = (1+eta)/2):
    affine chart changes, so natural-gradient steps agree exactly, not just to first order."""
    for M, charts in ((ig.Gaussian(dim=2, covariance="fixed", cov=[[2.0, 0.5], [0.5, 1.0]]), ("standard", "natural")),
                      (ig.IndependenceModel(3, chart="mean"), ("mean", "standard"))):
        A, C = M.in_chart(charts[0]), M.in_chart(charts[1])
        x = A.random_point(0)
        f = lambda z, S=A: B.sum(B.cos(3 * S.to_chart(z, charts[0])))  # noqa: E731
        g = lambda z, S=C: B.sum(B.cos(3 * S.to_chart(z, charts[0])))  # noqa: E731
        ya = A.retract(x, -0.05 * A.gradient(f, x))   # a step that stays on the manifold
        yc = C.retract(A.to_chart(x, charts[1]), -0.05 * C.gradient(g, A.to_chart(x, charts[1])))
        np.testing.assert_allclose(_np(A.to_chart(ya, charts[1])), _np(yc), rtol=1e-12, atol=1e-13)


def test_user_prototyped_poisson_family():
    """A Poisson family from t and psi alone: moments, Fisher in both charts, KL, MLE identity."""
    from .conftest import poisson
    P = poisson()
    M = P.in_chart("mean")
    lam = B.array([4.0])
    assert float(M.to_natural(lam)[0]) == pytest.approx(np.log(4.0), rel=1e-12)
    assert float(M.fisher(lam)[0, 0]) == pytest.approx(0.25, rel=1e-12)      # 1 / lambda
    assert float(P.fisher(B.array([np.log(4.0)]))[0, 0]) == pytest.approx(4.0, rel=1e-12)
    assert float(M.kl(lam, B.array([2.0]))) == pytest.approx(4 * np.log(2) - 2, rel=1e-12)
    # Fisher-Rao: ds^2 = d lambda^2 / lambda, so d = 2 |sqrt(l1) - sqrt(l2)| (generic ODE geodesics)
    assert M.dist(lam, B.array([9.0])) == pytest.approx(2.0, rel=1e-8)
    from scipy.stats import poisson as sp_poisson
    x = np.array([0, 3, 7])
    np.testing.assert_allclose(_np(M.log_prob(lam, x)), sp_poisson.logpmf(x, 4.0), rtol=1e-12)


def test_family_needs_a_log_partition():
    with pytest.raises(ValueError, match="log_partition"):
        ExponentialFamily(lambda x: x, None, dim=1)
    with pytest.raises(ValueError, match="unknown chart"):
        ig.Bernoulli().in_chart("polar")


def test_point_outside_the_natural_domain_is_rejected():
    G = ig.Gaussian(dim=2).in_chart("natural")
    with pytest.raises(ValueError, match="precision"):
        G.check_point(B.array([0.0, 0.0, 0.5, 0.0, -0.5]))    # -Lambda/2 coefficients: Lambda_11 = -1
    D = ig.Gaussian(dim=1).in_chart("natural")
    with pytest.raises(ValueError, match="natural domain"):
        D.point([0.0, 0.5])
    P = ExponentialFamily(lambda x: x, lambda th: -B.log(-th[0]), dim=1, natural_domain=lambda th: th[0] < 0,
                          natural_domain_description="theta < 0 (exponential distribution)", chart="natural")
    with pytest.raises(ValueError, match="theta < 0"):
        P.point([1.0])


def test_mean_parameters_outside_the_moment_space_are_rejected():
    from .conftest import poisson
    with pytest.raises(ValueError, match="not attained"):
        poisson().in_chart("mean").point([-1.0])


def test_natural_parameter_methods_check_theta_at_the_boundary():
    # A9/B5 (found by an independent fault-battery sweep): a theta of the wrong length gave a number, NaN gave
    # NaN (or True from in_natural_domain), integers were truncated, 0-d/None gave raw IndexError/AttributeError,
    # and in_natural_domain of a batch raised "only length-1 arrays"
    C, G1 = ig.Categorical(3), ig.Gaussian(1)
    for f in (C.log_partition, C.moments, C.fisher_natural, C.in_natural_domain):
        with pytest.raises(ValueError, match=r"theta .* must have shape \(2,\)"):
            f(np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="NaN"):
        G1.log_partition(np.array([np.nan, -1.0]))
    assert G1.in_natural_domain(np.array([np.nan, -1.0])) is False
    with pytest.raises(ValueError, match=r"must have shape \(2,\)"):
        G1.log_partition(np.float64(1.0))
    with pytest.raises(TypeError, match="numeric array"):
        G1.moments(None)
    # integers are cast, not truncated: F = [[-1/(2c), h/(2c^2)], ...] at (h, c) = (1, -1)
    np.testing.assert_allclose(G1.fisher_natural(np.array([1, -1])), [[0.5, 0.5], [0.5, 1.0]])
    assert C.in_natural_domain(np.zeros((2, 2))) is True

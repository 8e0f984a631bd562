"""The Fisher metric of every family, in every chart, against references that share no code with infogeo:
the chart maps and the KL divergence written from the textbook densities (``_references``), the Hessian of
``y -> KL(p_x || p_y)`` at ``y = x`` by finite differences, and ``E[score score^T]`` by exact sums or quadrature."""
import numpy as np
import pytest
from scipy import integrate

import infogeo as ig
from infogeo import backend as B

from ._references import REFERENCES, coordinates_in, fisher_reference
from .conftest import make

CORE = ["gauss1", "diag2", "gauss2", "gauss3", "fixed2", "zeromean2", "bernoulli", "categorical3", "independence2"]
CONTRIBUTED = ["poisson", "exponential", "beta", "gamma", "dirichlet", "von_mises", "wishart", "multinomial"]


def family(name):
    if name in CONTRIBUTED:
        return ig.load_manifold(name)
    return ig.Gaussian(dim=3) if name == "gauss3" else make(name)


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=float)


def _cases():
    for name in CORE + CONTRIBUTED:
        for chart in REFERENCES[name]().charts:
            yield name, chart


@pytest.mark.parametrize("name, chart", list(_cases()))
def test_fisher_is_the_hessian_of_an_independent_kl_in_every_chart(name, chart):
    M, ref = family(name), REFERENCES[name]()
    for seed in range(2):
        x_std = _np(M.random_point(np.random.default_rng(40 + seed)))
        theta = ref.charts["standard"][1](x_std)
        # the family's own chart maps agree with the textbook ones
        np.testing.assert_allclose(_np(M.to_chart(x_std, "natural")), theta, rtol=1e-9, atol=1e-10)
        x = _np(M.to_chart(x_std, chart))
        expected_x = coordinates_in(ref, chart, theta)
        if expected_x is None:
            np.testing.assert_allclose(ref.charts[chart][1](x), theta, rtol=1e-8, atol=1e-10)
        else:
            np.testing.assert_allclose(x, expected_x, rtol=1e-8, atol=1e-10)
        G = _np(M.in_chart(chart).fisher(x))
        G_ref = fisher_reference(ref, chart, x, theta)
        scale = np.sqrt(np.outer(np.diag(G_ref), np.diag(G_ref)))
        np.testing.assert_allclose(G, G_ref, rtol=0, atol=2e-5 * scale.max() + 1e-9,
                                   err_msg=f"{name} in the {chart} chart")


@pytest.mark.parametrize("name, chart", list(_cases()))
def test_kl_equals_the_independent_closed_form(name, chart):
    """KL in every chart (closed forms and the generic Bregman divergence alike) against the textbook KL."""
    M, ref = family(name), REFERENCES[name]()
    rng = np.random.default_rng(3)
    p, q = (_np(M.random_point(rng)) for _ in range(2))
    tp, tq = (ref.charts["standard"][1](a) for a in (p, q))
    expected = ref.kl(ref.params(tp), ref.params(tq))
    C = M.in_chart(chart)
    assert float(C.kl(M.to_chart(p, chart), M.to_chart(q, chart))) == pytest.approx(expected, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------------------ E[score score^T]
def _finite_fisher_by_exact_sums(M, x):
    """Sum over the finite support of p(x) s s^T, with the scores as gradients of log p (autodiff) in the chart."""
    X = M.support()
    probs = _np(M.probabilities(x))
    S = np.stack([_np(B.grad(lambda z, i=i: M.log_prob(z, X[i:i + 1])[0], x)) for i in range(len(X))])
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    return (S * probs[:, None]).T @ S


@pytest.mark.parametrize("name", ["bernoulli", "categorical3", "independence2"])
@pytest.mark.parametrize("chart", ["natural", "mean", "standard"])
def test_finite_family_fisher_is_the_exact_second_moment_of_the_score(name, chart):
    M = make(name).in_chart(chart)
    x = M.random_point(np.random.default_rng(11))
    np.testing.assert_allclose(_np(M.fisher(x)), _finite_fisher_by_exact_sums(M, x), rtol=1e-10, atol=1e-12)


def test_univariate_gaussian_fisher_is_the_second_moment_of_the_score_by_quadrature():
    """scipy quadrature of s s^T N(x; mu, var) with the score of the textbook density in (mu, var)."""
    M = ig.Gaussian(dim=1)
    mu, var = 0.7, 1.9

    def score(x):
        return np.array([(x - mu) / var, -0.5 / var + 0.5 * (x - mu) ** 2 / var ** 2])

    def density(x):
        return np.exp(-0.5 * (x - mu) ** 2 / var) / np.sqrt(2 * np.pi * var)

    G = np.array([[integrate.quad(lambda x: score(x)[i] * score(x)[j] * density(x), -np.inf, np.inf,
                                  epsabs=1e-13, epsrel=1e-12)[0] for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(_np(M.fisher(np.array([mu, var]))), G, rtol=1e-9, atol=1e-12)


def _scipy_density(name, s):
    """The scipy.stats distribution of standard-chart coordinates ``s`` (no infogeo code)."""
    import scipy.stats as st
    return {"exponential": lambda: st.expon(scale=1 / s[0]), "gamma": lambda: st.gamma(s[0], scale=1 / s[1]),
            "beta": lambda: st.beta(s[0], s[1]), "von_mises": lambda: st.vonmises(s[1], loc=s[0]),
            "poisson": lambda: st.poisson(s[0])}[name]()


@pytest.mark.parametrize("name", ["exponential", "gamma", "beta", "von_mises", "poisson"])
def test_contributed_fisher_is_the_second_moment_of_the_scipy_score(name):
    """E[s s^T] with s the central-difference gradient of scipy's log-density in the standard coordinates,
    the expectation by adaptive quadrature (a sum over counts for Poisson)."""
    M = family(name)
    s0 = _np(M.random_point(np.random.default_rng(2)))
    n = len(s0)
    h = 1e-5 * np.maximum(1.0, np.abs(s0))
    plus = [_scipy_density(name, s0 + h[i] * np.eye(n)[i]) for i in range(n)]
    minus = [_scipy_density(name, s0 - h[i] * np.eye(n)[i]) for i in range(n)]
    ref = _scipy_density(name, s0)
    log_p = "logpmf" if name == "poisson" else "logpdf"

    def score(x):
        return np.array([(getattr(plus[i], log_p)(x) - getattr(minus[i], log_p)(x)) / (2 * h[i]) for i in range(n)])

    if name == "poisson":
        ks = np.arange(0, 200)
        S = score(ks)                                          # (n, counts)
        G = (S * ref.pmf(ks)) @ S.T
    else:
        lo, hi = ref.support() if name != "von_mises" else (s0[0] - np.pi, s0[0] + np.pi)
        G = integrate.quad_vec(lambda x: np.outer(score(x), score(x)) * ref.pdf(x), lo, hi,
                               epsabs=1e-12, epsrel=1e-10)[0]
    np.testing.assert_allclose(_np(M.metric.matrix(s0)), G, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", CORE + CONTRIBUTED)
def test_samplers_draw_the_family(name):
    """The mean of t(x) over 20000 draws lies within 5 standard errors of eta = grad psi, the standard errors
    from Cov[t(x)] = the natural-chart Fisher matrix; the second moment of t matches that covariance to 10 %."""
    M = family(name)
    x = M.random_point(np.random.default_rng(8))
    n = 20000
    t = np.asarray(M.sufficient_statistics(np.asarray(M.sample(x, n, rng=9))), dtype=float)
    theta = M.to_chart(x, "natural")
    eta, F = _np(M.moments(theta)), _np(M.in_chart("natural").fisher(theta))
    se = np.sqrt(np.diag(F) / n)
    assert np.all(np.abs(t.mean(0) - eta) <= 5 * se), (t.mean(0), eta, se)
    C = np.cov(t, rowvar=False).reshape(F.shape)
    assert np.all(np.abs(C - F) <= 0.1 * np.sqrt(np.outer(np.diag(F), np.diag(F))))


@pytest.mark.parametrize("name", CORE + CONTRIBUTED)
def test_kl_is_the_monte_carlo_log_ratio_within_five_standard_errors(name):
    M = family(name)
    rng = np.random.default_rng(12)
    p, q = M.random_point(rng), M.random_point(rng)
    x = M.sample(p, 20000, rng=13)
    r = _np(M.log_prob(p, x)) - _np(M.log_prob(q, x))
    assert abs(r.mean() - float(M.kl(p, q))) <= 5 * r.std() / np.sqrt(len(r)) + 1e-12

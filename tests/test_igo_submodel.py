"""IGO search in a Gaussian graphical sub-model (a precision pattern)."""
import numpy as np
import pytest

import infogeo as ig
from infogeo.solvers import IGOSearch, StochasticRelaxation, natural_gradient_log_likelihood

B = ig.backend


def tridiagonal(d):
    i = np.arange(d)
    return np.abs(i[:, None] - i[None, :]) <= 1


def chain_quadratic(d):
    A = 2 * np.eye(d) - 0.9 * (tridiagonal(d) & ~np.eye(d, dtype=bool))
    return lambda X: np.einsum("ni,ij,nj->n", X, A, X)


def test_the_search_covariance_stays_in_the_sub_model():
    d = 6
    P = tridiagonal(d)
    es = IGOSearch(np.ones(d), 0.5, seed=0, precision_pattern=P)
    f = chain_quadratic(d)
    for _ in range(30):
        X = es.ask()
        es.tell(X, f(X))
        L = np.linalg.inv(es.C)
        assert np.max(np.abs(L[~P])) <= 1e-9 * np.max(np.abs(L))
    family, point = es.distribution
    assert isinstance(family, ig.GaussianGraphical)
    np.testing.assert_allclose(B.to_numpy(family.cov(point)), es.cov, rtol=1e-8)


def test_patterned_search_reaches_the_target_and_the_full_pattern_is_the_full_search():
    d = 6
    f = chain_quadratic(d)
    r = StochasticRelaxation(0.5, seed=3, f_target=1e-10, precision_pattern=tridiagonal(d)).minimize(f, np.ones(d))
    assert r.success and r.fun <= 1e-10
    # the pattern with every entry free is the full family: the same run, up to the covariance selection's rounding
    full = IGOSearch(np.ones(d), 0.5, seed=4)
    free = IGOSearch(np.ones(d), 0.5, seed=4, precision_pattern=np.ones((d, d), bool))
    for _ in range(5):
        X1, X2 = full.ask(), free.ask()
        np.testing.assert_allclose(X1, X2, rtol=1e-8, atol=1e-10)
        full.tell(X1, f(X1))
        free.tell(X2, f(X2))
    np.testing.assert_allclose(free.C, full.C, rtol=1e-8, atol=1e-12)


def test_the_sub_model_natural_gradient_of_the_log_likelihood_is_t_minus_eta():
    # IGO's step in the mean chart of an exponential family: F^-1 sum w (t - eta) pulled back is sum w (t - eta)
    P = tridiagonal(3)
    G = ig.Gaussian(3, precision_pattern=P).in_chart("mean")
    p = G.from_chart(ig.Gaussian(3, precision_pattern=P).random_point(0), "standard")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((8, 3))
    w = rng.uniform(-0.5, 1.0, 8)
    step = natural_gradient_log_likelihood(G, p, X, w)
    t = G.sufficient_statistics(X)
    np.testing.assert_allclose(B.to_numpy(step.components), w @ (t - B.to_numpy(p)), rtol=1e-8, atol=1e-10)


def test_pattern_validation():
    with pytest.raises(ValueError, match="diagonal"):
        IGOSearch(np.ones(3), 0.5, covariance="diagonal", precision_pattern=np.eye(3, dtype=bool))
    with pytest.raises(ValueError, match="symmetric"):
        IGOSearch(np.ones(2), 0.5, precision_pattern=np.array([[1, 1], [0, 1]], bool))

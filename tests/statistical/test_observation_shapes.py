"""Observations of the wrong shape or off the support end in a ValueError that says what was expected, never in
a silently reinterpreted batch; one observation without a sample axis is one observation (scipy's densities
are the reference)."""
import numpy as np
import pytest
import scipy.stats as st

import infogeo as ig
from infogeo import backend as B


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=float)


@pytest.mark.parametrize("M, x, expected", [
    (ig.Gaussian(2), np.ones(4), r"\(n, 2\)"),                       # four numbers are not observations in R^2
    (ig.Gaussian(2), np.ones(3), r"\(n, 2\)"),
    (ig.Gaussian(2), np.ones((2, 3)), r"\(n, 2\)"),
    (ig.Gaussian(2), np.ones((3, 2, 2)), r"\(n, 2\)"),
    (ig.Gaussian(2, "diagonal"), np.ones(4), r"\(n, 2\)"),
    (ig.Gaussian(2, "zero_mean"), np.ones(4), r"\(n, 2\)"),
    (ig.Gaussian(2, "fixed", cov=np.eye(2)), np.ones(4), r"\(n, 2\)"),
    (ig.Gaussian(1), np.ones((3, 2)), r"\(n,\) or \(n, 1\)"),
    (ig.IndependenceModel(2), np.ones(4), r"\(n, 2\)"),
    (ig.Categorical(3), np.ones((2, 2)), r"\(n,\)"),
    (ig.Bernoulli(), np.ones((2, 2)), r"\(n,\)"),
])
def test_observations_of_the_wrong_shape_are_refused_with_the_expected_shape(M, x, expected):
    p = M.random_point(0)
    for op in (M.log_prob, M.score, M.log_likelihood):
        with pytest.raises(ValueError, match=expected):
            op(p, x)


def test_accepted_observation_shapes():
    G = ig.Gaussian(2)
    p = G.point(mean=[0.5, -1.0], cov=[[2.0, 0.3], [0.3, 1.0]])
    ref = st.multivariate_normal([0.5, -1.0], [[2.0, 0.3], [0.3, 1.0]])
    x = np.array([[0.1, 0.2], [1.0, -3.0]])
    np.testing.assert_allclose(_np(G.log_prob(p, x)), ref.logpdf(x), rtol=1e-12)
    np.testing.assert_allclose(_np(G.log_prob(p, x[0])), [ref.logpdf(x[0])], rtol=1e-12)   # one observation
    U = ig.Gaussian(1)
    q = U.point(mean=0.3, var=2.0)
    for obs in (np.array([0.1, 2.0]), np.array([[0.1], [2.0]])):
        np.testing.assert_allclose(_np(U.log_prob(q, obs)), st.norm(0.3, np.sqrt(2.0)).logpdf([0.1, 2.0]), rtol=1e-12)
    assert _np(U.log_prob(q, 0.1)).shape == (1,)
    C = ig.Categorical(3)
    assert _np(C.log_prob(C.point(probs=[0.2, 0.3, 0.5]), 2)).shape == (1,)


def test_one_wishart_matrix_without_a_sample_axis_is_one_observation():
    """The default base measure (h = 1) has one entry per observation as t(x) reads them (was one per row of X)."""
    W = ig.load_manifold("wishart")
    x = W.point(df=4.5, scale=[[2.0, 0.3], [0.3, 1.0]])
    X = np.array([[1.5, 0.2], [0.2, 0.7]])
    expected = st.wishart(df=4.5, scale=[[2.0, 0.3], [0.3, 1.0]]).logpdf(X)
    np.testing.assert_allclose(_np(W.log_prob(x, X)), [expected], rtol=1e-10)
    np.testing.assert_allclose(_np(W.log_prob(x, X[None])), [expected], rtol=1e-10)


def test_prototyped_family_whose_statistics_disagree_with_its_base_measure_is_refused():
    P = ig.ExponentialFamily(lambda x: np.asarray(x, float).reshape(-1, 1), lambda th: B.exp(th[0]), dim=1,
                             log_base_measure=lambda x: np.zeros(2))
    with pytest.raises(ValueError, match="base measure"):
        P.log_prob(np.array([0.0]), np.array([1.0, 2.0, 3.0]))
    Q = ig.ExponentialFamily(lambda x: np.asarray(x, float).reshape(-1, 2), lambda th: B.exp(th[0]), dim=1)
    with pytest.raises(ValueError, match="sufficient statistics"):
        Q.log_prob(np.array([0.0]), np.array([1.0, 2.0]))


def test_dirichlet_observations_off_the_simplex_are_refused():
    D = ig.load_manifold("dirichlet")
    p = D.point(concentration=[1.5, 2.0, 3.0])
    good = np.array([[0.2, 0.3, 0.5]])
    np.testing.assert_allclose(_np(D.log_prob(p, good)), [st.dirichlet([1.5, 2.0, 3.0]).logpdf(good[0])], rtol=1e-12)
    for bad in (np.array([[0.5, 0.6, 0.7]]), np.array([[0.2, 0.3, 0.4]])):
        with pytest.raises(ValueError, match="simplex"):
            D.log_prob(p, bad)


def test_wishart_observations_must_be_symmetric():
    W = ig.load_manifold("wishart")
    x = W.point(df=4.5, scale=[[2.0, 0.3], [0.3, 1.0]])
    with pytest.raises(ValueError, match="symmetric"):
        W.log_prob(x, np.array([[[2.0, 1.0], [-0.5, 1.0]]]))

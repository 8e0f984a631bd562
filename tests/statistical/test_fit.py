"""fit(data): the maximum-likelihood point of every family is moment matching, against the textbook estimators."""
import numpy as np
import pytest

import infogeo as ig

B = ig.backend


def test_gaussian_fits_are_the_sample_moments():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3)) @ rng.standard_normal((3, 3)) + rng.standard_normal(3)
    mu, S = X.mean(0), np.cov(X.T, bias=True)
    G = ig.Gaussian(3)
    for chart in ("standard", "natural", "mean"):
        Gc = G.in_chart(chart)
        p = Gc.fit(X)
        np.testing.assert_allclose(B.to_numpy(Gc.mean(p)), mu, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(B.to_numpy(Gc.cov(p)), S, rtol=1e-9, atol=1e-12)
    D = ig.Gaussian(3, covariance="diagonal")
    np.testing.assert_allclose(D.fit(X), np.concatenate([mu, X.var(0)]), rtol=1e-10)
    U = ig.Gaussian(1)
    np.testing.assert_allclose(U.fit(X[:, 0]), [X[:, 0].mean(), X[:, 0].var()], rtol=1e-10)
    Z = ig.Gaussian(3, covariance="zero_mean")
    np.testing.assert_allclose(B.to_numpy(Z.cov(Z.fit(X))), X.T @ X / len(X), rtol=1e-10)


def test_fit_maximises_the_likelihood():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 2)) * [1.0, 3.0] + [2.0, -1.0]
    G = ig.Gaussian(2)
    p = G.fit(X)
    best = float(G.log_likelihood(p, X))
    for k in range(10):   # every nearby point is less likely
        q = G.natural_point(G.to_natural(p) + 1e-3 * rng.standard_normal(G.dim))
        assert float(G.log_likelihood(q, X)) < best


def test_discrete_fits_are_frequencies():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, 200)
    C = ig.Categorical(4)
    np.testing.assert_allclose(B.to_numpy(C.probs(C.fit(x))), np.bincount(x, minlength=4) / 200, rtol=1e-10)
    b = rng.integers(0, 2, 50).astype(float)
    np.testing.assert_allclose(ig.Bernoulli().fit(b), [b.mean()], rtol=1e-12)
    S = rng.choice([-1.0, 1.0], size=(80, 3))
    I = ig.IndependenceModel(3)
    np.testing.assert_allclose(B.to_numpy(I.to_mean(I.fit(S))), S.mean(0), rtol=1e-10, atol=1e-12)


def test_weighted_fit_is_the_fit_of_repeated_data():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 2))
    G = ig.Gaussian(2)
    reps = rng.integers(1, 4, 20)
    np.testing.assert_allclose(G.fit(X, weights=reps), G.fit(np.repeat(X, reps, axis=0)), rtol=1e-10)


def test_fit_refuses_what_has_no_maximum_likelihood_estimate():
    with pytest.raises(ValueError, match="does not exist"):
        ig.Bernoulli().fit(np.zeros(5))
    with pytest.raises(ValueError, match="does not exist"):
        ig.Gaussian(3).fit(np.random.default_rng(0).standard_normal((2, 3)))
    with pytest.raises(ValueError, match="weights"):
        ig.Gaussian(1).fit(np.arange(3.0), weights=[1.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        ig.Gaussian(1).fit(np.array([1.0, np.nan]))


def test_fit_refuses_weights_that_are_not_one_real_number_per_observation():
    # a complex weight's imaginary part was dropped (with a ComplexWarning) and a string raised numpy's
    # message; fit now shares the Fréchet mean's check (found by an independent fault-battery sweep, A12)
    G, x = ig.Gaussian(1), np.array([[0.0], [1.0], [2.0]])
    for bad in (np.ones(3) + 1j, "ab", [1.0, "a", 2.0]):
        with pytest.raises(TypeError, match="weights must be"):
            G.fit(x, weights=bad)
    for bad in (np.ones((3, 1)), [1.0, -1.0, 1.0], [np.nan, 1.0, 1.0], np.zeros(3)):
        with pytest.raises(ValueError, match="weights must be 3 finite non-negative"):
            G.fit(x, weights=bad)
    np.testing.assert_allclose(G.fit(x, weights=[1, 2, 3]), G.fit(np.repeat(x, [1, 2, 3], axis=0)), rtol=1e-12)


def _mp_moments(X, w):
    """Weighted mean and covariance at 50 digits (two-pass in mpmath), the data and weights as stored."""
    import mpmath as mp
    with mp.workdps(50):
        W = [mp.mpf(float(v)) for v in w]
        tot = mp.fsum(W)
        n, d = X.shape
        m = [mp.fsum(W[i] * mp.mpf(float(X[i, a])) for i in range(n)) / tot for a in range(d)]
        C = [[float(mp.fsum(W[i] * (mp.mpf(float(X[i, a])) - m[a]) * (mp.mpf(float(X[i, b])) - m[b])
                            for i in range(n)) / tot) for b in range(d)] for a in range(d)]
        return np.array([float(v) for v in m]), np.array(C)


@pytest.mark.parametrize("offset, spread", [(1e4, 1e-3), (1e6, 1e-2), (1e9, 1e-3)])
@pytest.mark.parametrize("weighted", [False, True])
def test_gaussian_fit_of_data_far_from_the_origin(offset, spread, weighted):
    """Centred moments: E[x^2] - E[x]^2 lost the variance (12x off at 1e6, "does not exist" at 1e9)."""
    rng = np.random.default_rng(0)
    n = 100
    X = offset + spread * rng.standard_normal((n, 2)) * np.array([1.0, 3.0])
    w = rng.uniform(0.5, 2.0, n) if weighted else np.ones(n)
    mu, S = _mp_moments(X, w)
    # residuals x_i - mean are exact (same magnitude) after the corrected second pass: the variance is a weighted
    # sum of n squares, relative error below (n + 4) eps per entry (diagonal), the off-diagonal relative to
    # sqrt(S_aa S_bb); the mean to a few eps of its size
    tol = (n + 4) * np.finfo(float).eps
    for G in (ig.Gaussian(2), ig.Gaussian(2, covariance="diagonal")):
        p = G.fit(X, weights=w if weighted else None)
        C = np.asarray(B.to_numpy(G.cov(p)))
        scale = np.sqrt(np.outer(np.diag(S), np.diag(S)))
        mask = np.eye(2, dtype=bool) if G._diagonal_kind else np.ones((2, 2), dtype=bool)
        assert np.all(np.abs(C - S)[mask] <= 2 * tol * scale[mask])
        assert np.all(np.abs(np.asarray(B.to_numpy(G.mean(p))) - mu) <= 4 * np.finfo(float).eps * np.abs(mu))
    U = ig.Gaussian(1)
    p = U.fit(X[:, 0], weights=w if weighted else None)
    assert abs(float(np.asarray(B.to_numpy(U.cov(p))).ravel()[0]) - S[0, 0]) <= 2 * tol * S[0, 0]

"""Fisher–Rao distances of Gaussians against mpmath (50 digits) on the stored covariances: ill-conditioned
covariance ratios and nearby points, where forming the whitened ratio and taking its eigenvalues lost the small
eigenvalues (wrong, NaN) and the logarithms of eigenvalues 1 + O(1e-10) (relative errors up to 3e-6)."""
import math

import mpmath as mp
import numpy as np
import pytest

import infogeo as ig
from infogeo.statistical.gaussian_geodesics import GaussianShootingError

EPS = np.finfo(float).eps


def spd(rng, d, cond):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.logspace(0, np.log10(cond), d)) @ Q.T


def ref_spd_dist(S1, S2):
    r"""sqrt(sum log^2 lambda_i(S1^{-1} S2)) at 50 digits on the given (stored) matrices."""
    with mp.workdps(50):
        L = mp.cholesky(mp.matrix(S1.tolist()))
        Li = L ** -1
        ev = mp.eigsy(Li * mp.matrix(S2.tolist()) * Li.T)[0]
        return float(mp.sqrt(sum(mp.log(e) ** 2 for e in ev)))


def rounding_bound(d, S1, S2):
    """A priori error of the log-eigenvalues from the factorisations (Higham Thm 10.3): (d+1)^2 eps (k1 + k2),
    summed over the d eigenvalues."""
    return (d + 1) ** 2 * EPS * (np.linalg.cond(S1) + np.linalg.cond(S2)) * math.sqrt(d)


@pytest.mark.parametrize("cond", [1e6, 1e10, 1e14])
def test_full_gaussian_dist_of_ill_conditioned_covariances(cond):
    G = ig.Gaussian(3)
    rng = np.random.default_rng(7)
    S1, S2 = spd(rng, 3, cond), spd(rng, 3, cond)
    p, q = G.point(mean=np.zeros(3), cov=S1), G.point(mean=np.zeros(3), cov=S2)
    C1, C2 = G.cov(p), G.cov(q)
    ref = math.sqrt(0.5) * ref_spd_dist(C1, C2)
    d = float(G.dist(p, q))                      # 12.6% low at 1e10 and NaN at 1e14 before
    assert abs(d - ref) <= math.sqrt(0.5) * rounding_bound(3, C1, C2)
    lo, hi = G.dist_bounds(p, q)
    assert lo <= ref <= hi and lo <= d <= hi


@pytest.mark.parametrize("cond", [1e6, 1e10, 1e14])
def test_full_gaussian_dist_with_different_means_is_never_silently_wrong(cond):
    """Either a length within the certified bounds, or a clear error (a raw LinAlgError, or a length 12%
    below the lower bound, before)."""
    G = ig.Gaussian(3)
    rng = np.random.default_rng(7)
    for c in [1e6, 1e10, 1e14][:[1e6, 1e10, 1e14].index(cond) + 1]:   # the QA sweep's draws
        S1, S2 = spd(rng, 3, c), spd(rng, 3, c)
        m2 = rng.standard_normal(3)
    p, q = G.point(mean=np.zeros(3), cov=S1), G.point(mean=m2, cov=S2)
    lo, hi = G.dist_bounds(p, q)
    try:
        d = float(G.dist(p, q))
    except (GaussianShootingError, ValueError) as e:
        assert "bounds" in str(e)
        return
    assert lo <= d <= hi


@pytest.mark.parametrize("eps", [1e-8, 1e-10])
def test_full_gaussian_dist_and_bounds_of_nearby_covariances(eps):
    G = ig.Gaussian(2)
    S = np.array([[2.0, 0.3], [0.3, 1.0]])
    p = G.point(mean=[0, 0], cov=S)
    q = G.point(mean=[0, 0], cov=S + eps * np.array([[1.0, 0.2], [0.2, -0.5]]))
    C1, C2 = G.cov(p), G.cov(q)
    ref = math.sqrt(0.5) * ref_spd_dist(C1, C2)
    # relative accuracy: the near form's D is relatively accurate to ~(d+1)^2 eps kappa
    tol = 4 * (2 + 1) ** 2 * EPS * (np.linalg.cond(C1) + np.linalg.cond(C2))
    assert abs(float(G.dist(p, q)) - ref) <= tol * ref           # 2.7e-6 relative before
    lo, hi = G.dist_bounds(p, q)
    assert lo <= ref <= hi                                          # both bounds 2.5e-6 above before
    assert hi - lo <= 2 * tol * ref


def test_full_gaussian_bounds_contain_a_short_geodesic():
    G = ig.Gaussian(2)
    S = np.array([[2.0, 0.3], [0.3, 1.0]])
    p = G.point(mean=[0.1, -0.2], cov=S)
    q = G.point(mean=[0.1 + 3e-9, -0.2 - 1e-9], cov=S + 1e-9 * np.array([[1.0, -0.4], [-0.4, 2.0]]))
    m1, S1, m2, S2 = (mp.matrix(np.asarray(a).tolist()) for a in (G.mean(p), G.cov(p), G.mean(q), G.cov(q)))
    with mp.workdps(50):
        # the chord with the metric at its midpoint: relative error O(length^2) ~ 1e-17
        dm, dS = m2 - m1, S2 - S1
        Si = ((S1 + S2) / 2) ** -1
        X = Si * dS
        ref = float(mp.sqrt((dm.T * Si * dm)[0] + sum((X * X)[i, i] for i in range(2)) / 2))
    lo, hi = G.dist_bounds(p, q)
    assert lo <= ref <= hi                       # the lower bound was 3e-9 relative above the distance
    assert hi - lo <= 1e-12 * ref


def test_zero_mean_gaussian_dist_and_log_of_ill_conditioned_covariances():
    rng = np.random.default_rng(1)
    for _ in range(3):
        S1, S2 = spd(rng, 3, 1e8), spd(rng, 3, 1e8)
    Z = ig.Gaussian(3, covariance="zero_mean")
    p, q = Z.point(cov=S1), Z.point(cov=S2)
    C1, C2 = Z.cov(p), Z.cov(q)
    ref = math.sqrt(0.5) * ref_spd_dist(C1, C2)
    tol = math.sqrt(0.5) * rounding_bound(3, C1, C2)
    assert abs(float(Z.dist(p, q)) - ref) <= tol                   # NaN before
    assert abs(float(Z.dist(q, p)) - ref) <= tol
    v = Z.log(p, q)
    assert np.all(np.isfinite(v.components))                       # NaN before
    with mp.workdps(50):                                           # L log(L^-1 S2 L^-T) L^T
        L = mp.cholesky(mp.matrix(C1.tolist()))
        Li = L ** -1
        ev, Q = mp.eigsy(Li * mp.matrix(C2.tolist()) * Li.T)
        V = np.array((L * Q * mp.diag([mp.log(e) for e in ev]) * Q.T * L.T).tolist(), dtype=float)
    iu = np.triu_indices(3)
    assert np.linalg.norm(v.components - V[iu]) <= rounding_bound(3, C1, C2) * np.linalg.norm(V[iu])


def test_zero_mean_gaussian_dist_of_nearby_covariances():
    S = spd(np.random.default_rng(0), 3, 1.0)
    Z = ig.Gaussian(3, covariance="zero_mean")
    a, b = Z.point(cov=S), Z.point(cov=S + 1e-9 * np.eye(3))
    C1, C2 = Z.cov(a), Z.cov(b)
    ref = math.sqrt(0.5) * ref_spd_dist(C1, C2)
    tol = 4 * (3 + 1) ** 2 * EPS * (np.linalg.cond(C1) + np.linalg.cond(C2))
    assert abs(float(Z.dist(a, b)) - ref) <= tol * ref             # 3.7e-8 relative before
    v = Z.log(a, b)
    assert abs(float(Z.metric.norm(v)) - ref) <= tol * ref

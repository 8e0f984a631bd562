"""KL divergences between nearby distributions, against mpmath at 50 digits.

The textbook forms subtract numbers of order one (trace minus dimension minus log-determinant,
sums of p log p - p log q) and returned rounding noise, often negative, for nearby points; the
inputs here are exactly representable (dyadic perturbations), so the reference is the KL of
exactly the floats given and the tolerances measure the computation alone.
"""
import numpy as np
import pytest

import infogeo as ig

mp = pytest.importorskip("mpmath")
mp.mp.dps = 50


def mp_gaussian_kl(m1, S1, m2, S2):
    S1, S2 = mp.matrix(S1.tolist()), mp.matrix(S2.tolist())
    dm = mp.matrix([mp.mpf(b) - mp.mpf(a) for a, b in zip(m1, m2)])
    S2i = S2 ** -1
    d = S1.rows
    tr = sum((S2i * S1)[i, i] for i in range(d))
    maha = (dm.T * S2i * dm)[0, 0]
    return (tr - d + mp.log(mp.det(S2) / mp.det(S1)) + maha) / 2


def dyadic_spd(rng, d):
    A = np.round(rng.standard_normal((d, d)) * 64) / 64
    return A @ A.T + np.eye(d) / 8         # entries with few bits: S * (1 + 2^-k) is exact


@pytest.mark.parametrize("d", [2, 3, 5])
def test_full_gaussian_kl_of_nearby_points_matches_mpmath(d):
    G = ig.Gaussian(d)
    rng = np.random.default_rng(d)
    for _ in range(6):
        S = dyadic_spd(rng, d)
        m = np.round(rng.standard_normal(d) * 64) / 64
        p = G.point(mean=m, cov=S)
        assert float(G.kl(p, p)) == 0.0
        for k in (10, 20, 30, 40):
            E = np.round(rng.standard_normal((d, d)) * 8)
            S2 = S + (E + E.T) * 2.0 ** -k          # exact: a perturbation of relative size ~2^-k
            m2 = m + np.round(rng.standard_normal(d) * 8) * 2.0 ** -(k + 2)
            for a, b in (((m, S), (m2, S2)), ((m2, S2), (m, S)), ((m, S), (m, S * (1 + 2.0 ** -k)))):
                ref = mp_gaussian_kl(*a, *b)
                got = float(G.kl(G.point(mean=a[0], cov=a[1]), G.point(mean=b[0], cov=b[1])))
                assert got > 0
                assert got == pytest.approx(float(ref), rel=1e-11, abs=0)


def test_full_gaussian_kl_far_apart_and_batched_matches_mpmath():
    G = ig.Gaussian(3)
    rng = np.random.default_rng(7)
    S1, S2 = dyadic_spd(rng, 3), dyadic_spd(rng, 3) * 4
    m1, m2 = np.array([1.0, -2.0, 0.5]), np.array([0.0, 3.0, -1.0])
    P = np.stack([G.point(mean=m1, cov=S1), G.point(mean=m2, cov=S2)])
    got = G.kl(P, P[::-1])
    for i, (a, b) in enumerate((((m1, S1), (m2, S2)), ((m2, S2), (m1, S1)))):
        assert got[i] == pytest.approx(float(mp_gaussian_kl(*a, *b)), rel=1e-13, abs=0)


def test_zero_mean_gaussian_kl_of_nearby_points_matches_mpmath():
    Z = ig.Gaussian(3, covariance="zero_mean")
    S = dyadic_spd(np.random.default_rng(3), 3)
    m = np.zeros(3)
    for k in (15, 30, 45):
        S2 = S * (1 + 2.0 ** -k)
        got = float(Z.kl(Z.point(cov=S), Z.point(cov=S2)))
        assert got == pytest.approx(float(mp_gaussian_kl(m, S, m, S2)), rel=1e-11, abs=0)


def mp_categorical_kl(eta, zeta):
    """KL between the categoricals whose first k - 1 probabilities are exactly these floats."""
    a = [mp.mpf(x) for x in eta]
    b = [mp.mpf(x) for x in zeta]
    a.append(1 - sum(a))
    b.append(1 - sum(b))
    return sum(x * mp.log(x / y) for x, y in zip(a, b))


def mp_softmax_kl(theta, phi):
    za = [mp.mpf(x) for x in theta] + [mp.mpf(0)]
    zb = [mp.mpf(x) for x in phi] + [mp.mpf(0)]
    la = [x - mp.log(sum(mp.exp(y) for y in za)) for x in za]
    lb = [x - mp.log(sum(mp.exp(y) for y in zb)) for x in zb]
    return sum(mp.exp(x) * (x - y) for x, y in zip(la, lb))


@pytest.mark.parametrize("a, b", [(1e-300, 1e-17), (1e-17, 1e-300), (0.3, 0.3 + 2.0 ** -40),
                                  (1 - 2.0 ** -40, 1 - 2.0 ** -41), (0.5, 0.5 - 2.0 ** -50), (1e-5, 2e-5)])
def test_bernoulli_kl_matches_mpmath(a, b):
    Be = ig.Bernoulli()
    got = float(Be.kl(Be.point(prob=a), Be.point(prob=b)))
    assert got == pytest.approx(float(mp_categorical_kl([a], [b])), rel=1e-13, abs=0)
    # the same pair through the logits: the reference is the softmax KL of exactly those logits
    Bn = ig.Bernoulli(chart="natural")
    ta, tb = np.log(a) - np.log1p(-a), np.log(b) - np.log1p(-b)
    got = float(Bn.kl(np.array([ta]), np.array([tb])))
    assert got == pytest.approx(float(mp_softmax_kl([ta], [tb])), rel=1e-12, abs=0)


def test_categorical_kl_near_the_boundary_and_of_nearby_points_matches_mpmath():
    C, Cn = ig.Categorical(4), ig.Categorical(4, chart="natural")
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(200):
        # the largest class last: 1 - sum(first k - 1), which the mean chart forms in floats, is then exact
        # to an ulp of itself (a tiny last class is a limitation of the chart, not of the KL)
        a, b = (np.sort(rng.dirichlet(np.full(4, 0.05))) for _ in range(2))
        if rng.random() < 0.5:                       # nearby: a dyadic move of a few ulps of the largest
            b = a + np.round(rng.standard_normal(4) * 8) * 2.0 ** -rng.integers(30, 52)
        eta, zeta = a[:3], b[:3]
        if min(eta.min(), zeta.min(), 1 - eta.sum(), 1 - zeta.sum()) <= 1e-300:
            continue
        ref = mp_categorical_kl(eta, zeta)
        got = float(C.kl(eta, zeta))
        assert got >= 0
        assert got == pytest.approx(float(ref), rel=1e-11, abs=0)
        theta, phi = C.to_chart(eta, "natural"), C.to_chart(zeta, "natural")
        got = float(Cn.kl(theta, phi))
        ref = mp_softmax_kl(theta, phi)
        assert got >= 0
        assert got == pytest.approx(float(ref), rel=1e-11, abs=0)
        checked += 1
    assert checked > 100


def mp_bernoulli_dist(a, b):
    return 2 * abs(mp.asin(mp.sqrt(mp.mpf(a))) - mp.asin(mp.sqrt(mp.mpf(b))))


@pytest.mark.parametrize("a, b", [(1 - 1e-10, 1 - 2.0 ** -53), (1 - 2.0 ** -30, 1 - 2.0 ** -31), (0.75, 0.75 + 2.0 ** -40),
                                  (1e-10, 2.0 ** -53), (0.3, 0.3 + 2.0 ** -45), (0.2, 0.9)])
def test_bernoulli_distance_matches_mpmath_and_the_mirror_pair(a, b):
    Be = ig.Bernoulli()
    # the pair and its mirror image under the isometry p -> 1 - p (the floats 1 - a, 1 - b as passed)
    for x, y in ((a, b), (1 - a, 1 - b)):
        got = float(Be.dist(Be.point(prob=x), Be.point(prob=y)))
        assert got == pytest.approx(float(mp_bernoulli_dist(x, y)), rel=1e-13, abs=0)


def test_categorical_distance_of_nearby_points_matches_mpmath():
    C = ig.Categorical(3)
    rng = np.random.default_rng(5)
    for _ in range(50):
        eta = np.sort(rng.dirichlet(np.ones(3)))[:2]
        zeta = eta + np.round(rng.standard_normal(2) * 8) * 2.0 ** -rng.integers(30, 50)
        a = [mp.mpf(x) for x in eta] + [1 - mp.mpf(eta[0]) - mp.mpf(eta[1])]
        b = [mp.mpf(x) for x in zeta] + [1 - mp.mpf(zeta[0]) - mp.mpf(zeta[1])]
        ref = 2 * mp.acos(sum(mp.sqrt(x * y) for x, y in zip(a, b)))
        assert float(C.dist(eta, zeta)) == pytest.approx(float(ref), rel=1e-11, abs=0)


def test_the_bregman_kl_of_a_family_given_by_its_log_partition():
    """The generic KL, psi(theta_q) - psi(theta_p) - grad psi(theta_p)^T (theta_q - theta_p), cancelled: 0 for
    Poisson points 1e-9 apart, 4e-5 off at theta = 30 (psi = e^30), a negative Beta KL, a Gamma KL 25 times too
    large; where the difference keeps few digits, the remainder's integral of the curvature takes over.
    The log-partition is evaluated in float64 by the library's functions, so the tolerance is a few ulps of the
    curvature sum, far below the error the difference made."""
    P = ig.ExponentialFamily(sufficient_statistics=lambda x: np.asarray(x, float).reshape(-1, 1),
                             log_partition=lambda th: ig.backend.exp(th[0]), dim=1)
    for a, b in ((30.0, 30.0 + 2.0 ** -20), (np.log(4.0), np.log(4.0) + 2.0 ** -30), (0.5, 1.5)):
        A, Bq = mp.mpf(a), mp.mpf(b)
        want = float(mp.exp(Bq) - mp.exp(A) - mp.exp(A) * (Bq - A))
        got = float(P.kl(np.array([a]), np.array([b])))
        assert got > 0 and abs(got - want) <= 1e-12 * want, (a, b, got, want)
    many = P.kl(np.array([[30.0], [0.5]]), np.array([[30.0 + 2.0 ** -20], [1.5]]))   # batches: the same
    assert np.allclose(many, [float(P.kl(np.array([30.0]), np.array([30.0 + 2.0 ** -20]))),
                              float(P.kl(np.array([0.5]), np.array([1.5])))], rtol=1e-13, atol=0)
    Beta = ig.load_manifold("beta")
    for a1, b1, a2, b2 in ((2.0, 3.0, 2.0 + 2.0 ** -27, 3.0), (2.0 ** 20, 2.0 ** 20, 2.0 ** 20 + 1, 2.0 ** 20)):
        A1, B1, A2, B2 = map(mp.mpf, (a1, b1, a2, b2))
        want = float(mp.log(mp.beta(A2, B2) / mp.beta(A1, B1)) + (A1 - A2) * mp.psi(0, A1)
                     + (B1 - B2) * mp.psi(0, B1) + (A2 - A1 + B2 - B1) * mp.psi(0, A1 + B1))
        got = float(Beta.kl(Beta.point(alpha=a1, beta=b1), Beta.point(alpha=a2, beta=b2)))
        assert got > 0 and abs(got - want) <= 1e-9 * want, (a1, b1, a2, b2, got, want)

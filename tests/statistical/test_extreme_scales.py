"""Closed forms at every representable scale, against mpmath at 60 digits.

The univariate and diagonal Gaussians are products of hyperbolic half-planes; their exp, log, dist
and KL are compared with the textbook formulas evaluated in 60-digit arithmetic at means and
variances from 1e-300 to 1e300 and hyperbolic speeds up to 100, where the float64 forms that
subtract two cosh-sized numbers, square a mean difference or divide two variances fail.
"""
import math

import numpy as np
import pytest

import infogeo as ig

mp = pytest.importorskip("mpmath")
mp.mp.dps = 60
G = ig.Gaussian(dim=1)
SQ2 = mp.sqrt(2)


def mp_dist(m1, v1, m2, v2):
    m1, v1, m2, v2 = map(mp.mpf, (m1, v1, m2, v2))
    s1, s2 = mp.sqrt(v1), mp.sqrt(v2)
    return SQ2 * mp.acosh(1 + ((m1 - m2) ** 2 / 2 + (s1 - s2) ** 2) / (2 * s1 * s2))


def mp_exp(m, v, vm, vv):
    """The half-plane geodesic (x, y) = (mu / sqrt2, sigma) from (x, y) along (vx, vy), at time 1."""
    m, v, vm, vv = map(mp.mpf, (m, v, vm, vv))
    y = mp.sqrt(v)
    a, b = vm / (SQ2 * y), vv / (2 * v)
    t = mp.hypot(a, b)
    D = mp.cosh(t) - b / t * mp.sinh(t)
    return m + SQ2 * y * (a / t) * mp.sinh(t) / D, (y / D) ** 2


def mp_kl(m1, v1, m2, v2):
    m1, v1, m2, v2 = map(mp.mpf, (m1, v1, m2, v2))
    r = v1 / v2
    return (r + (m2 - m1) ** 2 / v2 - 1 - mp.log(r)) / 2


def random_points(n, seed):
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(n) * 10.0 ** rng.uniform(-300, 300, n)
    var = 10.0 ** rng.uniform(-300, 300, n)
    return mean, var


def test_the_reported_cases_are_exact():
    # exp along the variance direction: the geodesic is sigma e^t, with t the hyperbolic speed
    p = np.array([0.3, 2.0])
    for speed in (30.0, 60.0, 100.0):
        q = G.exp(p, G.vector(p, np.array([0.0, 2 * 2.0 * speed])))
        assert q[0] == 0.3 and q[1] == pytest.approx(2.0 * math.exp(2 * speed), rel=1e-13)
    cases = [((1e300, 1.0), (-1e300, 1.0), 1954.7884983616448),
             ((0.0, 5e-324), (0.0, 1e-323), 0.49012907173427360),
             ((0.0, 1e-300), (0.0, 1e300), 2 * math.log(1e300) * math.sqrt(2))]
    for a, b, _ in cases:
        assert float(G.dist(np.array(a), np.array(b))) == pytest.approx(float(mp_dist(*a, *b)), rel=1e-14)
    assert float(G.kl(np.array([0.0, 1e-300]), np.array([0.0, 1e300]))) == pytest.approx(
        float(mp_kl(0, 1e-300, 0, 1e300)), rel=1e-14)
    # a full Gaussian whose means are 1e200 apart (Mahalanobis): the univariate distance along the mean
    F = ig.Gaussian(dim=2)
    d = F.dist(F.point(mean=[1e200, 0.0], cov=np.eye(2)), F.point(mean=[0.0, 0.0], cov=np.eye(2)))
    assert float(d) == pytest.approx(float(SQ2 * mp.acosh(1 + mp.mpf(1e200) ** 2 / 4)), rel=1e-14)
    E = ig.load_manifold("exponential")
    assert float(E.dist(np.array([1e-300]), np.array([1e300]))) == pytest.approx(
        float(mp.log(mp.mpf(1e300) / mp.mpf(1e-300))), rel=1e-15)


def test_dist_and_kl_at_scales_from_1e_minus_300_to_1e300():
    (m1, v1), (m2, v2) = random_points(300, 1), random_points(300, 2)
    # close pairs too: cancellation of nearly equal variances and means
    m2[:60], v2[:60] = m1[:60] * (1 + 1e-9), v1[:60] * (1 + 1e-7)
    d = G.dist(np.stack([m1, v1], -1), np.stack([m2, v2], -1))
    k = G.kl(np.stack([m1, v1], -1), np.stack([m2, v2], -1))
    worst_d = worst_k = 0.0
    for i in range(300):
        ref = mp_dist(m1[i], v1[i], m2[i], v2[i])
        worst_d = max(worst_d, float(abs(d[i] - ref) / ref))
        ref = mp_kl(m1[i], v1[i], m2[i], v2[i])
        if ref < mp.mpf(np.finfo(float).max):   # else the answer itself is not a float (and inf is returned)
            worst_k = max(worst_k, float(abs(k[i] - ref) / ref))
        else:
            assert k[i] == np.inf
    assert worst_d < 1e-13 and worst_k < 1e-13, (worst_d, worst_k)


def test_exp_at_every_scale_and_speeds_up_to_100():
    m, v = random_points(300, 3)
    rng = np.random.default_rng(4)
    speed, angle = 10.0 ** rng.uniform(-8, 2, 300), rng.uniform(0, 2 * np.pi, 300)
    vm, vv = speed * np.cos(angle) * np.sqrt(2 * v), speed * np.sin(angle) * 2 * v
    checked = 0
    for i in range(300):
        em, ev = mp_exp(m[i], v[i], vm[i], vv[i])
        if not (1e-300 < ev < 1e300 and abs(em) < 1e300):
            continue                          # the end point is not a representable Gaussian
        p = np.array([m[i], v[i]])
        q = G.exp(p, G.vector(p, np.array([vm[i], vv[i]])))
        # the end point moves like e^speed: an input rounding error of one ulp is speed ulps of the output
        tol = 1e-14 * max(1.0, speed[i])
        assert abs(q[1] - ev) <= tol * ev, (i, q, ev)
        assert abs(q[0] - em) <= tol * (abs(em) + abs(m[i]) + mp.sqrt(ev)), (i, q, em)
        checked += 1
    assert checked > 250


def test_log_then_exp_returns_to_the_target_over_long_distances():
    rng = np.random.default_rng(5)
    m, v = random_points(60, 6)
    m = np.clip(m, -1e250, 1e250)
    p = np.stack([m, v], -1)
    t = rng.uniform(20, 60, 60)
    angle = rng.uniform(0, 2 * np.pi, 60)
    vel = np.stack([t * np.cos(angle) * np.sqrt(2 * v), t * np.sin(angle) * 2 * v], -1)
    ok = [1e-300 < mp_exp(*p[i], *vel[i])[1] < 1e300 for i in range(60)]   # representable end points
    p, vel = p[ok], vel[ok]
    q = G.exp(p, G.vector(p, vel))
    assert len(p) > 40 and np.all(G.dist(p, q) > 20)
    back = G.exp(p, G.log(p, q))
    np.testing.assert_allclose(back[:, 1], q[:, 1], rtol=1e-12)
    assert np.all(np.abs(back[:, 0] - q[:, 0]) <= 1e-12 * (np.abs(q[:, 0]) + np.sqrt(q[:, 1])))
    # and the distance is the Fisher speed of the logarithm, sqrt(dmu^2 / var + dvar^2 / (2 var^2)), in scaled form
    v = G.log(p, q).components
    speed = np.hypot(v[:, 0] / np.sqrt(p[:, 1]), v[:, 1] / (np.sqrt(2) * p[:, 1]))
    np.testing.assert_allclose(speed, G.dist(p, q), rtol=1e-12)


def test_diagonal_gaussian_is_the_product_of_half_planes_at_extreme_scales():
    D = ig.Gaussian(dim=3, covariance="diagonal")
    (m1, v1), (m2, v2) = random_points(3, 7), random_points(3, 8)
    ref = mp.sqrt(sum(mp_dist(m1[i], v1[i], m2[i], v2[i]) ** 2 for i in range(3)))
    got = D.dist(np.concatenate([m1, v1]), np.concatenate([m2, v2]))
    assert float(got) == pytest.approx(float(ref), rel=1e-13)
    assert float(D.kl(np.concatenate([m1, v1]), np.concatenate([m1, v1 * 1e10]))) == pytest.approx(
        float(sum(mp_kl(m1[i], v1[i], m1[i], v1[i] * 1e10) for i in range(3))), rel=1e-13)


def test_torch_gives_the_same_extreme_values():
    torch = pytest.importorskip("torch")
    pts = [(np.array([1e300, 1.0]), np.array([-1e300, 1.0])), (np.array([0.0, 5e-324]), np.array([0.0, 1e-323])),
           (np.array([0.3, 2.0]), np.array([-5.0, 1e200]))]
    for a, b in pts:
        ta, tb = (torch.tensor(x, dtype=torch.float64) for x in (a, b))
        assert float(G.dist(ta, tb)) == pytest.approx(float(G.dist(a, b)), rel=1e-15)
        assert float(G.kl(ta, tb)) == pytest.approx(float(G.kl(a, b)), rel=1e-15)
        np.testing.assert_allclose(G.log(ta, tb).components.numpy(), G.log(a, b).components, rtol=1e-14)


@pytest.mark.parametrize("family", [ig.Gaussian(dim=1), ig.Gaussian(dim=2), ig.Gaussian(dim=2, covariance="diagonal")],
                         ids=["univariate", "full", "diagonal"])
def test_quantities_that_overflow_at_a_valid_point_are_errors_not_nan(family):
    # sigma = 1e-300 made 1/sigma^2 overflow (a Fisher matrix with NaN, and NaN in mv/inner), a mean of
    # 1e300 made the natural parameters underflow (a score of NaN), transport returned NaN components
    # (found by an independent fault-battery sweep, A11)
    rng = np.random.default_rng(3)
    p, q = (np.asarray(family.random_point(rng)) for _ in range(2))
    x = np.asarray(family.sample(p, 3, rng))
    tiny, huge = p * 1e-300, p * 1e300
    with pytest.raises(ValueError, match="Fisher matrix .* at the point .* not representable"):
        family.fisher(tiny)
    with pytest.raises(ValueError, match="Fisher (matrix|inner product)"):
        family.metric.inner(family.vector(tiny, np.ones(family.dim)), family.vector(tiny, np.ones(family.dim)))
    for extreme in (tiny, huge):
        with pytest.raises(ValueError, match="score .* at the point .* not representable"):
            family.score(extreme, x)
    if family.dim == 2 * family.sample_dim:   # univariate, diagonal (the full family's shooting refuses it)
        with pytest.raises(ValueError, match="transport .* not representable"):
            family.transport(p, q * 1e300, family.vector(p, np.ones(family.dim)))
    # ordinary points are unchanged
    assert np.all(np.isfinite(family.fisher(p))) and np.all(np.isfinite(family.score(p, x)))


@pytest.mark.parametrize("family,whitened", [(ig.Gaussian(dim=1), False), (ig.Gaussian(dim=2), True),
                                             (ig.Gaussian(dim=2, covariance="diagonal"), False),
                                             (ig.Gaussian(dim=2, covariance="zero_mean"), True)],
                         ids=["univariate", "full", "diagonal", "zero_mean"])
def test_a_fisher_matrix_that_underflows_is_an_error_not_a_zero_length(family, whitened):
    # at a variance of 1e200 the Fisher entry 1/(2 var^2) is 5e-401: it was 0, so metric.norm(log_p q) was 0 where
    # dist(p, q) is 0.49 (found by an independent probe); the matrix is refused, and the length is either refused
    # with it or, where the inner product is whitened by the covariance's Cholesky factor, computed without it
    if family.sample_dim == 1:
        p, q = family.point(mean=0.0, var=1e200), family.point(mean=0.0, var=2e200)
    elif family.dim == 3:   # zero_mean: vech of the covariance
        p, q = family.point(cov=np.diag([1e200, 1.0])), family.point(cov=np.diag([2e200, 2.0]))
    else:
        p, q = (family.point(mean=[0.0, 0.0], **({"var": [s * 1e200, s]} if family.dim == 4 else
                                                {"cov": np.diag([s * 1e200, s])})) for s in (1.0, 2.0))
    assert np.isfinite(float(family.dist(p, q)))   # the distance has a closed form that stays representable
    with pytest.raises(ValueError, match="Fisher matrix .* not representable .* below the smallest normal"):
        family.fisher(p)
    if whitened:
        assert float(family.metric.norm(family.log(p, q))) == pytest.approx(float(family.dist(p, q)), rel=1e-9)
    else:
        with pytest.raises(ValueError, match="Fisher matrix"):
            family.metric.norm(family.log(p, q))
    # the same family at an ordinary scale keeps its identity |log_p q| = dist(p, q)
    a, b = (np.asarray(family.random_point(np.random.default_rng(s))) for s in (0, 1))
    np.testing.assert_allclose(float(family.metric.norm(family.log(a, b))), float(family.dist(a, b)), rtol=1e-6)


@pytest.mark.parametrize("family", [ig.Gaussian(dim=3, covariance="zero_mean"), ig.Gaussian(dim=3)],
                         ids=["zero_mean", "full"])
@pytest.mark.parametrize("kappa", [1e4, 1e8, 1e12])
def test_inner_products_at_an_ill_conditioned_covariance_keep_the_covariances_accuracy(family, kappa):
    """u^T G v against 1/2 tr(S^-1 U S^-1 V) + u_mu^T S^-1 v_mu in 50-digit mpmath: the dense Fisher matrix squares
    the covariance's condition number, so the inner product was 0.8 % off at kappa = 1e8 and 700x at 1e12 (the
    matrix's smallest eigenvalue -3.6e11); whitened by the covariance's Cholesky factor it keeps about kappa * eps.
    For the zero-mean family |log_p q| is dist(p, q) again (it was 16.28 for 16.16 at kappa = 1e8)."""
    mpmath = mp
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    S = Q @ np.diag([1.0, kappa ** -0.5, 1.0 / kappa]) @ Q.T
    S = (S + S.T) / 2
    zero_mean = family.dim == 6
    a = family.point(cov=S) if zero_mean else family.point(mean=[0.0, 1.0, -2.0], cov=S)
    u, v = (family.vector(a, rng.standard_normal(family.dim)) for _ in range(2))
    iu = np.triu_indices(3)

    def sym(c):
        M = mpmath.matrix(3, 3)
        for k, (i, j) in enumerate(zip(*iu)):
            M[i, j] = M[j, i] = mpmath.mpf(float(c[k]))
        return M
    with mpmath.workdps(50):
        Sm = sym(np.asarray(a, dtype=float)[-6:])
        Si = Sm ** -1
        cu, cv = (np.asarray(w.components, dtype=float) for w in (u, v))
        ref = 0.5 * sum((Si * sym(cu[-6:]) * Si * sym(cv[-6:]))[i, i] for i in range(3))
        if not zero_mean:
            ref += (mpmath.matrix([float(t) for t in cu[:3]]).T * Si * mpmath.matrix([float(t) for t in cv[:3]]))[0]
    got = float(family.metric.inner(u, v))
    assert abs(got - float(ref)) <= 10 * kappa * np.finfo(float).eps * float(
        family.metric.norm(u) * family.metric.norm(v))
    if zero_mean:   # the closed-form distance is accurate here, and the log's length is it
        b = family.point(cov=np.diag([2.0, 1e-3, 3.0 / kappa]))
        assert float(family.metric.norm(family.log(a, b))) == pytest.approx(
            float(family.dist(a, b)), rel=10 * kappa * np.finfo(float).eps + 1e-12)

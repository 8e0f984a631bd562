"""Full-Gaussian distance bounds: batches, torch, gradients, an independent reference, bad input."""
import math

import numpy as np
import pytest
import scipy.linalg

import infogeo as ig
from infogeo.statistical import gaussian_bounds as gb
from infogeo.statistical import gaussian_geodesics as gg

torch = pytest.importorskip("torch")


def random_points(G, shape, seed, scale=1.0):
    """Points of shape ``shape + (dim,)`` in the standard chart, with generic covariances and means."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal(shape + (G.d, G.d))
    S = A @ np.swapaxes(A, -1, -2) + 0.3 * np.eye(G.d)
    return np.asarray(G.point(mean=scale * rng.standard_normal(shape + (G.d,)), cov=S))


def reference_bounds(G, p, q):
    """Bounds of one pair from the defining formulas, without the factor algebra of gaussian_bounds.

    Lower: generalised eigenvalues of the Calvo–Oller embeddings; upper: min of sqrt(KL + reverse KL)
    (the family's own KL) and the two-leg paths (zero-mean distance plus the equal-covariance closed form).
    """
    (m0, S0), (m1, S1) = (G._mu_cov(x) for x in (p, q))

    def embed(m, S):
        return np.block([[S + np.outer(m, m), m[:, None]], [m[None, :], np.ones((1, 1))]])

    lower = math.sqrt(0.5 * np.sum(np.log(scipy.linalg.eigvalsh(embed(m1, S1), embed(m0, S0))) ** 2))
    spd = math.sqrt(0.5 * np.sum(np.log(scipy.linalg.eigvalsh(S1, S0)) ** 2))
    dm = m1 - m0
    maha2 = min(dm @ np.linalg.solve(S0, dm), dm @ np.linalg.solve(S1, dm))
    legs = spd + math.sqrt(2) * math.acosh(1 + maha2 / 4)
    return lower, min(legs, math.sqrt(float(G.kl(p, q) + G.kl(q, p))))


@pytest.mark.parametrize("d", [2, 3])
def test_bounds_match_the_defining_formulas(d):
    G = ig.Gaussian(dim=d)
    P, Q = random_points(G, (6,), 1, scale=2.0), random_points(G, (6,), 2, scale=2.0)
    for p, q in zip(P, Q):
        lower, upper = G.dist_bounds(p, q)
        ref_lower, ref_upper = reference_bounds(G, p, q)
        assert lower == pytest.approx(ref_lower, rel=1e-10) and upper == pytest.approx(ref_upper, rel=1e-10)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_batched_bounds_equal_the_loop_of_single_pairs(backend):
    G = ig.Gaussian(dim=2)
    P, Q = random_points(G, (7,), 3), random_points(G, (7,), 4, scale=3.0)
    wrap = (lambda a: torch.tensor(a)) if backend == "torch" else (lambda a: a)
    lower, upper = G.dist_bounds(wrap(P), wrap(Q))
    assert tuple(lower.shape) == tuple(upper.shape) == (7,)
    assert isinstance(lower, torch.Tensor if backend == "torch" else np.ndarray)
    for i in range(7):
        one = G.dist_bounds(wrap(P[i]), wrap(Q[i]))
        assert float(lower[i]) == pytest.approx(float(one[0]), rel=1e-13)
        assert float(upper[i]) == pytest.approx(float(one[1]), rel=1e-13)


def test_batches_broadcast_over_leading_axes():
    G = ig.Gaussian(dim=3)
    P, Q = random_points(G, (2, 1), 5), random_points(G, (4,), 6)
    lower, upper = G.dist_bounds(P, Q)
    assert lower.shape == upper.shape == (2, 4)
    for i, j in np.ndindex(2, 4):
        assert (lower[i, j], upper[i, j]) == pytest.approx(G.dist_bounds(P[i, 0], Q[j]), rel=1e-13)
    one_lower, one_upper = G.dist_bounds(P[1, 0], Q)     # one point against a batch
    assert one_lower.shape == (4,) and np.allclose(one_lower, lower[1], rtol=1e-13, atol=0)


@pytest.mark.parametrize("d", [2, 4])
def test_torch_equals_numpy_and_keeps_dtype(d):
    G = ig.Gaussian(dim=d)
    P, Q = random_points(G, (5,), 7), random_points(G, (5,), 8, scale=2.0)
    lo_np, up_np = G.dist_bounds(P, Q)
    lo_t, up_t = G.dist_bounds(torch.tensor(P), torch.tensor(Q))
    assert lo_t.dtype == up_t.dtype == torch.float64
    np.testing.assert_allclose(lo_t.numpy(), lo_np, rtol=1e-12, atol=0)
    np.testing.assert_allclose(up_t.numpy(), up_np, rtol=1e-12, atol=0)
    lo32, up32 = G.dist_bounds(torch.tensor(P, dtype=torch.float32), torch.tensor(Q, dtype=torch.float32))
    assert lo32.dtype == up32.dtype == torch.float32
    np.testing.assert_allclose(up32.numpy(), up_np, rtol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_stay_on_their_device():
    G = ig.Gaussian(dim=3)
    P, Q = random_points(G, (4,), 9), random_points(G, (4,), 10)
    lower, upper = G.dist_bounds(torch.tensor(P, device="cuda"), torch.tensor(Q, device="cuda"))
    assert lower.device.type == upper.device.type == "cuda"
    np.testing.assert_allclose(upper.cpu().numpy(), G.dist_bounds(P, Q)[1], rtol=1e-12)


@pytest.mark.parametrize("d", [2, 3])
def test_gradients_match_finite_differences(d):
    G = ig.Gaussian(dim=d)
    p, q = random_points(G, (), 11 + d), random_points(G, (), 21 + d, scale=1.5)
    pt, qt = (torch.tensor(a, requires_grad=True) for a in (p, q))
    for k in range(2):                                   # lower, then upper
        gp, gq = torch.autograd.grad(G.dist_bounds(pt, qt)[k], (pt, qt))
        for x, g, other_first in ((p, gp, False), (q, gq, True)):
            h, fd = 1e-6, np.empty(G.dim)
            for i in range(G.dim):
                e = np.zeros(G.dim)
                e[i] = h
                plus, minus = ((p, x + s * e) if other_first else (x + s * e, q) for s in (1, -1))
                fd[i] = (G.dist_bounds(*plus)[k] - G.dist_bounds(*minus)[k]) / (2 * h)
            np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_numpy_bounds_are_differentiable_by_autograd():
    G = ig.Gaussian(dim=2)
    p, q = random_points(G, (), 31), random_points(G, (), 32)
    g_np = ig.backend.grad(lambda x: G.dist_bounds(x, q)[1], p)
    pt = torch.tensor(p, requires_grad=True)
    (g_t,) = torch.autograd.grad(G.dist_bounds(pt, torch.tensor(q))[1], pt)
    np.testing.assert_allclose(g_np, g_t.numpy(), rtol=1e-10)


def test_module_function_is_reexported_and_batches():
    assert gg.dist_bounds is gb.dist_bounds
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 2, 2))
    S = A @ np.swapaxes(A, -1, -2) + np.eye(2)
    lower, upper = gg.dist_bounds(np.zeros(2), np.eye(2), rng.standard_normal((3, 2)), S)
    assert lower.shape == upper.shape == (3,) and np.all(lower <= upper)


def test_bad_input_is_refused_with_a_clear_error():
    G = ig.Gaussian(dim=2)
    P, Q = random_points(G, (3,), 40), random_points(G, (4,), 41)
    with pytest.raises(ValueError, match="do not broadcast"):
        G.dist_bounds(P, Q)
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        G.dist_bounds(P[:, :4], Q[:3])
    bad = P.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        G.dist_bounds(bad, Q[:3])
    with pytest.raises(ValueError, match="NaN"):
        G.dist_bounds(torch.tensor(bad), torch.tensor(Q[:3]))
    not_spd = P.copy()
    not_spd[0, 2:] = [1.0, 2.0, 1.0]                     # covariance [[1, 2], [2, 1]]
    with pytest.raises(ValueError, match="positive definite"):
        G.dist_bounds(not_spd, Q[:3])
    mu, S = np.zeros(2), np.eye(2)
    with pytest.raises(ValueError, match="S1 must have shape"):
        gb.dist_bounds(mu, S, mu, np.eye(3))
    with pytest.raises(ValueError, match="S1 is not symmetric positive definite"):
        gb.dist_bounds(mu, S, mu, np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="mu1 contains NaN"):
        gb.dist_bounds(mu, S, np.array([0.0, np.inf]), S)
    with pytest.raises(ValueError, match="do not broadcast"):
        gb.dist_bounds(np.zeros((3, 2)), S, np.zeros((2, 2)), S)


def test_torch_geodesic_distance_error_names_the_shooting():
    G = ig.Gaussian(dim=2)
    p = torch.tensor(random_points(G, (), 50))
    with pytest.raises(TypeError, match="numpy only") as info:
        G.dist(p, p)
    assert "Newton shooting" in str(info.value) and "closed-form dist" not in str(info.value)
    with pytest.raises(TypeError, match="Newton shooting"):
        G.log(p, p)


def test_tiny_mean_differences_keep_their_accuracy():
    G = ig.Gaussian(dim=2)
    S = np.array([[2.0, 0.3], [0.3, 0.5]])
    p = G.point(mean=np.zeros(2), cov=S)
    dm = np.array([1e-9, -2e-9])
    q = G.point(mean=dm, cov=S)
    delta = math.sqrt(dm @ np.linalg.solve(S, dm))      # sqrt2 arccosh(1 + delta^2 / 4) = delta (1 + O(delta^2))
    lower, upper = G.dist_bounds(p, q)
    assert upper == pytest.approx(delta, rel=1e-9) and 0 < lower <= upper * (1 + 1e-12)


def test_gradients_stay_finite_at_kinks():
    G = ig.Gaussian(dim=2)
    p = random_points(G, (), 60)
    q_equal_means = np.concatenate([p[:2], random_points(G, (), 61)[2:]])
    for q in (p.copy(), q_equal_means):
        pt = torch.tensor(p, requires_grad=True)
        lower, upper = G.dist_bounds(pt, torch.tensor(q))
        for g in torch.autograd.grad(lower + upper, pt):
            assert torch.all(torch.isfinite(g))


def mpmath_bounds(m0, S0, m1, S1, digits=50):
    """Both bounds of one pair at ``digits`` digits from the defining formulas (Calvo–Oller eigenvalues;
    min of the two-leg length and sqrt of the Jeffreys divergence), independent of the factor algebra."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(digits):
        d, tol = len(m0), mp.mpf(10) ** -9000
        m0, m1 = mp.matrix([mp.mpf(float(x)) for x in m0]), mp.matrix([mp.mpf(float(x)) for x in m1])
        S0, S1 = mp.matrix(np.asarray(S0).tolist()), mp.matrix(np.asarray(S1).tolist())

        def embed(m, S):
            E = mp.matrix(d + 1, d + 1)
            for i in range(d):
                for j in range(d):
                    E[i, j] = S[i, j] + m[i] * m[j]
                E[i, d] = E[d, i] = m[i]
            E[d, d] = 1
            return E

        L = mp.cholesky(embed(m0, S0), tol=tol) ** -1
        lower = mp.sqrt(sum(mp.log(e) ** 2 for e in mp.eigsy(L * embed(m1, S1) * L.T)[0]) / 2)
        L0, L1 = mp.cholesky(S0, tol=tol), mp.cholesky(S1, tol=tol)
        M, dm = L0 ** -1 * L1, m1 - m0
        s2 = mp.eigsy(M * M.T)[0]
        m2, z2 = (sum(x ** 2 for x in L ** -1 * dm) for L in (L0, L1))
        legs = mp.sqrt(sum(mp.log(x) ** 2 for x in s2) / 2) + mp.sqrt(2) * mp.acosh(1 + min(m2, z2) / 4)
        jeffreys = (sum(x + 1 / x - 2 for x in s2) + m2 + z2) / 2
        return float(lower), float(min(legs, mp.sqrt(jeffreys)))


@pytest.mark.parametrize("ratio", [1e-300, 1e-200, 1e-100, 1e-40, 1e-20, 1e20, 1e100, 1e300])
def test_extreme_covariance_ratios_keep_accurate_ordered_bounds(ratio):
    # the small singular values of L0^{-1} L1 were noise or 0 past a ratio of ~1e-32: the lower bound was
    # inf above a finite upper one (found by an independent fault-battery sweep, A8)
    G = ig.Gaussian(dim=2)
    p = random_points(G, (), 70)
    (m0, S0), (m1, S1) = G._mu_cov(p), G._mu_cov(random_points(G, (), 71))
    lower, upper = gb.dist_bounds(m0, S0, m1, S1 * ratio)
    # 50 significant digits beyond the ratio's span: the embedding adds S1 * ratio to an O(1) m m^T
    want = mpmath_bounds(m0, S0, m1, S1 * ratio, digits=50 + 2 * abs(round(math.log10(ratio))))
    assert lower <= upper
    assert (lower, upper) == pytest.approx(want, rel=1e-12)

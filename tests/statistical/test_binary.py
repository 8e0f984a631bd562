"""Binary exponential families (Ising, general monomials) against brute-force enumeration, autodiff,
finite differences, the independence model and Gibbs estimates; the FOGA'15 flow statement; DiscreteIGO."""
import itertools

import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.solvers import DiscreteIGO, natural_gradient_flow, relaxation_natural_gradient

EDGES = [(0, 1), (1, 2), (2, 3), (0, 3)]


def brute(n, stats, theta, values=(-1, 1)):
    """p, t(x) and Cov[t] by an explicit loop over outcomes (independent of the family's code)."""
    X = np.array(list(itertools.product(values, repeat=n)), dtype=float)
    T = np.array([[np.prod([x[i] for i in m]) for m in stats] for x in X])
    w = np.array([np.exp(sum(th * t for th, t in zip(theta, row))) for row in T])
    p = w / w.sum()
    eta = sum(pi * row for pi, row in zip(p, T))
    cov = sum(pi * np.outer(row - eta, row - eta) for pi, row in zip(p, T))
    return X, T, p, np.log(w.sum()), eta, cov


@pytest.mark.parametrize("values", [(-1, 1), (0, 1)])
def test_ising_fisher_is_covariance_and_hessian(values):
    M = ig.IsingModel(4, edges=EDGES, values=values)
    theta = np.random.default_rng(0).normal(size=M.dim)
    stats = [(i,) for i in range(4)] + EDGES
    X, T, p, psi, eta, cov = brute(4, stats, theta, values)
    assert np.allclose(M.support(), X) and np.allclose(M.sufficient_statistics(X), T)
    assert float(M.log_partition(theta)) == pytest.approx(psi, abs=1e-12)
    np.testing.assert_allclose(M.moments(theta), eta, atol=1e-12)
    np.testing.assert_allclose(M.fisher(theta), cov, atol=1e-12)
    np.testing.assert_allclose(B.hessian(M.log_partition, theta), cov, atol=1e-12)  # autodiff through psi
    h = 1e-4  # central differences of the exact moments
    fd = np.array([(M.moments(theta + h * e) - M.moments(theta - h * e)) / (2 * h) for e in np.eye(M.dim)])
    np.testing.assert_allclose(fd, cov, atol=1e-7)
    np.testing.assert_allclose(np.exp(M.log_prob(theta, X)), p, atol=1e-14)


def test_chunked_sums_equal_the_table(monkeypatch):
    import infogeo.statistical.binary as bm
    stats = [(0,), (1, 2), (0, 2, 3), (4,), (1, 4)]
    theta = np.random.default_rng(1).normal(size=(3, 5)) * 2
    ref = bm.BinaryExponentialFamily(5, stats)
    monkeypatch.setattr(bm, "_TABLE_FLOATS", 1)
    monkeypatch.setattr(bm, "_CHUNK_FLOATS", 7)
    M = bm.BinaryExponentialFamily(5, stats)
    for a, b in [(M.log_partition(theta), ref.log_partition(theta)), (M.moments(theta), ref.moments(theta)),
                 (M.fisher_natural(theta), ref.fisher_natural(theta))]:
        np.testing.assert_allclose(a, b, atol=1e-12)
    # stable far out: a point mass to rounding, no overflow
    assert np.isfinite(M.log_partition(np.full(5, 400.0))) and np.all(np.isfinite(M.fisher_natural(np.full(5, 400.0))))


def test_kl_is_bregman_and_direct_sum_in_both_charts():
    M = ig.IsingModel(3, edges=[(0, 1), (1, 2)])
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=M.dim), rng.normal(size=M.dim)
    pa, pb = np.exp(M.log_prob(a, M.support())), np.exp(M.log_prob(b, M.support()))
    direct = float(np.sum(pa * np.log(pa / pb)))
    bregman = float(M.log_partition(b) - M.log_partition(a) - M.moments(a) @ (b - a))
    assert float(M.kl(a, b)) == pytest.approx(direct, abs=1e-13)
    assert bregman == pytest.approx(direct, abs=1e-13)
    Mm = M.in_chart("mean")
    ea, eb = M.to_chart(a, "mean"), M.to_chart(b, "mean")
    np.testing.assert_allclose(Mm.to_chart(ea, "natural"), a, atol=1e-10)
    assert float(Mm.kl(ea, eb)) == pytest.approx(direct, abs=1e-10)
    np.testing.assert_allclose(Mm.fisher(ea) @ M.fisher(a), np.eye(M.dim), atol=1e-8)  # Legendre duality


def test_independence_special_case_agrees_with_independence_model():
    n = 3
    M = ig.BinaryExponentialFamily(n, statistics=[(i,) for i in range(n)])
    I = ig.IndependenceModel(n, chart="natural")
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=n) * 2, rng.normal(size=n)
    X = I.support()
    assert float(M.log_partition(a)) == pytest.approx(float(I.log_partition(a)), abs=1e-12)
    np.testing.assert_allclose(M.fisher(a), I.fisher(a), atol=1e-12)
    np.testing.assert_allclose(M.moments(a), I.to_chart(a, "mean"), atol=1e-12)
    np.testing.assert_allclose(M.log_prob(a, X), I.log_prob(a, X), atol=1e-12)
    assert float(M.kl(a, b)) == pytest.approx(float(I.kl(a, b)), abs=1e-12)
    # mean charts: E[x_i] in both; the standard chart of the independence model is P(x_i = +1)
    e = np.array(I.to_chart(a, "mean"))
    Mm, Im = M.in_chart("mean"), I.in_chart("mean")
    np.testing.assert_allclose(Mm.fisher(e), Im.fisher(e), atol=1e-10)
    np.testing.assert_allclose(0.5 * (1 + M.to_chart(a, "mean")), I.to_chart(a, "standard"), atol=1e-12)


def test_gibbs_estimates_within_four_standard_errors():
    M = ig.IsingModel(5, edges=[(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)])
    theta = np.random.default_rng(4).normal(size=M.dim) * 0.5
    est = M.estimate_moments(theta, 8000, rng=0, chains=16, burn_in=50)
    assert np.all(np.abs(est.value - M.moments(theta)) <= 4 * est.stderr) and np.all(est.stderr > 0)
    fis = M.estimate_fisher(theta, 8000, rng=1, chains=16, burn_in=50)
    assert np.all(np.abs(fis.value - M.fisher(theta)) <= 4 * fis.stderr + 1e-12)
    # exact sampling agrees with the moments too (i.i.d. draws: stderr sqrt(var / N))
    X = M.sample(theta, 20000, np.random.default_rng(5))
    err = np.sqrt(np.diag(M.fisher(theta)) / 20000)
    assert np.all(np.abs(M.sufficient_statistics(X).mean(0) - M.moments(theta)) <= 4 * err)


def test_large_n_refuses_exact_sums_and_samples_by_gibbs():
    M = ig.IsingModel(30, edges=[(i, i + 1) for i in range(29)])
    with pytest.raises(ValueError, match="max_exact"):
        M.log_partition(np.zeros(M.dim))
    assert M.sample(np.zeros(M.dim), 10, 0).shape == (10, 30)


@pytest.mark.parametrize("bad, match", [
    (dict(n=0, statistics=[(0,)]), "positive integer"), (dict(n=2, statistics=[(0, 2)]), "0..1"),
    (dict(n=2, statistics=[(0, 1), (1, 0)]), "repeats"), (dict(n=2, statistics=[]), "at least one"),
    (dict(n=2, statistics=[(0, 0)]), "distinct"), (dict(n=2, statistics=[(0,)], values=(1, 2)), "values"),
])
def test_family_input_validation(bad, match):
    with pytest.raises(ValueError, match=match):
        ig.BinaryExponentialFamily(**bad)


def test_observation_and_mean_chart_validation():
    M = ig.IsingModel(2, edges=[(0, 1)])
    with pytest.raises(ValueError, match="-1 or 1"):
        M.log_prob(np.zeros(3), np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError):
        M.in_chart("mean").point([0.9, 0.9, -0.9])  # inside the box, outside the marginal polytope
    with pytest.raises(ValueError, match="pair"):
        ig.IsingModel(3, edges=[(0, 1, 2)])


def f_seed(X):
    return X[:, 0] + 2 * X[:, 1] + 3 * X[:, 0] * X[:, 1]


def test_flow_with_f_in_the_span_reaches_the_minimum_from_every_start():
    """Malagò & Pistone (2015): f = x1 + 2 x2 + 3 x1 x2 is in the span of the interaction model, so the
    natural gradient is the constant (1, 2, 3) and the flow is the straight line theta0 - t (1, 2, 3)."""
    M = ig.IsingModel(2, edges=[(0, 1)])
    c = np.array([1.0, 2.0, 3.0])
    for start in itertools.product([-2.0, 0.0, 2.0], repeat=3):
        r = natural_gradient_flow(M, f_seed, start, tol=1e-10)
        assert r.success and r.at_minimum and list(r.mode) == [1.0, -1.0] and r.mode_prob >= 1 - 1e-10
        assert r.gap <= 6 * 1e-10 + 1e-15   # E[f] - min f <= (max f - min f) (1 - p_max)
        np.testing.assert_allclose(r.thetas, np.asarray(start) - r.t[:, None] * c, atol=1e-9)


def test_natural_gradient_stays_exact_near_the_point_mass():
    """The regression weights span ~1e-200 here: an SVD solve drops the light outcomes and returns a wrong
    vector field (the flow from (-2, -2, -2) then never finished); the row-sorted QR keeps (1, 2, 3)."""
    M = ig.IsingModel(2, edges=[(0, 1)])
    c = np.array([1.0, 2.0, 3.0])
    for t in [0.0, 5.0, 8.0, 20.0, 60.0]:
        value, grad, nat = relaxation_natural_gradient(M, np.full(3, -2.0) - t * c, f_seed)
        np.testing.assert_allclose(nat, c, rtol=1e-9)
    # against the definition F^{-1} Cov(f, t), by brute force, where F is well conditioned
    theta = np.array([0.3, -0.4, 0.2])
    X, T, p, _, eta, cov = brute(2, [(0,), (1,), (0, 1)], theta)
    fx = f_seed(X)
    g_ref = (p * (fx - p @ fx)) @ (T - eta)
    value, grad, nat = relaxation_natural_gradient(M, theta, f_seed)
    assert value == pytest.approx(p @ fx, abs=1e-13)
    np.testing.assert_allclose(grad, g_ref, atol=1e-13)
    np.testing.assert_allclose(nat, np.linalg.solve(cov, g_ref), atol=1e-10)
    # outside the span (independence model) too: nat = Cov(t)^{-1} Cov(f, t)
    X, T, p, _, eta, cov = brute(2, [(0,), (1,)], theta[:2])
    value, grad, nat = relaxation_natural_gradient(ig.IsingModel(2), theta[:2], f_seed)
    np.testing.assert_allclose(nat, np.linalg.solve(cov, (p * (fx - p @ fx)) @ (T - eta)), atol=1e-10)


def test_independence_flow_can_end_at_a_non_optimal_vertex():
    I = ig.IsingModel(2)   # first-order statistics only: f_seed is outside the span
    bad = natural_gradient_flow(I, f_seed, [-1.0, 1.0])
    assert bad.success and not bad.at_minimum and list(bad.mode) == [-1.0, 1.0]   # f = -2 there; min f = -4
    assert bad.gap == pytest.approx(2.0, abs=1e-6)
    good = natural_gradient_flow(I, f_seed, [1.0, -1.0])
    assert good.success and good.at_minimum and list(good.mode) == [1.0, -1.0]
    # the interaction model from the same marginals (theta_12 = 0) reaches the minimum
    M = ig.IsingModel(2, edges=[(0, 1)])
    assert natural_gradient_flow(M, f_seed, [-1.0, 1.0, 0.0]).at_minimum


def test_flow_budget_and_validation():
    M = ig.IsingModel(2, edges=[(0, 1)])
    r = natural_gradient_flow(M, f_seed, [0.0, 0.0, 0.0], max_steps=1)
    assert r.nit == 1 and not r.success and "max_steps" in r.message
    r = natural_gradient_flow(M, f_seed, [0.0, 0.0, 0.0], t_max=0.5)
    assert not r.success and r.t[-1] == pytest.approx(0.5) and "t_max" in r.message
    with pytest.raises(ValueError, match="theta0"):
        natural_gradient_flow(M, f_seed, [0.0, 0.0])
    with pytest.raises(ValueError, match="4 finite values"):
        natural_gradient_flow(M, lambda X: X[:, 0] * np.nan, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="tol"):
        natural_gradient_flow(M, f_seed, [0.0, 0.0, 0.0], tol=0)


def test_discrete_igo_solves_onemax_30_within_budget():
    onemax = lambda X: -(X > 0).sum(axis=1)  # noqa: E731
    runs = [DiscreteIGO(30, seed=s, max_evals=2000, f_target=-30).minimize(onemax) for s in range(10)]
    assert all(r.fun == -30 and r.nfev <= 2000 and np.all(r.x == 1) for r in runs)


def test_discrete_igo_with_an_ising_family_exact_and_gibbs():
    rng = np.random.default_rng(0)
    edges = [(i, i + 1) for i in range(0, 8, 2)]
    signs = rng.choice([-1.0, 1.0], size=8)

    def f(X):   # pairs that must agree with hidden signs: in the span of the Ising statistics
        Y = X * signs
        return -sum(Y[:, i] * Y[:, j] + 0.1 * Y[:, i] for i, j in edges)
    best = float(f(signs[None])[0])
    r = DiscreteIGO(8, edges=edges, seed=1, max_evals=3000, f_target=best).minimize(f)
    assert r.fun == best
    r2 = DiscreteIGO(8, edges=edges, seed=1, max_evals=3000, f_target=best, exact_up_to=4).minimize(f)
    assert r2.fun == best


@pytest.mark.parametrize("kw, err", [(dict(n=1), ValueError), (dict(n=5, population=1), ValueError),
                                      (dict(n=5, learning_rate=0.0), ValueError),
                                      (dict(n=5, max_evals=1), ValueError), (dict(n=5, weights="x"), ValueError),
                                      (dict(n=5, family="ising"), TypeError),
                                      (dict(n=5, family=ig.IsingModel(4)), ValueError),
                                      (dict(n=5, family=ig.IsingModel(5, values=(0, 1))), ValueError)])
def test_discrete_igo_input_validation(kw, err):
    with pytest.raises(err):
        DiscreteIGO(**kw)


def test_discrete_igo_checks_f_output():
    with pytest.raises(ValueError, match="one value per row"):
        DiscreteIGO(4, seed=0, max_evals=100).minimize(lambda X: X.sum())


def test_discrete_igo_public_signature_and_result():
    onemax = lambda X: -(X > 0).sum(axis=1)  # noqa: E731
    r = ig.solvers.DiscreteIGO(n=10, family=None, seed=3, max_evals=500).minimize(onemax)
    assert set(r) >= {"x", "fun", "nfev", "nit", "success", "message"}
    assert r.nfev <= 500 and r.x.shape == (10,) and set(np.unique(r.x)) <= {-1.0, 1.0}
    assert r.fun == onemax(r.x[None])[0]
    # an IndependenceModel family, or a BinaryExponentialFamily with first-order statistics, is the default path
    a = ig.solvers.DiscreteIGO(n=10, family=ig.IndependenceModel(10), seed=3, max_evals=500).minimize(onemax)
    b = ig.solvers.DiscreteIGO(n=10, family=ig.IsingModel(10), seed=3, max_evals=500).minimize(onemax)
    assert a.nfev == r.nfev == b.nfev and np.array_equal(a.theta, r.theta) and np.array_equal(b.theta, r.theta)


def test_ties_share_the_mean_weight_of_their_ranks():
    from infogeo.solvers.discrete_igo import _tie_averaged
    w = np.array([0.5, 0.3, 0.1, -0.2, -0.7])
    out = _tie_averaged(w, np.array([1.0, 2.0, 2.0, 2.0, 5.0]))
    np.testing.assert_allclose(out, [0.5, 0.2 / 3, 0.2 / 3, 0.2 / 3, -0.7])
    assert out.sum() == pytest.approx(w.sum())
    # a flat function gives every point the same weight: no move of the mean parameters on average
    assert np.ptp(_tie_averaged(w, np.zeros(5))) == 0


def test_gibbs_on_bits_within_four_standard_errors():
    M = ig.IsingModel(4, edges=[(0, 1), (1, 2), (2, 3)], values=(0, 1))
    theta = np.array([0.3, -0.5, 0.2, 0.1, 0.8, -0.6, 0.4])
    est = M.estimate_moments(theta, 6400, rng=0, chains=32, burn_in=50)   # t with 31 dof: 4 SE is a wide band
    assert np.all(np.abs(est.value - M.moments(theta)) <= 4 * est.stderr)


@pytest.mark.parametrize("theta", [6.0, -6.0, 9.0])
def test_ising_moments_stay_inside_and_near_the_boundary_are_accurate(theta):
    """The moments of a strongly coupled Ising model never round past the bounds, and their distance to the nearer
    bound (1 - eta or eta + 1) matches mpmath enumeration (a plain sum of probabilities gave 1 + 4e-16 at 6)."""
    mpmath = pytest.importorskip("mpmath")
    import itertools
    edges = [(0, 1), (1, 2), (2, 3), (0, 3)]
    M = ig.IsingModel(4, edges)
    th = np.full(8, theta)
    eta = np.asarray(M.in_chart("natural").to_chart(th, "mean"))
    assert np.all(eta <= 1) and np.all(eta >= -1)   # (at theta = 9 the gap, 7e-24, is below float64's near 1)
    mpmath.mp.dps = 50
    w, acc = [], [mpmath.mpf(0)] * 8
    for x in itertools.product((-1, 1), repeat=4):
        t = list(x) + [x[i] * x[j] for i, j in edges]
        e = mpmath.exp(sum(mpmath.mpf(theta) * v for v in t))
        w.append((e, t))
    Z = sum(e for e, _ in w)
    for e, t in w:
        acc = [a + e * v for a, v in zip(acc, t)]
    want = [a / Z for a in acc]
    for got, ref in zip(eta, want):
        gap = 1 - ref if ref > 0 else ref + 1   # distance to the nearer bound
        got_gap = 1 - got if ref > 0 else got + 1
        assert abs(got_gap - float(gap)) <= 1e-12 * abs(float(gap)) + 4 * np.finfo(float).eps


@pytest.mark.parametrize("scale", [1.0, 1e10, 1e300])
@pytest.mark.parametrize("make", [lambda: ig.IsingModel(3, [(0, 1), (1, 2)]),
                                  lambda: ig.BinaryExponentialFamily(3, [[0], [1], [0, 1]])], ids=["ising", "bef"])
def test_kl_keeps_its_digits_at_large_natural_parameters(scale, make):
    # the Bregman form psi(q) - psi(p) - eta_p (theta_q - theta_p) cancelled terms of the size of theta: 6 digits
    # left at 1e10, KL 0 between different distributions at 1e300; the family with a free variable has tied most
    # likely outcomes, which numpy's softmax gave probability 1 each (found by an independent fault-battery sweep)
    mp = pytest.importorskip("mpmath")
    M = make()
    rng = np.random.default_rng(0)
    p, q = (np.asarray(M.random_point(rng)) for _ in range(2))
    T = [[mp.mpf(float(v)) for v in row] for row in np.asarray(M.sufficient_statistics(np.asarray(M.support())))]

    def log_probs(theta):
        logits = [mp.fsum(mp.mpf(float(a)) * b for a, b in zip(theta, row)) for row in T]
        top = max(logits)   # shifted first: top + log(count of ties) would round to top at 1e300
        z = mp.log(mp.fsum(mp.exp(x - top) for x in logits))
        return [(x - top) - z for x in logits]

    with mp.workdps(40):
        for a, b in ((p * scale, q), (q, p * scale)):
            la, lb = log_probs(a), log_probs(b)
            want = float(mp.fsum(mp.exp(x) * (x - y) for x, y in zip(la, lb)))
            assert float(M.kl(a, b)) == pytest.approx(want, rel=1e-12)

"""Gaussian graphical models (zeros fixed in the precision): charts, Fisher, KL, and the MLE (covariance selection)."""
import numpy as np
import pytest
from scipy.optimize import minimize

import infogeo as ig
from infogeo.budget import Budget, BudgetExceededError
from infogeo.statistical.gaussian_graphical import GaussianGraphical, covariance_selection

B = ig.backend

CHAIN = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], bool)   # 1 - 2 - 3 - 4
CYCLE = np.array([[1, 1, 0, 1], [1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 1, 1]], bool)   # a 4-cycle: not chordal


def embed(G, theta):
    """The natural parameters of the full Gaussian with the same distribution (zeros off the pattern)."""
    full = np.zeros(G.d + G.d * (G.d + 1) // 2)
    full[G._index] = theta
    return full


@pytest.fixture(params=[CHAIN, CYCLE], ids=["chain", "cycle"])
def model(request):
    return Gaussian_(request.param)


def Gaussian_(P):
    return ig.Gaussian(P.shape[0], precision_pattern=P)


def test_dispatch_and_dimension():
    G = Gaussian_(CHAIN)
    assert isinstance(G, GaussianGraphical) and isinstance(G, ig.Gaussian)
    assert G.dim == 4 + 4 + 3 and G.free.m == 7


def test_fisher_is_the_restricted_full_fisher_and_the_hessian_of_psi(model):
    G = model.in_chart("natural")
    full = ig.Gaussian(G.d).in_chart("natural")
    for seed in range(3):
        th = G.random_point(seed)
        F = B.to_numpy(G.fisher(th))
        F_full = B.to_numpy(full.fisher(embed(G, th)))
        np.testing.assert_allclose(F, F_full[np.ix_(G._index, G._index)], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(F, B.to_numpy(B.hessian(G.log_partition, th)), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(B.to_numpy(G.moments(th)), B.to_numpy(B.grad(G.log_partition, th)),
                                   rtol=1e-10, atol=1e-12)


def test_fisher_in_the_other_charts_is_the_pullback(model):
    th = model.in_chart("natural").random_point(1)
    Fn = B.to_numpy(model.in_chart("natural").fisher(th))
    M = model.in_chart("mean")
    Fi = np.linalg.inv(Fn)
    np.testing.assert_allclose(B.to_numpy(M.fisher(M.from_chart(th, "natural"))), Fi, rtol=1e-8,
                               atol=1e-10 * np.abs(Fi).max())
    s = model.from_chart(th, "natural")
    # J = d theta / d s by central differences of the explicit chart map
    h = 1e-6
    J = np.stack([(B.to_numpy(model.to_natural(s + h * e)) - B.to_numpy(model.to_natural(s - h * e))) / (2 * h)
                  for e in np.eye(model.dim)], axis=1)
    ref = J.T @ Fn @ J
    np.testing.assert_allclose(B.to_numpy(model.fisher(s)), ref, rtol=1e-6, atol=1e-7 * np.abs(ref).max())


def test_charts_round_trip_and_mean_chart_inverts_by_covariance_selection(model):
    p = model.random_point(2)
    eta = model.to_mean(p)
    np.testing.assert_allclose(B.to_numpy(model.from_chart(eta, "mean")), p, rtol=1e-10, atol=1e-12)
    # the mean chart matches the full family's mean parameters on the free coordinates
    full = ig.Gaussian(model.d)
    q = full.point(mean=model.mean(p), cov=model.cov(p))
    np.testing.assert_allclose(eta, B.to_numpy(full.to_mean(q))[model._index], rtol=1e-12)
    L = B.to_numpy(model.precision(p))
    assert np.all(L[~model.precision_pattern] == 0)
    np.testing.assert_allclose(np.linalg.inv(B.to_numpy(model.cov(p))), L, rtol=1e-9, atol=1e-12)


def test_kl_is_the_full_gaussian_kl_and_the_bregman_divergence(model):
    full = ig.Gaussian(model.d)
    p, q = model.random_point(3), model.random_point(4)
    ref = full.kl(full.point(mean=model.mean(p), cov=model.cov(p)), full.point(mean=model.mean(q), cov=model.cov(q)))
    np.testing.assert_allclose(model.kl(p, q), ref, rtol=1e-10)
    tp, tq = model.to_natural(p), model.to_natural(q)
    bregman = (model.log_partition(tq) - model.log_partition(tp) - B.grad(model.log_partition, tp) @ (tq - tp))
    np.testing.assert_allclose(model.kl(p, q), bregman, rtol=1e-9)


def test_log_prob_and_sampling_agree_with_the_full_gaussian(model):
    full = ig.Gaussian(model.d)
    p = model.random_point(5)
    q = full.point(mean=model.mean(p), cov=model.cov(p))
    X = model.sample(p, 20000, np.random.default_rng(0))
    np.testing.assert_allclose(model.log_prob(p, X[:50]), full.log_prob(q, X[:50]), rtol=1e-10)
    # sample mean within 5 standard errors
    se = np.sqrt(np.diag(B.to_numpy(model.cov(p))) / len(X))
    assert np.all(np.abs(X.mean(0) - B.to_numpy(model.mean(p))) < 5 * se)


def test_fit_matches_scipy_on_the_concave_log_likelihood(model):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((60, model.d)) @ rng.standard_normal((model.d, model.d)) + rng.standard_normal(model.d)
    p = model.fit(X)
    S = np.cov(X.T, bias=True)
    P = model.precision_pattern
    # properties of the MLE: covariance = sample covariance on the pattern, precision zero off it
    np.testing.assert_allclose(B.to_numpy(model.cov(p))[P], S[P], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(B.to_numpy(model.mean(p)), X.mean(0), rtol=1e-12)
    free = model.free

    def negloglik(lam):
        L = free.sym(lam)
        if np.linalg.eigvalsh(L).min() <= 0:   # outside the cone: BFGS's line search backtracks
            return np.inf, np.zeros_like(lam)
        logdet = np.linalg.slogdet(L)[1]
        # d/d lam_a of -(logdet - tr(S L)) with dL/dlam_a = E_a (one entry on the diagonal, two off it)
        grad = -(free.take(np.linalg.inv(L)) - free.take(S)) * np.where(free.i == free.j, 1.0, 2.0)
        return -(logdet - np.sum(S * L)), grad

    res = minimize(negloglik, free.take(np.diag(1 / np.diag(S))), jac=True, method="BFGS",
                   options={"gtol": 1e-12, "maxiter": 5000})
    np.testing.assert_allclose(B.to_numpy(model.precision(p))[P], free.sym(res.x)[P], rtol=1e-5, atol=1e-7)
    assert model.log_likelihood(p, X) >= model.log_likelihood(model.from_chart(
        np.concatenate([X.mean(0), res.x]), "standard"), X) - 1e-10


def test_fit_on_a_decomposable_graph_has_lauritzens_closed_form():
    # chain cliques {0,1}, {1,2}, {2,3}, separators {1}, {2}: Lambda = sum [S_C^-1]^0 - sum [S_sep^-1]^0
    rng = np.random.default_rng(11)
    X = rng.standard_normal((40, 4)) @ rng.standard_normal((4, 4))
    S = np.cov(X.T, bias=True)
    ref = np.zeros((4, 4))
    for C in ([0, 1], [1, 2], [2, 3]):
        ref[np.ix_(C, C)] += np.linalg.inv(S[np.ix_(C, C)])
    for sep in (1, 2):
        ref[sep, sep] -= 1 / S[sep, sep]
    L = covariance_selection(S, CHAIN)
    np.testing.assert_allclose(L, ref, rtol=1e-10)
    np.testing.assert_allclose(B.to_numpy(Gaussian_(CHAIN).precision(Gaussian_(CHAIN).fit(X))), ref, rtol=1e-10)


def test_warm_start_gives_the_same_selection_in_fewer_steps():
    rng = np.random.default_rng(4)
    d = 12
    band = np.abs(np.subtract.outer(np.arange(d), np.arange(d))) <= 1
    S = np.cov(rng.standard_normal((60, d)).T)
    L0 = covariance_selection(S, band)
    S2 = S + 1e-3 * np.cov(rng.standard_normal((60, d)).T)
    cold, info_cold = covariance_selection(S2, band, return_info=True)
    warm, info_warm = covariance_selection(S2, band, start=L0, return_info=True)
    np.testing.assert_allclose(warm, cold, rtol=1e-10, atol=1e-13)
    assert info_warm["nit"] < info_cold["nit"]
    # a start that is not positive definite is ignored
    np.testing.assert_allclose(covariance_selection(S2, band, start=-np.eye(d)), cold, rtol=1e-10, atol=1e-13)


def test_full_pattern_is_the_full_gaussian_mle():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 3))
    G = ig.Gaussian(3, precision_pattern=np.ones((3, 3), bool))
    np.testing.assert_allclose(B.to_numpy(G.cov(G.fit(X))), np.cov(X.T, bias=True), rtol=1e-10)


def test_covariance_selection_is_scale_invariant_and_weighted_fit():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((50, 4))
    S = np.cov(X.T, bias=True)
    D = np.diag([1e-6, 1.0, 1e4, 3.0])
    np.testing.assert_allclose(covariance_selection(D @ S @ D, CYCLE),
                               np.linalg.inv(D) @ covariance_selection(S, CYCLE) @ np.linalg.inv(D), rtol=1e-8)
    G = Gaussian_(CYCLE)
    w = rng.uniform(0, 2, len(X))
    doubled = G.fit(np.concatenate([X, X[:10]]))
    ww = np.ones(len(X))
    ww[:10] = 2
    np.testing.assert_allclose(G.fit(X, weights=ww), doubled, rtol=1e-9)
    with pytest.raises(ValueError, match="weights"):
        G.fit(X, weights=-w)


def test_validation_errors():
    with pytest.raises(ValueError, match="symmetric"):
        ig.Gaussian(2, precision_pattern=np.array([[1, 1], [0, 1]], bool))
    with pytest.raises(ValueError, match="diagonal"):
        ig.Gaussian(2, precision_pattern=np.array([[1, 0], [0, 0]], bool))
    with pytest.raises(ValueError, match="shape"):
        ig.Gaussian(3, precision_pattern=np.ones((2, 2), bool))
    with pytest.raises(TypeError, match="boolean"):
        ig.Gaussian(2, precision_pattern=np.full((2, 2), 0.5))
    G = Gaussian_(CHAIN)
    with pytest.raises(ValueError, match="off the pattern"):
        G.point(mean=np.zeros(4), cov=np.eye(4) + 0.3)
    with pytest.raises(ValueError, match="off the pattern"):
        G.point(precision=np.eye(4) + 0.1)
    with pytest.raises(ValueError, match="not symmetric positive definite"):
        G.point(precision=np.diag([1.0, -1, 1, 1]))
    with pytest.raises(ValueError, match="completion"):   # a free edge with |correlation| > 1
        covariance_selection(np.array([[1.0, 2, 0], [2, 1, 0], [0, 0, 1]]), np.ones((3, 3), bool))
    with pytest.raises(ValueError, match="does not exist"):   # fewer observations than dimensions
        G.fit(np.random.default_rng(0).standard_normal((2, 4)))
    rng = np.random.default_rng(1)
    S = np.cov(rng.standard_normal((20, 4)).T)
    with pytest.raises(BudgetExceededError, match="covariance selection"):
        covariance_selection(S, CYCLE, budget=Budget(max_iter=1))


def test_no_completion_on_a_cycle_is_refused():
    # correlations 0.9, 0.9, 0.9 around three edges and -0.9 on the fourth: locally fine, no PD completion
    S = np.eye(4)
    for (i, j), r in zip([(0, 1), (1, 2), (2, 3), (0, 3)], [0.9, 0.9, 0.9, -0.9]):
        S[i, j] = S[j, i] = r
    with pytest.raises((ValueError, BudgetExceededError)):
        covariance_selection(S, CYCLE)


def test_project_is_the_m_projection():
    G = Gaussian_(CYCLE)
    full = ig.Gaussian(4)
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 4))
    mu, S = rng.standard_normal(4), A @ A.T + np.eye(4)
    p = G.project(mu, S)
    f = full.point(mean=mu, cov=S)
    kl0 = full.kl(f, full.point(mean=G.mean(p), cov=G.cov(p)))
    for k in range(5):   # any other point of the model is farther in KL(f || .)
        q = G.random_point(k)
        assert kl0 < full.kl(f, full.point(mean=G.mean(q), cov=G.cov(q)))


def test_torch_in_the_natural_chart():
    torch = pytest.importorskip("torch")
    G = Gaussian_(CHAIN).in_chart("natural")
    th = G.random_point(0)
    t = torch.tensor(th, dtype=torch.float64, requires_grad=True)
    np.testing.assert_allclose(G.fisher(t).detach().numpy(), G.fisher(th), rtol=1e-12)
    kl = G.kl(t, G.random_point(1))
    kl.backward()
    assert t.grad is not None and torch.isfinite(t.grad).all()
    with pytest.raises(TypeError, match="numpy"):
        Gaussian_(CHAIN).in_chart("mean").to_natural(torch.tensor(B.to_numpy(G.moments(th))))

"""Conformance suite run on every file in manifolds/, plus the public hooks they are written with."""
import numpy as np
import pytest
import scipy.stats as st
from scipy.special import digamma, multigammaln

import infogeo as ig
from infogeo import backend as B
from infogeo.contrib import available_manifolds
from infogeo.geometry.metric import Metric
from infogeo.statistical import Chart, ClosedGeodesics

NAMES = available_manifolds()


def test_the_contributed_families_are_found():
    assert {"beta", "dirichlet", "gamma", "poisson", "exponential", "von_mises", "wishart",
            "multinomial"} <= set(NAMES)
    with pytest.raises(LookupError, match="available"):
        ig.load_manifold("no_such_family")


@pytest.fixture(params=NAMES)
def family(request):
    return ig.load_manifold(request.param)


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=float)


def _short_step(M, x, length, seed):
    """A tangent vector at x of Fisher length ``length`` in a random direction."""
    v = M.vector(x, B.array(np.random.default_rng(seed).standard_normal(M.dim)))
    return v * (length / float(M.metric.norm(v)))


def test_metric_is_spd_and_fisher_is_hessian_of_psi_and_of_kl(family):
    for x in [family.random_point(rng=k) for k in range(2)]:
        G = _np(family.metric.matrix(x))          # the closed form declared by the standard chart
        np.testing.assert_allclose(G, G.T, atol=1e-12)
        assert np.linalg.eigvalsh(G).min() > 0
        # Fisher in the natural chart = Hessian of psi (autodiff), pulled back by the chart Jacobian
        H = _np(B.hessian(family.log_partition, family.to_natural(x)))
        J = _np(B.jacobian(family.to_natural, x))
        np.testing.assert_allclose(J.T @ H @ J, G, rtol=1e-8, atol=1e-10)
        # Fisher = Hessian of q -> KL(p || q) at q = p, in the current chart
        K = _np(B.hessian(lambda q: family.kl(x, q), x))
        np.testing.assert_allclose(K, G, rtol=1e-7, atol=1e-10)


def test_exp_log_round_trip(family):
    x = family.random_point(rng=0)
    v = _short_step(family, x, 0.3, seed=1)   # a short geodesic keeps the generic ODE solves cheap
    y = family.exp(x, v)
    np.testing.assert_allclose(_np(family.log(x, y).components), _np(v.components), rtol=1e-6, atol=1e-9)
    assert float(family.dist(x, y)) == pytest.approx(0.3, rel=1e-7)


def test_distance_is_symmetric_and_satisfies_the_triangle_inequality(family):
    x = family.random_point(rng=2)
    y = family.exp(x, _short_step(family, x, 0.25, seed=3))
    z = family.exp(x, _short_step(family, x, 0.2, seed=4))
    dxz = 0.2   # a short geodesic is minimising: its length is the distance (checked by the round trip)
    dxy, dyx, dyz = float(family.dist(x, y)), float(family.dist(y, x)), float(family.dist(y, z))
    assert dxy == pytest.approx(dyx, rel=1e-7) and dxy == pytest.approx(0.25, rel=1e-7)
    assert dxz <= dxy + dyz + 1e-9 and dxy <= dxz + dyz + 1e-9 and dyz <= dxy + dxz + 1e-9
    assert dyz > 0


# ----------------------------------------------------------------------------- scipy references
def _quad_mean(dist, fns):
    return np.array([dist.expect(f) for f in fns])


def _reference(name, M, x):
    """(scipy log-density of observations, E[t(x)] computed by scipy quadrature / closed moments)."""
    p = M.parameters(x)
    if name == "beta":
        d = st.beta(p["alpha"], p["beta"])
        return d.logpdf, _quad_mean(d, [np.log, lambda u: np.log1p(-u)])
    if name == "gamma":
        d = st.gamma(p["shape"], scale=1 / p["rate"])
        return d.logpdf, _quad_mean(d, [np.log, lambda u: u])
    if name == "exponential":
        d = st.expon(scale=1 / p["rate"])
        return d.logpdf, np.array([d.mean()])
    if name == "poisson":
        d = st.poisson(p["rate"])
        return d.logpmf, np.array([d.mean()])
    if name == "von_mises":
        d = st.vonmises(p["concentration"], loc=p["loc"])
        return d.logpdf, _quad_mean(d, [np.cos, np.sin])
    if name == "dirichlet":
        a = p["concentration"]
        # each coordinate is Beta(a_i, sum(a) - a_i): E[log x_i] by quadrature on the marginal
        means = [st.beta(ai, a.sum() - ai).expect(np.log) for ai in a]
        return (lambda X: np.array([st.dirichlet(a).logpdf(row) for row in X])), np.array(means)
    if name == "multinomial":
        d = st.multinomial(M.n, p["probs"])
        return d.logpmf, d.mean()[:-1]
    if name == "wishart":
        nu, V = p["df"], p["scale"]
        k = V.shape[0]
        d = st.wishart(df=nu, scale=V)
        # Bartlett: |X| = |V| prod_i chi2(nu - i), so E log|X| = log|V| + sum_i E log chi2(nu - i)
        elog = np.linalg.slogdet(V)[1] + sum(st.chi2(nu - i).expect(np.log) for i in range(k))
        iu = np.triu_indices(k)
        EX = d.mean()
        return (lambda X: np.array([d.logpdf(Xi) for Xi in X])), \
            np.concatenate([[elog], EX[iu] * np.where(iu[0] == iu[1], 1.0, 2.0)])
    raise AssertionError(f"no scipy reference for the contributed family {name!r}: add one here")


def test_log_density_and_moments_match_scipy(family):
    name = next(n for n in NAMES if ig.load_manifold(n).name == family.name)
    x = family.random_point(rng=5)
    logpdf, mean_t = _reference(name, family, x)
    obs = family.sample(x, 5, rng=6)
    np.testing.assert_allclose(_np(family.log_prob(x, obs)), logpdf(obs), rtol=1e-9, atol=1e-9)
    # moments: eta = grad psi (autodiff) = E[t(x)]
    np.testing.assert_allclose(_np(family.moments(family.to_natural(x))), mean_t, rtol=1e-7, atol=1e-9)


def test_distance_agrees_with_geomstats(family):
    """Beta, Dirichlet and Gamma need geomstats' BVP solver tightened (interop default) to reach 1e-6."""
    pytest.importorskip("geomstats")
    from infogeo.interop import geomstats as igs
    x = family.random_point(rng=7)
    y = family.exp(x, _short_step(family, x, 0.5, seed=8))
    try:
        space = igs.geomstats_space(family)
    except NotImplementedError:
        pytest.skip(f"geomstats has no {family.name} family")
    theirs = float(space.metric.dist(igs.to_geomstats(family, x), igs.to_geomstats(family, y)))
    assert float(family.dist(x, y)) == pytest.approx(theirs, rel=1e-9)


# ----------------------------------------------------------------------------- named parameters, closed forms
def test_named_parameters():
    assert ig.load_manifold("beta").point(alpha=1.0, beta=1.0).tolist() == [1.0, 1.0]
    assert ig.load_manifold("dirichlet").point(concentration=[1, 2, 3]).tolist() == [1.0, 2.0, 3.0]
    P = ig.load_manifold("poisson")
    x, y = P.point(rate=2.0), P.point(rate=4.0)
    assert float(P.dist(x, y)) == pytest.approx(2 * (2 - np.sqrt(2)), rel=1e-12)   # 2|sqrt(l1) - sqrt(l2)|
    G = ig.load_manifold("gamma")
    assert G.parameters(G.point(shape=2.0, rate=3.0)) == {"shape": 2.0, "rate": 3.0}
    assert G.in_chart("natural").point(shape=2.0, rate=3.0).tolist() == [2.0, -3.0]
    V = ig.load_manifold("von_mises")
    assert V.parameters(V.point(loc=0.5, concentration=2.0)) == pytest.approx({"loc": 0.5, "concentration": 2.0})
    W = ig.load_manifold("wishart", p=3)
    S = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])
    pw = W.parameters(W.point(df=5.0, scale=S))
    assert pw["df"] == 5.0 and np.allclose(pw["scale"], S) and W.dim == 7
    Mn = ig.load_manifold("multinomial", k=4, n=7)
    assert np.allclose(Mn.parameters(Mn.point(probs=[0.1, 0.2, 0.3, 0.4]))["probs"], [0.1, 0.2, 0.3, 0.4])
    for bad in [lambda: ig.load_manifold("beta").point(alpha=-1.0, beta=1.0),
                lambda: ig.load_manifold("beta").point(alpha=1.0),
                lambda: ig.load_manifold("dirichlet").point(concentration=[1, 2]),
                lambda: ig.load_manifold("exponential").point(rate=0.0),
                lambda: ig.load_manifold("von_mises").point(loc=0.0, concentration=-1.0),
                lambda: W.point(df=1.5, scale=S),
                lambda: W.point(df=5.0, scale=-S),
                lambda: Mn.point(probs=[0.5, 0.5, 0.5, -0.5])]:
        with pytest.raises(ValueError):
            bad()


def test_closed_form_geodesics_match_the_generic_ode_geodesics():
    for name, kw in [("poisson", {"rate": 2.0}), ("exponential", {"rate": 2.0}),
                     ("multinomial", {"probs": [0.2, 0.3, 0.5]})]:
        M = ig.load_manifold(name)
        x = M.point(**kw)
        v = _short_step(M, x, 0.5, seed=9)
        y = M.exp(x, v)
        np.testing.assert_allclose(_np(y), _np(Metric.exp(M.metric, x, v.components)), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(_np(M.log(x, y).components), _np(v.components), rtol=1e-9, atol=1e-12)
        assert float(M.dist(x, y)) == pytest.approx(0.5, rel=1e-10)
    E = ig.load_manifold("exponential")
    assert float(E.dist(E.point(rate=2.0), E.point(rate=5.0))) == pytest.approx(np.log(2.5), rel=1e-14)
    np.testing.assert_allclose(_np(E.metric.matrix(E.point(rate=2.0))), [[0.25]])   # 1 / lambda^2
    with pytest.raises(ValueError, match="rate 0"):
        P = ig.load_manifold("poisson")
        P.exp(P.point(rate=1.0), P.vector(P.point(rate=1.0), B.array([-3.0])))


def test_von_mises_fisher_is_diag_kappa_a_and_a_prime():
    from scipy.special import i0e, i1e
    V = ig.load_manifold("von_mises")
    k = 1.7
    a = i1e(k) / i0e(k)
    G = _np(V.metric.matrix(V.point(loc=0.4, concentration=k)))
    np.testing.assert_allclose(G, np.diag([k * a, 1 - a / k - a * a]), rtol=1e-12, atol=1e-15)
    # the variance of cos(x - mu) by quadrature is A'(kappa)
    d = st.vonmises(k, loc=0.4)
    var = d.expect(lambda u: np.cos(u - 0.4) ** 2) - d.expect(lambda u: np.cos(u - 0.4)) ** 2
    assert G[1, 1] == pytest.approx(var, rel=1e-8)


def test_wishart_log_partition_is_the_normaliser():
    """psi(theta) = log Gamma_p(nu/2) + (nu/2) log|2V| from the density's normalising constant."""
    W = ig.load_manifold("wishart")
    x = W.random_point(rng=3)
    p = W.parameters(x)
    nu, V = p["df"], p["scale"]
    expected = multigammaln(nu / 2, 2) + nu / 2 * np.linalg.slogdet(2 * V)[1]
    assert float(W.log_partition(W.to_natural(x))) == pytest.approx(expected, rel=1e-12)
    # E[log|X|] = psi_p(nu/2) + p log 2 + log|V| (multivariate digamma)
    eta = _np(W.moments(W.to_natural(x)))
    assert eta[0] == pytest.approx(sum(digamma((nu - i) / 2) for i in range(2)) + 2 * np.log(2)
                                   + np.linalg.slogdet(V)[1], rel=1e-10)


# ----------------------------------------------------------------------------- the public hooks
def _rate_family(**kw):
    """Poisson prototyped from scratch with the public hooks, as a user would."""
    def check(s):
        if not float(B.to_numpy(s)[0]) > 0:
            raise ValueError("rate must be positive")
    args = dict(sufficient_statistics=lambda x: np.asarray(x, float).reshape(-1, 1),
                log_partition=lambda th: B.exp(th[0]), dim=1,
                standard_chart=Chart("standard", B.log, B.exp, check, "rate > 0", parameters={"rate": ()}))
    args.update(kw)
    return ig.ExponentialFamily(**args)


def test_standard_chart_hook_without_closed_forms_falls_back_to_autodiff():
    P = _rate_family()
    x = P.point(rate=4.0)
    assert P.parameters(x) == {"rate": 4.0}
    np.testing.assert_allclose(_np(P.fisher(x)), [[0.25]], rtol=1e-12)    # 1 / lambda by autodiff
    np.testing.assert_allclose(_np(P.in_chart("natural").point(rate=4.0)), [np.log(4.0)])
    assert float(P.dist(x, P.point(rate=9.0))) == pytest.approx(2.0, rel=1e-8)   # generic ODE log
    with pytest.raises(ValueError, match="takes the parameters"):
        P.point(lam=4.0)
    with pytest.raises(ValueError, match="exactly one"):
        P.point([4.0], rate=4.0)
    with pytest.raises(ValueError, match="rate must be positive"):
        P.point(rate=-1.0)


def test_hooks_reject_inconsistent_declarations():
    with pytest.raises(ValueError, match="expected dim = 1"):
        _rate_family(standard_chart=Chart("standard", B.log, B.exp, parameters={"rate": (2,)}))
    with pytest.raises(ValueError, match="chart 'polar'"):
        _rate_family(geodesics=ClosedGeodesics("polar", exp=None, log=None))
    with pytest.raises(TypeError, match="Chart"):
        _rate_family(standard_chart=(B.log, B.exp))
    with pytest.raises(ValueError, match="declares no parameter names"):
        ig.ExponentialFamily(lambda x: x, lambda th: B.exp(th[0]), dim=1).parameters(np.array([0.0]))


def test_named_points_do_not_alias_caller_arrays():
    D = ig.load_manifold("dirichlet")
    a = np.array([1.0, 2.0, 3.0])
    x = D.point(concentration=a)
    x[0] = 10.0
    assert a[0] == 1.0
    conc = D.parameters(D.point(concentration=a))["concentration"]
    conc[0] = 7.0
    assert a[0] == 1.0

"""Closed-form geodesics in every chart against an integration that shares no code with infogeo's geodesics:
Christoffel symbols by central differences of the metric matrix (itself checked against the textbook KL in
``test_reference_fisher``), the geodesic equation integrated by scipy's DOP853; and the metric-space axioms
on random triples."""
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from infogeo import backend as B

from .test_reference_fisher import family

CLOSED = ["gauss1", "diag2", "gauss2", "gauss3", "fixed2", "zeromean2", "bernoulli", "categorical3",
          "independence2", "poisson", "exponential", "multinomial"]


def _np(a):
    return np.asarray(B.to_numpy(a), dtype=float)


def _christoffel_fd(G_of, x, h=1e-5):
    """Gamma[k, i, j] = 1/2 G^{kl} (d_i G_lj + d_j G_li - d_l G_ij), derivatives by central differences."""
    n = len(x)
    dG = np.zeros((n, n, n))                         # dG[i] = d_i G
    for i in range(n):
        e = np.zeros(n)
        e[i] = h * max(1.0, abs(x[i]))
        dG[i] = (G_of(x + e) - G_of(x - e)) / (2 * e[i])
    first = 0.5 * (np.einsum("ilj->lij", dG) + np.einsum("jli->lij", dG) - dG)
    return np.einsum("kl,lij->kij", np.linalg.inv(G_of(x)), first)


def _exp_by_ode(G_of, x, v):
    n = len(x)

    def rhs(_, y):
        pos, vel = y[:n], y[n:]
        return np.concatenate([vel, -np.einsum("kij,i,j->k", _christoffel_fd(G_of, pos), vel, vel)])
    sol = solve_ivp(rhs, (0.0, 1.0), np.concatenate([x, v]), method="DOP853", rtol=1e-11, atol=1e-12)
    assert sol.success
    return sol.y[:n, -1], sol.y[n:, -1]


def _cases():
    for name in CLOSED:
        for chart in family(name).charts:
            # a contributed family's mean chart inverts the moment map by Newton's method at every metric call
            newton = chart == "mean" and name in ("poisson", "exponential", "multinomial")
            yield pytest.param(name, chart, marks=pytest.mark.slow) if newton else (name, chart)


@pytest.mark.parametrize("name, chart", list(_cases()))
def test_closed_form_exp_solves_the_geodesic_equation_in_every_chart(name, chart):
    M = family(name).in_chart(chart)
    rng = np.random.default_rng(5)
    x, y = _np(M.random_point(rng)), _np(M.random_point(rng))
    v = _np(M.log(x, y).components)
    v *= min(1.0, 0.8 / float(M.metric.norm(M.vector(x, v))))        # Fisher length <= 0.8
    G_of = lambda z: _np(M.metric.matrix(z))  # noqa: E731
    end, velocity = _exp_by_ode(G_of, x, v)
    np.testing.assert_allclose(_np(M.exp(x, M.vector(x, v))), end, rtol=1e-7, atol=1e-9, err_msg=f"{name}, {chart}")
    # the geodesic has constant speed, and the distance to its end is its length (short: minimising)
    speed2 = float(v @ G_of(x) @ v)
    assert float(velocity @ G_of(end) @ velocity) == pytest.approx(speed2, rel=1e-7)
    assert float(M.dist(x, end)) == pytest.approx(np.sqrt(speed2), rel=1e-7)
    np.testing.assert_allclose(_np(M.log(x, end).components), v, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", CLOSED)
def test_distance_is_a_metric_on_random_triples(name):
    M = family(name)
    rng = np.random.default_rng(17)
    for _ in range(4):
        a, b, c = (_np(M.random_point(rng)) for _ in range(3))
        dab, dbc, dac = (float(M.dist(p, q)) for p, q in ((a, b), (b, c), (a, c)))
        assert dab > 0 and float(M.dist(b, a)) == pytest.approx(dab, rel=1e-9)
        assert dac <= dab + dbc + 1e-9 and dab <= dac + dbc + 1e-9 and dbc <= dab + dac + 1e-9
        assert float(M.dist(a, a)) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("d", [2, 3])
def test_full_gaussian_exp_solves_skovgaards_geodesic_equations_for_long_velocities(d):
    """mu'' = S' S^{-1} mu',  S'' = S' S^{-1} S' - mu' mu'^T (Skovgaard 1984), integrated by scipy, against the
    closed form stepped along geodesics of Fisher length up to 10."""
    G = family("gauss2" if d == 2 else "gauss3")
    iu = np.triu_indices(d)

    def sym(v):
        S = np.zeros((d, d))
        S[iu] = v
        return S + np.triu(S, 1).T

    def rhs(_, y):
        dmu, S, dS = y[d + d * d:2 * d + d * d], y[d:d + d * d].reshape(d, d), y[2 * d + d * d:].reshape(d, d)
        Si_dmu, Si_dS = np.linalg.solve(S, dmu), np.linalg.solve(S, dS)
        return np.concatenate([dmu, dS.ravel(), dS @ Si_dmu, (dS @ Si_dS - np.outer(dmu, dmu)).ravel()])

    rng = np.random.default_rng(d)
    for length in (0.5, 4.0, 10.0):
        A = rng.standard_normal((d, d))
        m0, S0 = rng.standard_normal(d), A @ A.T + 0.5 * np.eye(d)
        x = G.point(mean=m0, cov=S0)
        v = rng.standard_normal(G.dim)
        v *= length / float(G.metric.norm(G.vector(x, v)))
        sol = solve_ivp(rhs, (0.0, 1.0), np.concatenate([m0, S0.ravel(), v[:d], sym(v[d:]).ravel()]),
                        method="DOP853", rtol=1e-12, atol=1e-13)
        end = np.concatenate([sol.y[:d, -1], sol.y[d:d + d * d, -1].reshape(d, d)[iu]])
        np.testing.assert_allclose(_np(G.exp(x, G.vector(x, v))), end, rtol=0, atol=1e-10 * np.abs(end).max())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["von_mises", "wishart", "dirichlet"])
def test_generic_geodesics_do_not_depend_on_the_chart(name):
    """Families without closed forms (ODE geodesics of the autodiff metric): exp in the natural chart of the
    pushed-forward velocity is the natural coordinates of exp in the standard chart (a nonlinear chart change
    for von Mises and Wishart), and log recovers the velocity."""
    M = family(name)
    N = M.in_chart("natural")
    x = _np(M.random_point(np.random.default_rng(6)))
    u = np.random.default_rng(7).standard_normal(M.dim)
    v = M.vector(x, u * (0.3 / float(M.metric.norm(M.vector(x, u)))))
    w = M.push_forward(v, "natural")
    end_nat = _np(N.exp(w.base, w))
    np.testing.assert_allclose(end_nat, _np(M.to_chart(M.exp(x, v), "natural")), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(_np(N.log(w.base, end_nat).components), _np(w.components), rtol=1e-7, atol=1e-9)

"""Stochastic-relaxation examples: gaussian_flows.py (E[f] in closed form, flows vs facts derived by hand) and kl_balls.py.

The flow facts below are derived independently of the example's code (which only integrates
``(dF)^sharp`` with the library's metrics):

* f = bx + ax^2 (a = -3, b = 1, maximiser m = 1/6), F(mu, sigma) = b mu + a (mu^2 + sigma^2), Fisher
  diag(1, 2) / sigma^2 in (mu, sigma).  Vanilla: mu' = 2a(mu - m), sigma' = 2a sigma, so
  sigma = sigma0 e^{2at} and (mu - m) / sigma is constant (straight lines to (m, 0)).  Natural:
  mu' = 2a sigma^2 (mu - m), sigma' = a sigma^3, so 1/sigma^2 = 1/sigma0^2 - 2at and
  (mu - m) / sigma^2 is constant (parabolas).
* f = b^T x + x^T A x on R^2, F = f(mu) + tr(A Sigma): with Sigma0 fixed, vanilla mu' = 2A(mu - m),
  natural (Fisher Sigma0^{-1}) mu' = 2 Sigma0 A (mu - m), linear ODEs solved by expm.  Full family,
  Fisher block-diag(Sigma^{-1}, 1/2 tr(Sigma^{-1} . Sigma^{-1} .)): mu' = Sigma grad f(mu),
  Sigma' = 2 Sigma A Sigma, so Sigma^{-1}(t) = Sigma0^{-1} - 2At and Sigma^{-1}(mu - m) is constant.
* f = 6x + 8x^2 - x^3 - 2x^4 has f' = (x^2 - 2)(-8x - 3): local maxima at -sqrt(2) and +sqrt(2) (global).
"""
import math
from pathlib import Path

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.linalg import expm

from .test_examples import load

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def flows():
    return load("gaussian_flows")


@pytest.fixture(scope="module")
def res(flows, tmp_path_factory):
    return flows.main(["--quick", "--out", str(tmp_path_factory.mktemp("gaussian_flows"))])


def test_writes_the_three_figures(res):
    assert [Path(f).name for f in res["figures"]] == [
        "gaussian_flows_quadratic.png", "gaussian_flows_quartic.png", "gaussian_flows_2d.png"]
    for f in res["figures"]:
        assert Path(f).stat().st_size > 10_000


@pytest.mark.parametrize("coeffs", [(0.0, 1.0, -3.0), (0.0, 6.0, 8.0, -1.0, -2.0), (2.0, -1.0, 0.5, 3.0, 0.0, 1.0)])
def test_expected_polynomial_matches_quadrature_and_monte_carlo(flows, coeffs):
    z, w = hermegauss(12)            # exact for polynomials of degree <= 23
    w = w / w.sum()
    rng = np.random.default_rng(0)
    for mu, sigma in [(0.0, 1.0), (0.7, 0.3), (-1.3, 2.1)]:
        closed = flows.expected_polynomial(coeffs, mu, sigma)
        quad = np.polynomial.polynomial.polyval(mu + sigma * z, coeffs) @ w
        assert closed == pytest.approx(quad, rel=1e-12, abs=1e-12)
        fx = np.polynomial.polynomial.polyval(mu + sigma * rng.standard_normal(200_000), coeffs)
        assert abs(closed - fx.mean()) < 5 * fx.std() / math.sqrt(fx.size)
    # elementwise on a grid, as the level lines use it
    grid = flows.expected_polynomial(coeffs, np.array([0.0, 0.7]), np.array([1.0, 0.3]))
    assert grid == pytest.approx([flows.expected_polynomial(coeffs, 0.0, 1.0),
                                  flows.expected_polynomial(coeffs, 0.7, 0.3)])


def test_expected_quadratic_matches_quadrature_and_monte_carlo(flows):
    mu, S = np.array([0.4, -1.2]), flows.SIGMA0
    closed = float(flows.expected_quadratic(flows.B2, flows.A2, mu, S))
    z, w = hermegauss(4)
    Z = np.stack(np.meshgrid(z, z), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel() / np.outer(w, w).sum()
    X = mu + Z @ np.linalg.cholesky(S).T
    f = lambda X: X @ flows.B2 + np.einsum("ni,ij,nj->n", X, flows.A2, X)  # noqa: E731
    assert closed == pytest.approx(f(X) @ W, rel=1e-12)
    fx = f(np.random.default_rng(1).multivariate_normal(mu, S, size=200_000))
    assert abs(closed - fx.mean()) < 5 * fx.std() / math.sqrt(fx.size)
    assert flows.quadratic_maximiser(flows.B2, flows.A2) == pytest.approx([0.0, 0.5])


def test_univariate_quadratic_flows_are_lines_and_parabolas(res):
    m, a = 1 / 6, -3.0
    for start, run in zip(res["starts"]["quadratic"], res["flows"]["quadratic"]["vanilla"]):
        t, (mu, sigma) = run["t"], run["x"].T
        assert sigma == pytest.approx(start[1] * np.exp(2 * a * t), rel=1e-5)
        assert (mu - m) / sigma == pytest.approx(np.full_like(mu, (start[0] - m) / start[1]), rel=1e-5)
    for start, run in zip(res["starts"]["quadratic"], res["flows"]["quadratic"]["natural"]):
        t, (mu, sigma) = run["t"], run["x"].T
        assert 1 / sigma ** 2 == pytest.approx(1 / start[1] ** 2 - 2 * a * t, rel=1e-5)
        assert (mu - m) / sigma ** 2 == pytest.approx(np.full_like(mu, (start[0] - m) / start[1] ** 2), rel=1e-5)
        assert sigma[-1] == pytest.approx(0.02) and t[-1] > 100   # sigma -> 0 only like 1/sqrt(t)


def test_quartic_natural_flow_reaches_the_global_maximum_where_vanilla_gets_stuck(res):
    assert sorted(res["quartic_maximisers"]) == pytest.approx([-math.sqrt(2), math.sqrt(2)])
    starts = res["starts"]["quartic"]
    k = starts.index((-1.0, 0.8))
    ends = res["end_points"]["quartic"]
    assert ends["vanilla"][k][0] == pytest.approx(-math.sqrt(2), abs=0.05)
    assert ends["natural"][k][0] == pytest.approx(math.sqrt(2), abs=0.05)
    for name in ("vanilla", "natural"):   # every flow ends near one of the two maxima with sigma at the floor
        for end in ends[name]:
            assert min(abs(end[0] - math.sqrt(2)), abs(end[0] + math.sqrt(2))) < 0.05
            assert end[1] == pytest.approx(0.02)


def test_2d_flows_match_the_linear_closed_forms(flows, res):
    A, S0 = flows.A2, flows.SIGMA0
    m = np.array([0.0, 0.5])
    runs = res["flows"]["2d"]
    for k, start in enumerate(res["starts"]["2d"]):
        d0 = np.asarray(start) - m
        for name, K in (("vanilla", 2 * A), ("natural", 2 * S0 @ A)):
            t = np.linspace(0, runs[name][k]["t"][-1], 9)
            exact = np.array([m + expm(K * ti) @ d0 for ti in t])
            assert runs[name][k]["sol"](t).T == pytest.approx(exact, abs=1e-6)
        # full family: points (mu1, mu2, S11, S12, S22)
        run = runs["natural (full covariance)"][k]
        c0 = np.linalg.solve(S0, d0)
        for t, p in zip(run["t"], run["x"]):
            S = np.array([[p[2], p[3]], [p[3], p[4]]])
            P = np.linalg.inv(S)
            assert P == pytest.approx(np.linalg.inv(S0) - 2 * A * t, rel=1e-5)
            assert P @ (p[:2] - m) == pytest.approx(c0, rel=1e-5, abs=1e-6)
    # the natural flow with Sigma0 fixed is not the vanilla flow: the two paths part
    gap = np.abs(runs["natural"][0]["sol"](0.2) - runs["vanilla"][0]["sol"](0.2)).max()
    assert gap > 0.1


def test_monte_carlo_natural_gradient_follows_the_natural_flow(res):
    mc, h = res["mc_path"], res["mc_step"]
    t = h * np.arange(len(mc))
    natural = res["flows"]["quadratic"]["natural"][0]["sol"](t).T
    gap_natural = np.abs(mc - natural).max()
    assert gap_natural == pytest.approx(res["mc_gap"]) and gap_natural < 0.05
    vanilla_run = res["flows"]["quadratic"]["vanilla"][0]
    inside = t <= vanilla_run["t"][-1]
    gap_vanilla = np.abs(mc[inside] - vanilla_run["sol"](t[inside]).T).max()
    assert gap_vanilla > 10 * gap_natural


def test_natural_flow_is_the_same_in_every_chart(res):
    assert res["chart_gap_natural"] < 1e-5
    assert res["chart_gap_vanilla"] > 0.1


# ----------------------------------------------------------------------------- examples/kl_balls.py
def seed_kl(p, q):
    """Closed form (e.g. Amari 2016): KL(p0 || p1) = log(s1 / s0) + (s0^2 + (m0 - m1)^2) / (2 s1^2) - 1/2, points (mu, sigma)."""
    (m0, s0), (m1, s1) = p, q
    return np.log(s1 / s0) + (s0 ** 2 + (m0 - m1) ** 2) / (2 * s1 ** 2) - 0.5


@pytest.fixture(scope="module")
def balls(tmp_path_factory):
    return load("kl_balls").main(["--quick", "--out", str(tmp_path_factory.mktemp("kl_balls"))])


def test_kl_balls_figures_and_curves_solve_the_seed_formula(balls):
    assert [Path(f).name for f in balls["figures"]] == ["kl_balls_eps0.02.png", "kl_balls_eps1.png"]
    assert all(Path(f).stat().st_size > 10_000 for f in balls["figures"])
    assert len(balls["balls"]) == len(balls["centres"])
    for ball in balls["balls"] + [balls["ball_eps1"]]:
        p, eps = ball["center"], ball["eps"]
        assert [seed_kl(p, q) for q in ball["forward"]] == pytest.approx(np.full(len(ball["forward"]), eps), rel=1e-8)
        assert [seed_kl(q, p) for q in ball["reverse"]] == pytest.approx(np.full(len(ball["reverse"]), eps), rel=1e-8)
        # metric ellipse with the textbook Fisher diag(1, 2) / sigma^2 in (mu, sigma)
        d = ball["ellipse"] - p
        assert 0.5 * (d[:, 0] ** 2 + 2 * d[:, 1] ** 2) / p[1] ** 2 == pytest.approx(np.full(len(d), eps), rel=1e-10)


def test_kl_balls_scale_with_sigma(balls):
    """x -> a + b x leaves KL unchanged: the ball around (mu, sigma) is sigma times the ball around (0, 1)."""
    unit = balls["balls"][balls["centres"].index((0.0, 1.0))]
    for ball in balls["balls"]:
        sigma = ball["center"][1]
        for key in ("r_forward", "r_reverse", "r_metric"):
            assert ball[key] == pytest.approx(sigma * unit[key], rel=1e-7)


def test_kl_ball_departs_from_the_ellipse_like_sqrt_eps(balls):
    dev = balls["deviation"]
    for kind in ("forward", "reverse"):
        values = [dev[e][kind] for e in sorted(dev)]
        assert all(a < b for a, b in zip(values, values[1:]))
        assert 0.4 < dev[0.005][kind] / dev[0.02][kind] < 0.6      # sqrt(1/4) = 0.5
    assert dev[0.02]["forward"] < 0.15 and dev[0.02]["reverse"] < 0.03
    assert dev[1.0]["forward"] > 1.0      # at eps = 1 the forward ball is more than twice the ellipse along some ray


# ----------------------------------------------------------------------------- examples/independence_flows.py
@pytest.fixture(scope="module")
def independence(tmp_path_factory):
    return load("independence_flows").main(["--quick", "--out", str(tmp_path_factory.mktemp("independence"))])


def test_independence_fields_match_the_seed_formulas(independence):
    assert [Path(f).name for f in independence["figures"]] == ["independence_mu.png", "independence_theta.png"]
    assert all(Path(f).stat().st_size > 10_000 for f in independence["figures"])
    # chart mu = P(x_i = +1): F = -4 mu1 - 2 mu2 + 12 mu1 mu2, Fisher diag(1 / (mu_i (1 - mu_i)))
    field = independence["fields"]["standard"]
    mu = field["points"]
    grad = np.column_stack([-4 + 12 * mu[:, 1], -2 + 12 * mu[:, 0]])
    assert len(mu) > 50
    assert field["vanilla"] == pytest.approx(-grad, rel=1e-9, abs=1e-12)
    assert field["natural"] == pytest.approx(-mu * (1 - mu) * grad, rel=1e-9, abs=1e-12)
    # chart theta, eta = E[x] = tanh(theta): the natural gradient is the vanilla gradient in eta,
    # grad_eta (eta1 + 2 eta2 + 3 eta1 eta2) = (1 + 3 eta2, 2 + 3 eta1); the vanilla one carries 1 - eta^2
    field = independence["fields"]["natural"]
    eta = np.tanh(field["points"])
    grad_eta = np.column_stack([1 + 3 * eta[:, 1], 2 + 3 * eta[:, 0]])
    assert field["natural"] == pytest.approx(-grad_eta, rel=1e-9, abs=1e-12)
    assert field["vanilla"] == pytest.approx(-(1 - eta ** 2) * grad_eta, rel=1e-9, abs=1e-12)


def test_independence_descent_paths_tell_the_seed_story(independence):
    runs = independence["runs"]
    # natural gradient in theta reaches the point mass on x = (+1, -1), where E[f] = -4
    assert runs["natural"]["natural"]["fun"] < -3.999
    assert runs["natural"]["natural"]["probs"] == pytest.approx([1.0, 0.0], abs=1e-3)
    # vanilla gradient in mu hits the edge mu2 = 0 far from the optimum mu1 = 1: it needs a projection
    van_mu = runs["standard"]["vanilla"]
    assert van_mu["probs"][1] < 1e-3 and van_mu["probs"][0] < 0.8 and van_mu["fun"] > -3
    # vanilla gradient in theta slows down on the plateau: after the same iterations it is behind
    assert runs["natural"]["vanilla"]["fun"] > runs["natural"]["natural"]["fun"] + 1e-2

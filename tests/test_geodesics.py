"""Generic geodesics (autodiff Christoffel symbols, ODE exp, shooting log) against closed forms."""
import numpy as np
import pytest

import infogeo as ig
from .conftest import as_backend, half_plane_dist, half_plane_metric

B = ig.backend


def half_plane():
    return ig.Manifold(2, half_plane_metric(), domain=lambda x: x[1] > 0, domain_description="y > 0")


def half_plane_exp(x, v):
    """Closed-form exp of the Poincaré half-plane (geodesics are half-circles or vertical lines)."""
    speed = np.sqrt(v[0] ** 2 + v[1] ** 2) / x[1]
    if abs(v[0]) < 1e-15:
        return np.array([x[0], x[1] * np.exp(np.sign(v[1]) * speed)])
    # circle centred on the real axis through x, tangent to v
    c = x[0] + x[1] * v[1] / v[0]
    r = np.hypot(x[0] - c, x[1])
    # parametrise by hyperbolic arclength: x(s) = c + r tanh(s + s0), y(s) = r / cosh(s + s0)
    sgn = np.sign(v[0])
    s0 = np.arctanh((x[0] - c) / r)
    s = s0 + sgn * speed
    return np.array([c + r * np.tanh(s), r / np.cosh(s)])


def test_christoffel_symbols_of_half_plane():
    x = np.array([0.4, 1.7])
    G = half_plane_metric().christoffel(x)
    y = x[1]
    expected = np.zeros((2, 2, 2))
    expected[0, 0, 1] = expected[0, 1, 0] = -1 / y
    expected[1, 0, 0] = 1 / y
    expected[1, 1, 1] = -1 / y
    np.testing.assert_allclose(G, expected, atol=1e-14)


@pytest.mark.parametrize("v", [[0.8, 0.3], [-0.5, 1.0], [0.0, -0.7]])
def test_half_plane_exp_matches_closed_form(v):
    M = half_plane()
    x = np.array([0.3, 1.2])
    got = M.exp(x, M.vector(x, np.array(v)))
    np.testing.assert_allclose(got, half_plane_exp(x, np.array(v)), atol=1e-9)


def test_half_plane_log_dist_and_round_trip(backend_name):
    M = half_plane()
    x, y = np.array([0.3, 1.0]), np.array([1.5, 0.4])
    xb, yb = as_backend(x, backend_name), as_backend(y, backend_name)
    v = M.log(xb, yb)
    np.testing.assert_allclose(B.to_numpy(M.exp(xb, v)), y, atol=1e-8)
    assert float(B.to_numpy(M.dist(xb, yb))) == pytest.approx(half_plane_dist(x, y), abs=1e-8)
    # the log's length equals the closed-form distance and its direction the closed-form exp
    np.testing.assert_allclose(half_plane_exp(x, B.to_numpy(v.components)), y, atol=1e-8)


def sphere_embedding(u):
    th, ph = u[0], u[1]
    return B.stack([B.sin(th) * B.cos(ph), B.sin(th) * B.sin(ph), B.cos(th)])


def test_sphere_pullback_geodesics_match_great_circles():
    M = ig.Manifold(2, ig.PullbackMetric(sphere_embedding, ig.EuclideanMetric(3)),
                    domain=lambda u: (u[0] > 0) & (u[0] < np.pi))
    p, q = np.array([0.9, 0.2]), np.array([1.6, 1.3])
    P, Q = B.to_numpy(sphere_embedding(p)), B.to_numpy(sphere_embedding(q))
    great_circle = np.arccos(P @ Q)
    v = M.log(p, q)  # (dist is the metric norm of the log; one shooting serves all checks)
    assert float(M.metric.norm(v)) == pytest.approx(great_circle, abs=1e-8)
    np.testing.assert_allclose(M.exp(p, v), q, atol=1e-8)
    # closed-form exp in the embedding: P cos|u| + u/|u| sin|u| with u the pushed-forward velocity
    _, u = B.jvp(sphere_embedding, p, v.components)
    n = np.linalg.norm(u)
    np.testing.assert_allclose(P * np.cos(n) + u / n * np.sin(n), Q, atol=1e-8)
    # the geodesic curve stays on the great circle through P and Q, at constant speed
    path = M.geodesic(p, v=v)
    pts = np.array([B.to_numpy(sphere_embedding(B.array(c))) for c in path(np.linspace(0, 1, 5))])
    normal = np.cross(P, Q)
    np.testing.assert_allclose(pts @ normal, 0, atol=1e-8)
    angles = np.arctan2(np.linalg.norm(np.cross(pts, P), axis=1), pts @ P)
    np.testing.assert_allclose(angles, np.linspace(0, 1, 5) * great_circle, atol=1e-8)


def test_euclidean_closed_forms():
    M = ig.Euclidean(3)
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.0, -1.0, 1.0])
    np.testing.assert_allclose(M.log(x, y).components, y - x)
    np.testing.assert_allclose(M.exp(x, M.log(x, y)), y)
    assert float(M.dist(x, y)) == pytest.approx(np.linalg.norm(y - x))
    np.testing.assert_allclose(M.geodesic(x, y)(0.5), (x + y) / 2)


def test_geodesic_argument_errors():
    M = half_plane()
    x = np.array([0.0, 1.0])
    with pytest.raises(ValueError, match="exactly one"):
        M.geodesic(x)
    with pytest.raises(ValueError, match="y > 0"):
        M.log(x, np.array([0.0, -1.0]))
    with pytest.raises(TypeError, match="sharp"):
        M.exp(x, ig.Covector(x, np.ones(2)))


def test_log_recovers_from_a_stall_caused_by_loose_integration():
    # Beta pair on which shooting once stalled at end-point error 1.35e-7: the
    # kept residual came from a looser solve than the trial steps compared to it.
    from infogeo.geometry import geodesics
    M = ig.load_manifold("beta")
    x, y = np.array([3.3129296, 4.5374621]), np.array([1.55905014, 3.58919388])
    v = geodesics.log(M.metric, x, y)
    np.testing.assert_allclose(geodesics.exp(M.metric, x, v), y, atol=1e-10)


@pytest.mark.parametrize("M, p, q", [(ig.Euclidean(2), np.zeros(2), np.ones(2)),
                                     (ig.Gaussian(1), np.array([0.0, 1.0]), np.array([1.0, 2.0]))],
                         ids=["euclidean", "gaussian"])
def test_the_time_of_a_geodesic_is_a_finite_real_number_or_array(M, p, q):
    # geodesic(p, q)('a') raised numpy's 'could not convert string to float', a complex t float()'s message,
    # t = None or NaN gave a NaN point on the Euclidean path (found by an independent fault-battery sweep)
    path = M.geodesic(p, q)
    for bad in ("a", None, [0.5, "a"], 1 + 1j, True):
        with pytest.raises(TypeError, match="geodesic's time t must be a real number"):
            path(bad)
    for bad in (np.nan, [0.5, np.inf]):
        with pytest.raises(ValueError, match="geodesic's time t must be finite"):
            path(bad)
    np.testing.assert_allclose(path([0.0, 1.0]), np.stack([p, q]), atol=1e-12)

"""``exp`` follows the geodesic inside the manifold: the simplex, a declared domain, a metric that is an inner
product all along; a path that leaves and comes back is refused, not returned."""
import numpy as np
import pytest

import infogeo as ig
from infogeo.geometry.geodesics import GeodesicError

B = ig.backend


def sqrt_coordinates_along(C, p, v, ts):
    """The great circle u(t) = cos(n t) u + sin(n t) w / n of the square roots, by its definition."""
    probs = np.append(p, 1 - p.sum())
    u = np.sqrt(probs)
    w = np.append(v, -v.sum()) / (2 * u)
    n = np.linalg.norm(w)
    return np.cos(np.outer(ts, [n])) * u + np.sin(np.outer(ts, [n])) * w / n


def test_categorical_exp_refuses_a_great_circle_that_left_the_simplex_and_came_back():
    C = ig.Categorical(3, chart="mean")
    p = np.array([0.2, 0.3])
    d = np.array([-0.2, 0.1])
    ts = np.linspace(0, 1, 200001)
    for scale in (0.5, 1.0, 2.0, 5.0, 7.0):
        u = sqrt_coordinates_along(C, p, scale * d, ts)
        left = np.any(u <= 0)
        if left:
            with pytest.raises(ValueError, match="leaves the probability simplex at t = ([0-9.]+)") as info:
                C.exp(p, C.vector(p, scale * d))
            t_exit = float(info.value.args[0].split("t = ")[1].split()[0])
            assert t_exit == pytest.approx(ts[np.argmax(np.any(u <= 0, axis=1))], abs=1e-3)
        else:
            q = C.exp(p, C.vector(p, scale * d))
            np.testing.assert_allclose(np.sqrt(np.append(q, 1 - q.sum())), u[-1], atol=1e-12)
    # once around the circle: every coordinate is positive again at t = 1 (the start itself), yet it crossed 0
    w = np.append(d, -d.sum()) / (2 * np.sqrt(np.append(p, 1 - p.sum())))
    full_turn = 2 * np.pi / np.linalg.norm(w) * d
    assert np.all(sqrt_coordinates_along(C, p, full_turn, [1.0]) > 0)
    with pytest.raises(ValueError, match="leaves the probability simplex"):
        C.exp(p, C.vector(p, full_turn))


def test_exp_refuses_a_geodesic_through_a_hole_in_the_declared_domain():
    M = ig.Manifold(2, ig.MatrixMetric(lambda x: B.eye(2, like=x) * (1.0 + 0.0 * x[0]), dim=2),
                    domain=lambda x: x[0] ** 2 + x[1] ** 2 > 1, domain_description="outside the unit disc")
    x = np.array([-2.0, 0.0])
    with pytest.raises(GeodesicError, match="left the domain"):
        M.exp(x, M.vector(x, np.array([4.0, 0.0])))          # ends at (2, 0), a point of the domain
    np.testing.assert_allclose(M.exp(x, M.vector(x, np.array([0.0, 3.0]))), [-2.0, 3.0], atol=1e-8)
    # a closed-form (Euclidean) exp is checked at its end
    E = ig.Manifold(2, domain=lambda x: x[0] > 0)
    with pytest.raises(GeodesicError, match="ends outside the domain"):
        E.exp(np.array([1.0, 0.0]), E.vector(np.array([1.0, 0.0]), np.array([-2.0, 0.0])))


def test_exp_refuses_a_geodesic_through_a_band_where_the_metric_is_indefinite():
    """G = diag(1, (x0 - 1)^2 - 0.01): indefinite for 0.9 < x0 < 1.1; the straight line x0 = 2t (a geodesic:
    G_00 is constant and x1 does not move) crosses the band and ends where G is positive definite again."""
    G = ig.MatrixMetric(lambda x: B.diag(B.stack([1.0 + 0.0 * x[0], (x[0] - 1.0) ** 2 - 0.01])), dim=2)
    M = ig.Manifold(2, G)
    x = np.array([0.0, 0.0])
    np.testing.assert_allclose(M.exp(x, M.vector(x, np.array([0.5, 0.0]))), [0.5, 0.0], atol=1e-8)
    assert np.all(np.linalg.eigvalsh(B.to_numpy(G.matrix(np.array([2.0, 0.0])))) > 0)
    with pytest.raises(GeodesicError, match="not positive definite"):
        M.exp(x, M.vector(x, np.array([2.0, 0.0])))

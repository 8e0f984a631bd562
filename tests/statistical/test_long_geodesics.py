"""exp with a step too long for floating point (cosh/exp overflow, a variance rounding to 0, an SPD matrix
rounding to a singular one) raises a ValueError that says so, instead of returning NaN, inf or a point off the
manifold; steps that fit keep working."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B

CASES = [  # (family, standard-chart point, chart, Fisher length of the step)
    (lambda: ig.Gaussian(1), [0.0, 1.0], "standard", 1e5),        # was [nan, nan]
    (lambda: ig.Gaussian(1), [0.0, 1.0], "natural", 800.0),       # was [inf, -inf]
    (lambda: ig.Gaussian(1), [0.0, 1.0], "mean", 50.0),           # was a variance of 0
    (lambda: ig.Gaussian(2, "diagonal"), [0, 0, 1, 1.0], "mean_std", 800.0),
    # beyond overflow: near 50 whether the end covariance is SPD in floating point depends on the BLAS kernel's
    # rounding (under OPENBLAS_CORETYPE=Prescott the standard chart's length-50 end point came out SPD)
    (lambda: ig.Gaussian(2, "zero_mean"), [1.0, 0.2, 1.0], "standard", 800.0),  # was a non-SPD covariance
    (lambda: ig.Gaussian(2, "zero_mean"), [1.0, 0.2, 1.0], "natural", 800.0),   # was LinAlgError: Singular matrix
    (lambda: ig.load_manifold("exponential"), [1.0], "standard", 800.0),        # was [inf]
]


def _step(C, x, length):
    u = np.arange(1.0, C.dim + 1)
    return C.vector(x, u * (length / float(C.metric.norm(C.vector(x, u)))))


@pytest.mark.parametrize("make, point, chart, length", CASES)
def test_exp_refuses_end_points_that_floating_point_cannot_hold(make, point, chart, length):
    M = make()
    C = M.in_chart(chart)
    x = np.asarray(B.to_numpy(M.to_chart(np.array(point), chart)))
    with pytest.raises(ValueError, match="shorter step"):
        C.exp(x, _step(C, x, length))
    # a step that fits: a valid point at the right distance
    y = C.exp(x, _step(C, x, 2.0))
    C.check_point(y)
    assert float(C.dist(x, y)) == pytest.approx(2.0, rel=1e-8)


def test_a_batch_with_one_step_too_long_is_refused_as_a_whole():
    G = ig.Gaussian(1)
    X = np.array([[0.0, 1.0], [1.0, 2.0]])
    V = np.array([[0.1, 0.1], [1e6, -1e6]])
    with pytest.raises(ValueError, match="shorter step"):
        G.exp(X, G.vector(X, V))


@pytest.mark.parametrize("make", [ig.Bernoulli, lambda: ig.Categorical(3)])
def test_log_of_logits_that_round_onto_the_simplex_boundary_is_refused(make):
    """Logits of 40 are valid points whose probability rounds to 1 in the mean chart: the log is computed from the
    logits (its length is the distance); logits of 2000, whose ratios overflow there too, are a clear error
    instead of a NaN velocity; exp back toward such a point is refused rather than rounded."""
    M = make().in_chart("natural")
    near = np.zeros(M.dim)
    far = np.zeros(M.dim)
    far[0] = 40.0
    for a, b in ((far, near), (near, far)):
        v = M.log(a, b)
        assert np.all(np.isfinite(v.components))
        assert float(M.metric.norm(v)) == pytest.approx(float(M.dist(a, b)), rel=1e-12)
    with pytest.raises(ValueError, match="not a valid point|rounds onto the boundary"):
        M.exp(near, M.log(near, far))   # a class whose probability ends at e^-40 of where it started
    far[0] = 2000.0
    with pytest.raises(ValueError, match="rounds onto the boundary"):
        M.log(far, near)
    v = M.log(np.full(M.dim, 5.0), near).components          # far from the boundary: unchanged
    assert np.all(np.isfinite(v)) and float(M.dist(np.full(M.dim, 5.0), near)) > 0


def test_a_generic_geodesic_that_leaves_the_domain_is_refused_as_too_long():
    """A family given by its log-partition alone (Poisson, natural chart): the ODE geodesic reaches the boundary
    (the Fisher metric e^θ vanishes as θ → -∞: φ = 2e^{θ/2} is flat, so the step's length 2 ends at φ = 0), so
    exp raises the ValueError of a step too long; a step that fits matches the flat coordinate's closed form."""
    P = ig.ExponentialFamily(sufficient_statistics=lambda x: np.asarray(x, float).reshape(-1, 1),
                             log_partition=lambda th: B.exp(th[0]), dim=1)
    x = np.array([0.0])
    with pytest.raises(ValueError, match="shorter step"):
        P.exp(x, P.vector(x, [-1e4]))
    np.testing.assert_allclose(P.exp(x, P.vector(x, [-0.5])), [2 * np.log(0.75)], rtol=1e-8)

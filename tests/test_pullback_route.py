"""PullbackMetric chooses between forming J^T G J and conjugate gradient by the sizes of inputs *and* outputs,
and never asks a matrix-free output metric for a matrix the user did not request."""
import numpy as np
import pytest

import infogeo as ig

B = ig.backend


class MatrixFreeEuclidean(ig.Metric):
    """The Euclidean metric on outputs through mv only (like a categorical Fisher metric on logits)."""

    has_matrix = False

    def mv(self, x, v):
        return v


class Counting(ig.EuclideanMetric):
    """The Euclidean output metric, counting the dense matrices asked of it."""

    calls = 0

    def matrix(self, x):
        Counting.calls += 1
        return super().matrix(x)


def linear_problem(n, m, seed=0):
    A = np.random.default_rng(seed).standard_normal((m, n)) / np.sqrt(m)
    return A, (lambda x: B.matmul(A, x))


@pytest.mark.parametrize("n, m, dense", [(5, 40, True), (30, 3000, False), (1500, 800, False), (2500, 3, False)])
def test_the_route_follows_the_size_rule(n, m, dense):
    A, f = linear_problem(n, m)
    G = ig.PullbackMetric(f, ig.EuclideanMetric(m))
    assert G.dense_at(np.zeros(n)) is dense


def test_many_outputs_take_the_matrix_free_route_with_the_same_answer():
    A, f = linear_problem(30, 3000)
    Counting.calls = 0
    G = ig.PullbackMetric(f, Counting(3000))
    x, b = np.zeros(30), np.random.default_rng(1).standard_normal(30)
    got = G.solve(x, b)
    assert Counting.calls == 0
    np.testing.assert_allclose(got, np.linalg.solve(A.T @ A, b), rtol=1e-8)
    # asked for, the matrix is formed
    np.testing.assert_allclose(G.matrix(x), A.T @ A, rtol=1e-12)
    assert Counting.calls == 1


def test_a_matrix_free_output_metric_is_never_asked_for_a_matrix_by_sharp():
    A, f = linear_problem(4, 12)
    G = ig.PullbackMetric(f, MatrixFreeEuclidean(12))
    assert not G.has_matrix and not G.dense_at(np.zeros(4))
    x, b = np.zeros(4), np.arange(1.0, 5.0)
    v = G.sharp(ig.Covector(x, b))
    np.testing.assert_allclose(v.components, np.linalg.solve(A.T @ A, b), rtol=1e-8)
    res = ig.solvers.DampedNewton(max_iter=20).minimize(ig.Euclidean(4).with_metric(G),
                                                        lambda w: B.sum((w - 1.0) ** 2), x)
    assert res.success and np.allclose(res.x, 1.0)
    with pytest.raises(NotImplementedError, match="use mv"):
        G.matrix(x)


def test_pullback_refuses_a_vector_or_point_that_is_not_the_maps_input():
    """A vector longer than the point was cut to the map's inputs without a word (found by a QA sweep)."""
    f = lambda x: B.stack([B.sin(x[0]) * x[1], x[1] ** 2, B.exp(x[0] + x[2])])  # noqa: E731
    x = np.array([0.1, 0.2, 0.3])
    for PM in (ig.PullbackMetric(f, ig.EuclideanMetric(3)), ig.PullbackMetric(f, ig.EuclideanMetric(3), dim=3)):
        with pytest.raises(ValueError, match="vector has shape"):
            PM.mv(x, np.array([1.0, 1.0, 1.0, 7.0, 9.0]))
        with pytest.raises(ValueError, match="vector has shape"):
            PM.mv(x, np.array([1.0, 1.0]))
        v = np.array([1.0, -2.0, 0.5])
        np.testing.assert_allclose(PM.mv(x, v), PM.matrix(x) @ v, rtol=1e-13)
    PM = ig.PullbackMetric(f, ig.EuclideanMetric(3), dim=3)
    with pytest.raises(ValueError, match="takes 3 inputs"):
        PM.matrix(np.ones(5))
    with pytest.raises(ValueError, match="takes 3 inputs"):
        PM.mv(np.ones(5), np.ones(5))
    # on a manifold the metric takes the manifold's dimension
    N = ig.Euclidean(3).with_metric(ig.PullbackMetric(f, ig.EuclideanMetric(3)))
    with pytest.raises(ValueError, match="takes 3 inputs"):
        N.metric.matrix(np.ones(5))

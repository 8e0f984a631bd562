"""Orthogonal sampling for the IGO search: exact N(0, I) marginals, orthogonal frames, and the search using it."""
import numpy as np
import pytest
from scipy import stats

from infogeo.solvers import IGOSearch, StochasticRelaxation
from infogeo.solvers.igo_sampling import orthogonal_normal, standard_normal_samples


@pytest.mark.parametrize("dim,lam", [(5, 3), (4, 4), (3, 8), (1, 3)])
def test_rows_are_orthogonal_within_blocks_of_d(dim, lam):
    Z = orthogonal_normal(np.random.default_rng(0), lam, dim)
    assert Z.shape == (lam, dim)
    for start in range(0, lam, dim):
        blk = Z[start:start + dim]
        G = blk @ blk.T
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-12)
    if lam > dim and dim > 1:       # different blocks are independent frames, not orthogonal to each other
        assert abs(Z[0] @ Z[dim]) > 1e-8


@pytest.mark.parametrize("dim,lam", [(4, 3), (3, 5)])
def test_each_row_is_standard_normal(dim, lam):
    """Every row (first, middle, last of a block) has mean 0, covariance I and chi_d lengths, within 4 SE."""
    n = 10000
    rng = np.random.default_rng(1)
    Z = np.stack([orthogonal_normal(rng, lam, dim) for _ in range(n)])          # (n, lam, dim)
    for i in range(lam):
        z = Z[:, i]
        assert np.all(np.abs(z.mean(axis=0)) < 4 / np.sqrt(n)), (i, z.mean(axis=0))
        cov = z.T @ z / n
        # Var(z_a z_b) = 1 off the diagonal and 2 on it for N(0, I)
        se = np.sqrt((1 + np.eye(dim)) / n)
        assert np.all(np.abs(cov - np.eye(dim)) < 4 * se), (i, cov)
        assert stats.kstest(np.linalg.norm(z, axis=1), stats.chi(dim).cdf).pvalue > 1e-3
    # the signs of a frame are unbiased: a QR without the sign convention skews the first coordinate
    assert abs(np.mean(Z[:, 0, 0] > 0) - 0.5) < 4 * 0.5 / np.sqrt(n)


def test_weighted_sum_has_no_cross_terms():
    rng = np.random.default_rng(2)
    Z = orthogonal_normal(rng, 6, 10)
    w = rng.standard_normal(6)
    assert np.linalg.norm(w @ Z) ** 2 == pytest.approx(np.sum(w ** 2 * np.sum(Z ** 2, axis=1)), rel=1e-12)


def test_independent_sampling_is_the_plain_generator_and_bad_names_are_rejected():
    a = standard_normal_samples(np.random.default_rng(3), 4, 2, "independent")
    np.testing.assert_array_equal(a, np.random.default_rng(3).standard_normal((4, 2)))
    with pytest.raises(ValueError, match="sampling"):
        standard_normal_samples(np.random.default_rng(3), 4, 2, "sobol")
    with pytest.raises(ValueError, match="sampling"):
        IGOSearch(np.zeros(3), 1.0, sampling="mirrored")


def test_ask_draws_orthogonal_steps_in_the_metric_of_C():
    """The candidates' whitened steps C^{-1/2}(x_i - m)/sigma are mutually orthogonal (full and diagonal)."""
    rng = np.random.default_rng(4)
    A = rng.standard_normal((6, 6))
    for cov0 in (A @ A.T + np.eye(6), rng.uniform(0.5, 3, 6)):
        es = IGOSearch(np.ones(6), 0.3, popsize=5, cov0=cov0, seed=5,
                       covariance="full" if cov0.ndim == 2 else "diagonal")
        Z = es._invsqrt((es.ask() - es.mean) / es.sigma)
        G = Z @ Z.T
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-9)


@pytest.mark.parametrize("sampling", ["orthogonal", "independent"])
def test_both_samplings_solve_an_ill_conditioned_problem(sampling):
    R = np.linalg.qr(np.random.default_rng(6).standard_normal((6, 6)))[0]
    scale = 10.0 ** (4 * np.arange(6) / 5)
    f = lambda X: ((X @ R.T) ** 2) @ scale  # noqa: E731
    res = StochasticRelaxation(0.5, f_target=1e-8, seed=7, max_evals=20_000, sampling=sampling).minimize(
        f, np.ones(6))
    assert res.success and res.fun <= 1e-8

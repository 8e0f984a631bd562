"""Samplers stay inside their support: Beta and Dirichlet at tiny concentrations, sampled in log space."""
import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st

import infogeo as ig
from infogeo.statistical import log_gamma_variates, simplex_from_logs


@pytest.mark.parametrize("c", [1e-3, 1e-5, 1e-8])
def test_beta_and_dirichlet_samples_at_tiny_concentrations_have_finite_log_densities(c):
    beta, dirichlet = ig.load_manifold("beta"), ig.load_manifold("dirichlet", k=3)
    p = beta.point(alpha=c, beta=c)
    x = beta.sample(p, 2000, rng=0)
    assert np.all((x > 0) & (x < 1)) and np.all(np.isfinite(beta.log_prob(p, x)))
    # (almost) every sample sits at an end; by symmetry half of them near 1 (binomial sd 0.011)
    assert abs((x > 0.5).mean() - 0.5) < 0.05
    q = dirichlet.point(concentration=[c, c, 2 * c])
    y = dirichlet.sample(q, 2000, rng=0)
    assert np.all(y > 0) and np.all(np.isfinite(dirichlet.log_prob(q, y)))
    # the mass goes to one vertex, vertex i with probability a_i / sum(a)
    np.testing.assert_allclose(np.bincount(y.argmax(1), minlength=3) / 2000, [0.25, 0.25, 0.5], atol=0.05)


def test_log_gamma_variates_follow_the_gamma_law():
    """Kolmogorov-Smirnov against the regularised incomplete gamma function (scipy), a fixed seed."""
    for a in (0.05, 0.7, 3.0):
        log_g = log_gamma_variates(a, 4000, np.random.default_rng(1))
        assert log_g.shape == (4000,)
        assert st.kstest(sp.gammainc(a, np.exp(log_g)), "uniform").pvalue > 1e-3
    # tiny concentrations: a log G is, to first order in a, minus an Exp(1) variate
    a = 1e-6
    log_g = log_gamma_variates(a, 4000, np.random.default_rng(2))
    assert st.kstest(-a * log_g, "expon").pvalue > 1e-3


def test_simplex_from_logs_keeps_rows_on_the_open_simplex_and_the_law_of_moderate_concentrations():
    x = simplex_from_logs(np.array([[0.0, -1e9, -5.0], [0.0, -1e-300, -np.inf + 0 * 1.0]]))
    assert np.all(x > 0) and np.allclose(x.sum(1), 1.0)
    two = simplex_from_logs(np.array([[0.0, -1e9]]))
    assert two[0, 0] < 1.0 and np.isfinite(np.log1p(-two[0, 0]))
    dirichlet = ig.load_manifold("dirichlet", k=3)
    a = np.array([0.5, 1.0, 2.0])
    y = dirichlet.sample(dirichlet.point(concentration=a), 20000, rng=3)
    sd = np.sqrt(a / 3.5 * (1 - a / 3.5) / 4.5 / 20000)      # standard error of the mean of each coordinate
    assert np.all(np.abs(y.mean(0) - a / 3.5) < 5 * sd)


def test_categorical_samples_from_a_float32_tensor_point():
    # B14 (found by an independent fault-battery sweep): float32 probabilities missed numpy's sum-to-one check
    torch = pytest.importorskip("torch")
    x = ig.Categorical(3).sample(torch.tensor([0.29048639, 0.28736856], dtype=torch.float32), 50,
                                 np.random.default_rng(0))
    assert x.shape == (50,) and set(np.unique(x)) <= {0, 1, 2}

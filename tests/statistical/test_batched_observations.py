"""log_prob, score, log_likelihood and sample on batches of distributions equal the loop over the distributions."""
import numpy as np
import pytest

import infogeo as ig

FAMILIES = [
    (ig.Gaussian(dim=1), "standard"), (ig.Gaussian(dim=1), "natural"),
    (ig.Gaussian(dim=2, covariance="diagonal"), "mean"), (ig.Gaussian(dim=2), "standard"),
    (ig.Gaussian(dim=2), "natural"), (ig.Gaussian(dim=2, covariance="zero_mean"), "standard"),
    (ig.Gaussian(dim=2, covariance="fixed", cov=np.array([[1.0, 0.2], [0.2, 0.5]])), "standard"),
    (ig.Categorical(4), "standard"), (ig.Categorical(4), "natural"), (ig.Bernoulli(), "standard"),
    (ig.IndependenceModel(2), "mean"), ("poisson", "standard"), ("beta", "standard"), ("gamma", "natural"),
]


def _family(M, chart):
    M = ig.load_manifold(M) if isinstance(M, str) else M
    return M.in_chart(chart)


@pytest.mark.parametrize("M, chart", FAMILIES, ids=lambda a: a if isinstance(a, str) else a.name)
def test_batched_observation_methods_equal_the_loop(M, chart):
    M = _family(M, chart)
    rng = np.random.default_rng(7)
    P = np.stack([np.asarray(M.random_point(rng)) for _ in range(6)]).reshape(2, 3, M.dim)
    x = M.sample(P[0, 0], 5, rng=1)
    lp, sc, ll = M.log_prob(P, x), M.score(P, x), M.log_likelihood(P, x)
    assert lp.shape == (2, 3, 5) and sc.shape == (2, 3, 5, M.dim) and ll.shape == (2, 3)
    draws = M.sample(P, 4, rng=11)
    loop_rng = np.random.default_rng(11)
    for idx in np.ndindex(2, 3):
        np.testing.assert_allclose(lp[idx], M.log_prob(P[idx], x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(sc[idx], M.score(P[idx], x), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ll[idx], M.log_likelihood(P[idx], x), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(draws[idx], M.sample(P[idx], 4, rng=loop_rng))


def test_batched_log_prob_of_torch_distributions_keeps_the_gradient():
    torch = pytest.importorskip("torch")
    G = ig.Gaussian(dim=1)
    P = torch.tensor([[0.0, 1.0], [1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    x = np.array([0.5, -1.0, 2.0])
    lp = G.log_prob(P, x)
    assert isinstance(lp, torch.Tensor) and lp.shape == (2, 3)
    (g,) = torch.autograd.grad(lp.sum(), P)
    mu, var = P.detach().numpy().T
    # d/dmu sum_j log N(x_j; mu, var) = sum_j (x_j - mu) / var; d/dvar = sum_j ((x_j - mu)^2 / var - 1) / (2 var)
    want_mu = ((x[None] - mu[:, None]) / var[:, None]).sum(1)
    want_var = (((x[None] - mu[:, None]) ** 2 / var[:, None] - 1) / (2 * var[:, None])).sum(1)
    np.testing.assert_allclose(g.numpy(), np.stack([want_mu, want_var], 1), rtol=1e-12)

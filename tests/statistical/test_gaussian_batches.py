"""Full, zero-mean and fixed-covariance Gaussians on batches: every closed form broadcasts over leading axes,
on numpy and torch, equals the loop of single results, and its torch gradient matches finite differences."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B

FIXED_COV = np.array([[2.0, 0.3], [0.3, 0.5]])
FAMILIES = [ig.Gaussian(dim=2), ig.Gaussian(dim=3), ig.Gaussian(dim=2, covariance="zero_mean"),
            ig.Gaussian(dim=3, covariance="zero_mean"), ig.Gaussian(dim=2, covariance="fixed", cov=FIXED_COV)]
CHARTS = ("standard", "natural", "mean")


def _batch(M, rng, shape=(2, 3)):
    n = int(np.prod(shape))
    return np.stack([np.asarray(M.random_point(rng)) for _ in range(n)]).reshape(shape + (M.dim,))


def _closed_geodesics(M) -> bool:
    """Closed-form exp, log and dist (the full Gaussian's log and dist are a shooting, numpy only)."""
    return not isinstance(M, ig.statistical.FullGaussian)


@pytest.mark.parametrize("chart", CHARTS)
@pytest.mark.parametrize("M", FAMILIES, ids=lambda M: M.name)
def test_batched_closed_forms_equal_the_loop_of_single_ones(M, chart):
    M = M.in_chart(chart)
    rng = np.random.default_rng(3)
    P, Q = _batch(M, rng), _batch(M, rng)
    V = rng.standard_normal(P.shape) * 0.1
    ops = {"kl": lambda p, q: M.kl(p, q),
           "matrix": lambda p, q: M.metric.matrix(p),
           "inner": lambda p, q: M.metric.inner(M.vector(p, q - p), M.vector(p, q - p)),
           "flat": lambda p, q: M.metric.flat(M.vector(p, q - p)).components,
           "sharp": lambda p, q: M.metric.sharp(M.covector(p, q - p)).components}
    ops["exp"] = lambda p, v: M.exp(p, M.vector(p, v))            # the full Gaussian's too: Eriksen's closed form
    if _closed_geodesics(M) and chart == "standard":
        ops.update(dist=M.dist, log=lambda p, q: M.log(p, q).components)
    for name, op in ops.items():
        second = V if name == "exp" else Q
        batched = np.asarray(op(P, second))
        for idx in np.ndindex(*P.shape[:-1]):
            np.testing.assert_allclose(batched[idx], np.asarray(op(P[idx], second[idx])), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{M.name} {chart} {name} at {idx}")


@pytest.mark.parametrize("M", FAMILIES, ids=lambda M: M.name)
def test_torch_batches_give_torch_results_equal_to_numpy(M):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    P, Q = _batch(M, rng), _batch(M, rng)
    tP, tQ = torch.tensor(P), torch.tensor(Q)
    pairs = [(M.kl(tP, tQ), M.kl(P, Q)), (M.metric.matrix(tP), M.metric.matrix(P)),
             (M.metric.sharp(M.covector(tP, tQ)).components, M.metric.sharp(M.covector(P, Q)).components)]
    if _closed_geodesics(M):
        pairs += [(M.dist(tP, tQ), M.dist(P, Q)), (M.log(tP, tQ).components, M.log(P, Q).components),
                  (M.exp(tP, M.vector(tP, 0.1 * tQ)), M.exp(P, M.vector(P, 0.1 * Q)))]
    for got, want in pairs:
        assert isinstance(got, torch.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_full_gaussian_exp_of_a_batch_with_long_and_short_velocities_equals_the_loop():
    # velocities of very different lengths take different numbers of closed-form steps
    G = ig.Gaussian(dim=2)
    rng = np.random.default_rng(8)
    p = np.asarray(G.random_point(rng))
    V = rng.standard_normal((5, G.dim)) * np.array([0.01, 0.5, 2.0, 6.0, 12.0])[:, None]
    batched = G.exp(p, G.vector(p, V))      # one point, a batch of velocities (broadcast)
    for i in range(5):
        np.testing.assert_allclose(batched[i], G.exp(p, G.vector(p, V[i])), rtol=1e-11, atol=1e-12)


def test_zero_mean_and_fixed_covariance_match_their_textbook_formulas_on_batches():
    rng = np.random.default_rng(5)
    Z = ig.Gaussian(dim=2, covariance="zero_mean")
    P, Q = _batch(Z, rng, (4,)), _batch(Z, rng, (4,))
    S, T = Z.vh.sym(P), Z.vh.sym(Q)
    lam = [np.linalg.eigvals(np.linalg.solve(S[i], T[i])).real for i in range(4)]   # eigenvalues of S^-1 T
    np.testing.assert_allclose(Z.dist(P, Q), [np.sqrt(0.5 * np.sum(np.log(w) ** 2)) for w in lam], rtol=1e-10)
    F = ig.Gaussian(dim=2, covariance="fixed", cov=FIXED_COV)
    m1, m2 = rng.standard_normal((2, 4, 2))
    dm = m2 - m1
    np.testing.assert_allclose(F.dist(m1, m2), np.sqrt(np.einsum("ni,ij,nj->n", dm, np.linalg.inv(FIXED_COV), dm)),
                               rtol=1e-12)
    np.testing.assert_allclose(F.kl(m1, m2), 0.5 * F.dist(m1, m2) ** 2, rtol=1e-12)


@pytest.mark.parametrize("M", FAMILIES, ids=lambda M: M.name)
def test_torch_gradients_of_the_closed_forms_match_finite_differences(M):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    p, q = np.asarray(M.random_point(rng)), np.asarray(M.random_point(rng))
    v = (q - p) * 0.3
    fs = {"kl": lambda x: M.kl(x, q), "kl2": lambda x: M.kl(q, x), "metric": lambda x: B.sum(M.metric.matrix(x) ** 2)}
    if _closed_geodesics(M):
        fs.update(dist=lambda x: M.dist(x, q), exp=lambda x: B.sum(M.exp(x, M.vector(x, v)) ** 2),
                  log=lambda x: B.sum(M.log(x, q).components ** 2))
    h = 1e-6
    for name, f in fs.items():
        x = torch.tensor(p, requires_grad=True)
        out = f(x)   # a constant (the fixed-covariance metric) has no graph: its gradient is zero
        g = torch.autograd.grad(out, x)[0] if out.requires_grad else torch.zeros_like(x)
        fd = [(float(f(torch.tensor(p + h * e))) - float(f(torch.tensor(p - h * e)))) / (2 * h) for e in np.eye(M.dim)]
        np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5, atol=1e-6, err_msg=f"{M.name} {name}")

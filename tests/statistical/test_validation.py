"""Every public operation validates its points and samples: the silent-NaN and dtype cases, one test each,
batched results equal the loop of single results, torch tensors go through and gradients flow."""
import subprocess
import sys

import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B

G1, C3 = ig.Gaussian(dim=1), ig.Categorical(3)


# ----------------------------------------------------------- kl / metric off the manifold
@pytest.mark.parametrize("M, p, q", [
    (G1, [0.0, 1.0], [0.0, -1.0]),                                      # negative variance
    (ig.Gaussian(dim=2), [0, 0, 1, 0, 1], [0, 0, 1, 2, 1]),             # non-SPD covariance
    (C3, [0.2, 0.3], [0.7, 0.4]),                                       # off the simplex
    (ig.IndependenceModel(2), [0.5, 0.5], [0.5, 1.5]),
])
def test_kl_with_q_off_the_manifold_is_refused(M, p, q):
    with pytest.raises(ValueError):
        M.kl(np.array(p, float), np.array(q, float))


@pytest.mark.parametrize("name, p, q", [("poisson", [2.0], [-1.0]), ("beta", [1.0, 2.0], [-1.0, 2.0]),
                                        ("gamma", [1.0, 2.0], [1.0, -2.0])])
def test_kl_of_contributed_families_with_q_off_the_manifold_is_refused(name, p, q):
    M = ig.load_manifold(name)
    with pytest.raises(ValueError, match="positive"):
        M.kl(np.array(p), np.array(q))


@pytest.mark.parametrize("M, x", [(G1, [0.0, -1.0]), (C3, [0.7, 0.4]), (ig.Gaussian(dim=2), [0, 0, 1, 2, 1])])
def test_metric_matrix_off_the_manifold_is_refused(M, x):
    with pytest.raises(ValueError):
        M.metric.matrix(np.array(x, float))
    with pytest.raises(ValueError):
        M.metric.sharp(M.covector(np.array(x, float), np.ones(M.dim)))


# ----------------------------------------------------------- samples
@pytest.mark.parametrize("M, p, x, match", [
    (G1, [0.0, 1.0], [0.0, np.nan], "NaN"),
    (C3, [0.2, 0.3], [5], "0..2"),
    (C3, [0.2, 0.3], [1.5], "0..2"),
    ("poisson", [2.0], [2.5], "integer"),
    ("beta", [2.0, 3.0], [1.5], "support"),
    ("gamma", [2.0, 3.0], [-1.0], "support"),
    (ig.Bernoulli(), [0.3], [2.0], "0 or 1"),
])
def test_log_prob_of_invalid_observations_is_refused(M, p, x, match):
    M = ig.load_manifold(M) if isinstance(M, str) else M
    with pytest.raises(ValueError, match=match):
        M.log_prob(np.array(p), np.array(x))


def test_log_likelihood_on_empty_data_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        G1.log_likelihood(np.array([0.0, 1.0]), np.array([]))


def test_sample_size_must_be_a_non_negative_integer():
    with pytest.raises(ValueError):
        G1.sample(np.array([0.0, 1.0]), -1)
    assert G1.sample(np.array([0.0, 1.0]), 0).shape == (0, 1)   # no draws: an empty array
    with pytest.raises(TypeError):
        G1.sample(np.array([0.0, 1.0]), "3")
    with pytest.raises(ValueError, match="one distribution"):
        G1.fisher_monte_carlo(np.array([[0.0, 1.0], [1.0, 2.0]]), 3)


# ----------------------------------------------------------- NaN and dtypes
def test_nan_probabilities_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        C3.point(probs=[np.nan, 0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        C3.dist(np.array([np.nan, 0.3]), np.array([0.2, 0.3]))
    with pytest.raises(ValueError, match="NaN"):
        ig.IndependenceModel(2).point(probs=[np.nan, 0.5])


def test_gaussian_dimension_must_be_an_integer():
    with pytest.raises(ValueError, match="integer"):
        ig.Gaussian(dim=2.5)
    with pytest.raises(TypeError, match="integer"):
        ig.Gaussian(dim="2")
    with pytest.raises(TypeError):
        ig.Gaussian(dim=True)


@pytest.mark.parametrize("coords", [np.array([0.0 + 1j, 1.0]), np.array([True, True]), "ab"])
def test_complex_boolean_and_text_coordinates_are_refused(coords):
    with pytest.raises(TypeError):
        G1.dist(coords, np.array([0.0, 1.0]))
    with pytest.raises(TypeError):
        G1.point(coords)


def test_integer_coordinates_are_promoted_to_float():
    p = G1.point(np.array([0, 1]))
    assert p.dtype == np.float64
    assert G1.dist(np.array([0, 1]), np.array([1, 4])) == pytest.approx(G1.dist(p, np.array([1.0, 4.0])))
    g = G1.gradient(lambda x: B.sum(x * x), np.array([1, 2]))          # autograd needs floats
    assert np.all(np.isfinite(g.components))


def test_points_of_another_family_are_refused_even_with_the_same_shape():
    g = G1.point(mean=0.2, var=0.3)
    c = C3.point(probs=[0.2, 0.3, 0.5])
    with pytest.raises(TypeError, match="Categorical"):
        G1.kl(g, c)
    with pytest.raises(TypeError, match="Gaussian"):
        C3.dist(c, g)
    with pytest.raises(TypeError, match="natural chart"):
        G1.dist(g, G1.to_chart(g, "natural"))
    # plain arrays are read as points of the manifold whose method is called
    assert np.isfinite(G1.kl(g, np.array(c)))


# ----------------------------------------------------------- batches
@pytest.mark.parametrize("M", [G1, ig.Gaussian(dim=2, covariance="diagonal"), C3, ig.Bernoulli(),
                               ig.IndependenceModel(2), ig.Gaussian(dim=2)],
                         ids=lambda M: M.name)
def test_batched_operations_equal_the_loop_of_single_ones(M):
    rng = np.random.default_rng(1)
    P = np.stack([M.random_point(rng) for _ in range(4)]).reshape(2, 2, M.dim)
    Q = np.stack([M.random_point(rng) for _ in range(4)]).reshape(2, 2, M.dim)
    for op in (M.dist, M.kl):
        batched = np.asarray(op(P, Q))
        assert batched.shape == (2, 2)
        loop = [[float(op(P[i, j], Q[i, j])) for j in range(2)] for i in range(2)]
        np.testing.assert_allclose(batched, loop, rtol=1e-10, atol=1e-12)
    V = M.log(P, Q)
    np.testing.assert_allclose(V.components[1, 0], M.log(P[1, 0], Q[1, 0]).components, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(M.exp(P, V), Q, rtol=1e-7, atol=1e-9)             # batched round trip
    F = M.metric.matrix(P)
    np.testing.assert_allclose(F[0, 1], M.metric.matrix(P[0, 1]), rtol=1e-12)
    w = M.metric.flat(V)
    np.testing.assert_allclose(M.metric.sharp(w).components, V.components, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(M.metric.norm(V), M.dist(P, Q), rtol=1e-7)


def test_batched_point_from_parameters():
    P = G1.point(mean=np.zeros(5), std=np.arange(1.0, 6.0))
    assert P.shape == (5, 2)
    np.testing.assert_allclose(P[:, 1], np.arange(1.0, 6.0) ** 2)
    assert C3.point(probs=np.full((4, 3), 1 / 3)).shape == (4, 2)
    assert ig.load_manifold("gamma").point(shape=np.ones(3), rate=2.0).shape == (3, 2)
    with pytest.raises(ValueError, match="do not broadcast"):
        G1.dist(np.ones((3, 2)), np.ones((2, 2)))


# ----------------------------------------------------------- torch
@pytest.mark.parametrize("M", [G1, ig.Gaussian(dim=2, covariance="diagonal"), C3, ig.IndependenceModel(2)],
                         ids=lambda M: M.name)
def test_torch_gradients_of_closed_forms_match_finite_differences(M):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    p, q = M.random_point(rng), M.random_point(rng)
    v = M.log(p, q).components * 0.3
    for name, f in (("dist", lambda x: M.dist(x, q)), ("kl", lambda x: M.kl(x, q)),
                    ("exp", lambda x: B.sum(M.exp(x, M.vector(x, v)))), ("log", lambda x: B.sum(M.log(x, q).components)),
                    ("metric", lambda x: B.sum(M.metric.matrix(x)))):
        x = torch.tensor(p, dtype=torch.float64, requires_grad=True)
        out = f(x)
        assert isinstance(out, torch.Tensor), name
        (g,) = torch.autograd.grad(out, x)
        h = 1e-6
        fd = [(float(f(torch.tensor(p + h * e))) - float(f(torch.tensor(p - h * e)))) / (2 * h)
              for e in np.eye(M.dim)]
        np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5, atol=1e-6, err_msg=name)


def test_beta_kl_with_torch_inputs_that_require_grad():
    torch = pytest.importorskip("torch")
    Beta = ig.load_manifold("beta")
    p = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([1.5, 4.0], dtype=torch.float64)
    kl = Beta.kl(p, q)
    assert isinstance(kl, torch.Tensor)
    assert float(kl.detach()) == pytest.approx(float(Beta.kl(np.array([2.0, 3.0]), np.array([1.5, 4.0]))), rel=1e-12)
    (g,) = torch.autograd.grad(kl, p)
    assert torch.all(torch.isfinite(g))


def test_numpy_only_paths_refuse_torch_tensors():
    torch = pytest.importorskip("torch")
    G = ig.Gaussian(dim=2)
    p = torch.tensor(np.array(G.random_point(0)))
    with pytest.raises(TypeError, match="numpy only"):
        G.dist(p, p)
    from .conftest import poisson
    mean_chart = poisson().in_chart("mean")            # Legendre inversion by Newton's method, in numpy
    with pytest.raises(TypeError, match="numpy only"):
        mean_chart.fisher(torch.tensor([4.0], dtype=torch.float64, requires_grad=True))


# ----------------------------------------------------------- names and imports
def test_gaussian_names_say_which_dimension_is_which():
    G = ig.Gaussian(dim=2)
    assert G.sample_dim == 2 and G.dim == 5
    assert "sample_dim=2" in repr(G) and "5-dimensional" in repr(G)


def test_import_does_not_pull_scipy_integrate_or_stats():
    code = ("import sys, infogeo; bad = [m for m in ('scipy.integrate', 'scipy.stats', 'autograd.scipy') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(__import__("pathlib").Path(
                             ig.__file__).resolve().parents[1])})
    assert res.returncode == 0, res.stdout + res.stderr


def test_sizes_are_integers_that_fit_in_memory():
    # B9/C2 (found by an independent fault-battery sweep): Categorical(inf) raised OverflowError, None/nan raw
    # errors, IndependenceModel(n=1.5) was accepted as 1, Gaussian(dim=1e13) / sample(p, 10**13) ran into a
    # MemoryError and IsingModel(10**13) built its statistics for minutes
    for k in (float("inf"), float("nan"), 2.5, 1):
        with pytest.raises(ValueError, match="k .* must be an integer >= 2"):
            ig.Categorical(k)
    with pytest.raises(TypeError, match="must be an integer"):
        ig.Categorical(None)
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        ig.IndependenceModel(n=1.5)
    for make in (lambda: ig.Gaussian(dim=1e13), lambda: ig.IndependenceModel(10 ** 13),
                 lambda: ig.IsingModel(10 ** 13, [(0, 1)]), lambda: ig.Categorical(10 ** 13),
                 lambda: ig.Gaussian(1).sample(np.array([0.0, 1.0]), 10 ** 13)):
        with pytest.raises(ValueError, match="GiB.*more than this machine's memory"):
            make()


@pytest.mark.parametrize("M", [G1, C3, ig.Bernoulli(), ig.IndependenceModel(2), ig.Gaussian(dim=2),
                               ig.Gaussian(dim=2, covariance="diagonal"), ig.geometry.manifold.Euclidean(2)],
                         ids=lambda M: M.name)
def test_random_point_refuses_what_is_not_a_seed_or_generator_by_name(M):
    # fault battery: rng=0.5 reached numpy's "SeedSequence expects int or sequence of ints", True was seed 1
    for bad in (0.5, 2.0, True, "0", [1.0]):
        with pytest.raises(TypeError, match="rng must be None, an integer seed or a numpy Generator"):
            M.random_point(bad)
    with pytest.raises(ValueError, match="rng must be an integer seed >= 0"):
        M.random_point(-1)
    # what it takes: a seed (numpy's integers too), a Generator, a RandomState (its state advances)
    assert np.array_equal(B.to_numpy(M.random_point(3)), B.to_numpy(M.random_point(np.int64(3))))
    assert np.array_equal(B.to_numpy(M.random_point(np.random.default_rng(3))), B.to_numpy(M.random_point(3)))
    state = np.random.RandomState(0)
    assert not np.array_equal(B.to_numpy(M.random_point(state)), B.to_numpy(M.random_point(state)))
    M.random_point(None)

"""Natural gradient, mirror descent, online MLE and stochastic relaxation on statistical manifolds."""
import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.geometry.metric import EuclideanMetric
from infogeo.solvers import GradientDescent, InverseTime, MirrorDescent, StochasticRelaxation, online_mle


# ----------------------------------------------------------- independence model
def f_toy(X):
    return X[:, 0] + 2 * X[:, 1] + 3 * X[:, 0] * X[:, 1]


def _run(M, x0, step=0.15, n=200):
    return GradientDescent(step_size=step, max_iter=n, grad_tol=0.0).minimize(
        M, lambda z: M.expectation(f_toy, z), B.array(x0))


def test_independence_model_expected_values_match_the_seed_table():
    M = ig.IndependenceModel(2, chart="standard")
    # F(mu) = -4 mu1 - 2 mu2 + 12 mu1 mu2 with mu_i = P(x_i = +1)
    mu = B.array([0.3, 0.8])
    assert float(M.expectation(f_toy, mu)) == pytest.approx(-4 * 0.3 - 2 * 0.8 + 12 * 0.3 * 0.8, rel=1e-12)


def test_natural_gradient_reaches_the_delta_while_vanilla_gradient_stalls():
    M = ig.IndependenceModel(2, chart="natural")
    nat = _run(M, [0.0, 0.0])
    assert abs(nat.fun - (-4.0)) <= 1e-8
    np.testing.assert_allclose(B.to_numpy(M.to_chart(nat.x, "standard")), [1.0, 0.0], atol=1e-8)  # delta at (+1, -1)
    vanilla = _run(M.with_metric(EuclideanMetric(2)), [0.0, 0.0])
    assert vanilla.fun - (-4.0) > 0.01
    assert vanilla.nit == 200


def test_natural_gradient_from_another_start_reaches_the_other_basin():
    M = ig.IndependenceModel(2, chart="natural")
    res = _run(M, [-0.5, 0.5])
    assert abs(res.fun - (-2.0)) <= 1e-8
    np.testing.assert_allclose(B.to_numpy(M.to_chart(res.x, "standard")), [0.0, 1.0], atol=1e-8)  # (-1, +1)


def test_natural_gradient_trajectories_in_mu_and_theta_coincide_for_small_steps():
    M = ig.IndependenceModel(2, chart="natural")
    S = M.in_chart("standard")
    x0 = B.array([0.2, -0.1])
    errs = []
    for step, n in ((0.004, 50), (0.002, 100)):     # the same flow time T = 0.2
        a = _run(M, x0, step, n).path()
        b = _run(S, M.to_chart(x0, "standard"), step, n).path()
        b_theta = np.stack([B.to_numpy(S.to_chart(B.array(z), "natural")) for z in b])
        errs.append(np.abs(a - b_theta).max())
    assert errs[1] < 1.5e-3                                    # the path itself moves by 0.5
    assert errs[1] / errs[0] == pytest.approx(0.5, rel=0.15)   # first order in the step


# ----------------------------------------------------------- mirror descent
def _ce_cost(M, target_probs):
    """Cross-entropy to a target distribution: a cost with a unique minimum at the target."""
    target = B.array(target_probs)
    return lambda z: -B.sum(target * B.log(M.probs(z)))


def test_mirror_descent_is_natural_gradient_in_the_mean_chart_exactly():
    C = ig.Categorical(3, chart="natural")
    cost = _ce_cost(C, [0.5, 0.3, 0.2])
    x0 = C.point(probs=[0.2, 0.2, 0.6])
    md = MirrorDescent(0.5, gradient_chart="natural", max_iter=40, grad_tol=0).minimize(C, cost, x0)
    Cm = C.in_chart("mean")
    ng = GradientDescent(0.5, max_iter=40, grad_tol=0).minimize(Cm, _ce_cost(Cm, [0.5, 0.3, 0.2]),
                                                                C.to_chart(x0, "mean"))
    md_mean = np.stack([B.to_numpy(C.to_chart(B.array(z), "mean")) for z in md.path()])
    np.testing.assert_allclose(md_mean, ng.path(), rtol=1e-12, atol=1e-13)
    assert md.fun == pytest.approx(-np.sum(np.array([0.5, 0.3, 0.2]) * np.log([0.5, 0.3, 0.2])), abs=1e-6)


def test_mirror_descent_equals_natural_gradient_in_the_small_step_limit():
    G = ig.Gaussian(dim=1, chart="natural")
    target = G.point(mean=1.0, std=0.5)
    cost = lambda z: G.kl(target, z)                              # noqa: E731
    x0 = G.point(mean=-0.5, std=1.5)
    errs = []
    for step, n in ((0.02, 25), (0.01, 50)):
        md = MirrorDescent(step, gradient_chart="natural", max_iter=n, grad_tol=0).minimize(G, cost, x0)
        ng = GradientDescent(step, max_iter=n, grad_tol=0).minimize(G, cost, x0)
        errs.append(np.abs(md.path() - ng.path()).max())
    assert errs[1] < 1e-2
    assert errs[1] / errs[0] == pytest.approx(0.5, rel=0.15)


def test_mirror_descent_other_direction_is_natural_gradient_in_the_natural_chart():
    G = ig.Gaussian(dim=1, chart="mean")
    target = G.point(mean=1.0, std=0.5)
    cost = lambda z: G.kl(target, z)                              # noqa: E731
    x0 = G.point(mean=-0.5, std=1.5)
    md = MirrorDescent(0.1, gradient_chart="mean", max_iter=10, grad_tol=0).minimize(G, cost, x0)
    Gn = G.in_chart("natural")
    ng = GradientDescent(0.1, max_iter=10, grad_tol=0).minimize(Gn, lambda z: Gn.kl(G.to_chart(target, "natural"), z),
                                                                G.to_chart(x0, "natural"))
    md_nat = np.stack([B.to_numpy(G.to_chart(B.array(z), "natural")) for z in md.path()])
    np.testing.assert_allclose(md_nat, ng.path(), rtol=1e-10, atol=1e-12)


def test_mirror_descent_needs_an_exponential_family():
    with pytest.raises(TypeError, match="exponential family"):
        MirrorDescent(0.1).minimize(ig.Euclidean(2), lambda x: B.sum(x * x), B.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="gradient_chart"):
        MirrorDescent(0.1, gradient_chart="standard")


# ----------------------------------------------------------- Fisher efficiency of online natural gradient (Amari 1998)
@pytest.mark.parametrize("chart", ["mean", "standard", "natural"])
@pytest.mark.parametrize("name", ["bernoulli", "categorical3", "gauss2"])
def test_online_natural_gradient_mle_is_the_running_mean(name, chart):
    """alpha_k = 1/(k + 1): the start counts as one pseudo-observation (alpha_1 = 1 would put the
    first iterate at t(x_1), a degenerate distribution on the boundary where Fisher is singular).  In every chart
    (the step is the mean chart's; the standard chart's own straight line gave a Gaussian's variance 2.39 for
    0.014 after two observations), the iterates returned in the family's chart."""
    from .conftest import make
    M = make(name).in_chart("mean")
    rng = np.random.default_rng(0)
    x0 = M.random_point(rng)
    truth = M.random_point(rng)
    data = M.sample(truth, 60, rng=1)
    C = M.in_chart(chart)
    its = online_mle(C, data, C.from_chart(x0, "mean"), step_size=InverseTime(1.0, 1.0))
    T = B.to_numpy(M.sufficient_statistics(data))
    running = (B.to_numpy(x0) + np.cumsum(T, axis=0)) / np.arange(2, len(T) + 2)[:, None]
    assert all(np.shape(z) == np.shape(its[0]) for z in its)
    np.testing.assert_allclose(np.stack([B.to_numpy(C.to_chart(z, "mean")) for z in its]), running, rtol=0,
                               atol=1e-10)


def test_online_mle_with_one_over_k_forgets_any_start():
    """alpha_k = 1/k exactly, from two different starts: every iterate is the sample mean so far."""
    F = ig.Gaussian(dim=2, covariance="fixed", cov=[[1.0, 0.3], [0.3, 2.0]])
    data = F.sample(F.point(mean=[1.0, -1.0]), 40, rng=4)
    running = np.cumsum(data, axis=0) / np.arange(1, 41)[:, None]
    for start in ([0.0, 0.0], [50.0, -7.0]):
        its = online_mle(F, data, B.array(start), step_size=InverseTime())
        np.testing.assert_allclose(np.stack(its), running, rtol=0, atol=1e-12)


# ----------------------------------------------------------- stochastic relaxation
def rosenbrock(X):
    X = np.atleast_2d(X)
    return np.sum(100 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (1 - X[:, :-1]) ** 2, axis=1)


def sphere(X):
    return np.sum(np.atleast_2d(X) ** 2, axis=1)


@pytest.mark.parametrize("f,x0", [(sphere, np.ones(10)), (rosenbrock, np.zeros(10))])
def test_stochastic_relaxation_minimises_10d_functions_to_1e8(f, x0):
    res = StochasticRelaxation(sigma0=0.5, f_target=1e-8, seed=0, max_evals=60_000).minimize(f, x0)
    assert res.success and res.fun <= 1e-8
    again = StochasticRelaxation(sigma0=0.5, f_target=1e-8, seed=0, max_evals=60_000).minimize(f, x0)
    assert again.nfev == res.nfev and np.array_equal(again.x, res.x)       # seeded
    if f is rosenbrock:
        np.testing.assert_allclose(res.x, np.ones(10), atol=1e-3)


def test_monte_carlo_natural_gradient_matches_the_exact_one():
    """E[f] for a quadratic f is closed form; its natural gradient by autodiff + Fisher vs Monte Carlo."""
    G = ig.Gaussian(dim=2)
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    b = np.array([1.0, -2.0])
    f = lambda X: np.einsum("ni,ij,nj->n", X, A, X) + X @ b           # noqa: E731

    def expected_f(s):
        mu, S = G.mean(s), G.cov(s)
        return B.trace(B.matmul(B.array(A), S)) + B.dot(mu, B.matmul(B.array(A), mu)) + B.dot(b, mu)

    p = G.point(mean=[0.5, -0.3], cov=[[1.0, 0.2], [0.2, 0.6]])
    exact = B.to_numpy(G.gradient(expected_f, p).components)
    mc = ig.solvers.mc_natural_gradient(G, p, f, 400_000, rng=0)
    assert np.all(np.abs(mc - exact) <= 0.03 * np.abs(exact).max())


def test_stochastic_relaxation_rejects_bad_settings():
    with pytest.raises(ValueError, match="sigma0"):
        StochasticRelaxation(sigma0=-1.0)
    # an objective without any finite value does not crash: the run stops and says why
    res = StochasticRelaxation(seed=0, max_evals=100).minimize(lambda X: np.full(len(X), np.nan), np.zeros(2))
    assert not res.success and "no finite value" in res.message and res.nfev <= 100


# ----------------------------------------------------------- the solvers' conventions (found by an independent probe)
def test_stochastic_relaxation_takes_a_callback_per_call_and_refuses_unknown_keywords():
    """``minimize(f, x0, callback=cb)`` as for every solver (it was dropped, and any keyword accepted)."""
    calls = []

    def stop_at_three(entry):
        calls.append(entry["iter"])
        return len(calls) >= 3
    r = StochasticRelaxation(1.0, seed=0, f_target=1e-8).minimize(sphere, np.zeros(3), callback=stop_at_three)
    assert len(calls) == 3 and r.nit == 3 and r.status == 2
    with pytest.raises(TypeError, match="max_evalz"):
        StochasticRelaxation(1.0, seed=0).minimize(sphere, np.zeros(3), max_evalz=10)


def test_stochastic_relaxation_verbose_logs_its_rows(caplog):
    """``verbose=10`` logs every 10th iteration of the search (it logged the run's header only)."""
    import logging
    with caplog.at_level(logging.INFO, logger="infogeo"):
        r = StochasticRelaxation(1.0, seed=0, f_target=1e-8, verbose=10).minimize(sphere, np.zeros(3))
    rows = [rec.getMessage() for rec in caplog.records if "evals" in rec.getMessage() and "best" in rec.getMessage()]
    assert len(rows) == r.nit // 10 and r.nit >= 20


def test_restart_messages_name_the_users_limits():
    """With restarts, a run's limit is what remained of the user's: the message named that remainder
    (max_evals=121 for 3001)."""
    def rastrigin(X):
        return 10 * X.shape[1] + np.sum(X ** 2 - 10 * np.cos(2 * np.pi * X), axis=1)
    r = StochasticRelaxation(2.0, restarts=9, seed=1, f_target=1e-8, max_evals=3001).minimize(rastrigin, np.full(4, 3.0))
    assert r.restarts >= 1 and "evaluation budget exhausted (max_evals=3001)" in r.message
    r = StochasticRelaxation(2.0, restarts=9, seed=1, f_target=1e-8, max_iter=150).minimize(rastrigin, np.full(4, 3.0))
    assert r.restarts >= 1 and "iteration limit reached (max_iter=150)" in r.message


def test_an_exp_step_that_overshoots_the_domain_is_a_failed_result():
    """A constant step whose geodesic ends at a variance below 0: status 3 with the reason, as the retraction gives
    (it raised the closed form's ValueError out of minimize, history lost)."""
    G = ig.Gaussian(dim=1)
    data = np.random.default_rng(1).normal(2.0, 0.5, size=50)
    r = GradientDescent(step_size=3.0, update="exp", max_iter=300).minimize(
        G, lambda p: -G.log_likelihood(p, data), G.point(mean=0.0, var=1.0))
    assert r.status == 3 and not r.success and "geodesic step could not be followed" in r.message
    assert len(r.history) == r.nit + 1


def test_a_negative_flow_time_is_refused():
    """``t_max < 0`` ran the flow backwards, uphill on E[f], and reported it reached."""
    from infogeo.solvers import natural_gradient_flow
    ising = ig.IsingModel(2, edges=[(0, 1)])
    f = lambda X: X[:, 0] + 2 * X[:, 1] + 3 * X[:, 0] * X[:, 1]   # noqa: E731
    with pytest.raises(ValueError, match="t_max"):
        natural_gradient_flow(ising, f, [0.0, 0.0, 0.0], t_max=-1.0)
    assert natural_gradient_flow(ising, f, [0.0, 0.0, 0.0], t_max=1.0).fun < 0


def test_discrete_igo_takes_numpy_float32_settings():
    onemax = lambda X: -(X > 0).sum(axis=1)   # noqa: E731
    r = ig.solvers.DiscreteIGO(10, seed=0, max_evals=100, learning_rate=np.float32(0.3),
                               theta_max=np.float32(1.0)).minimize(onemax)
    assert r.nfev <= 100
    with pytest.raises(ValueError, match="learning_rate"):
        ig.solvers.DiscreteIGO(10, learning_rate=np.float32(1.5))
